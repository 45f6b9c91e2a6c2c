"""Host health in a sweep (pure, the clock passed in): down after two infrastructure failures in a row, re-probed
30 s later, then 60 s, 120 s; back on an answer, given up after three failed probes."""

from __future__ import annotations

from harness.run.health import REPROBE_MAX, DownHost, HostHealth, reprobe_delay


def test_a_host_is_down_after_two_failures_in_a_row_and_a_success_between_resets_the_count():
    down: dict[str, DownHost] = {}
    health = HostHealth(down)
    assert health.failed("h", "connection timed out\nmore", now=0.0, wall=100.0) is None
    health.succeeded("h")
    assert not health.has_failures_in_row("h")
    assert health.failed("h", "connection timed out", now=1.0, wall=101.0) is None
    went = health.failed("h", "connection timed out\nmore", now=2.0, wall=102.0)
    assert went == DownHost("connection timed out (2 failures in a row)", 102.0)
    assert down == {"h": went} and health.changes == 1
    assert health.failed("h", "again", now=3.0, wall=103.0) is None, "already down: no second DownHost"


def test_a_down_host_is_probed_after_30_then_60_then_120_s_and_given_up_after_three_failed_probes():
    health = HostHealth({})
    health.failed("h", "", now=0.0, wall=0.0)
    down = health.failed("h", "", now=10.0, wall=10.0)
    assert down is not None and down.reason == "infra-error (2 failures in a row)"
    assert health.probe_wait("h", 10.0) == 30.0
    assert not health.probe_answered("h", "ssh: no route\nto host", now=40.0)
    assert health.probe_wait("h", 40.0) == 60.0
    assert not health.probe_answered("h", "", now=100.0)
    assert health.probe_wait("h", 100.0) == 120.0 and not health.given_up("h")
    assert not health.probe_answered("h", "refused", now=220.0)
    assert health.given_up("h")
    assert health.down["h"] == DownHost("infra-error (2 failures in a row); 3 re-probes failed, the last: refused",
                                        10.0)


def test_an_answer_brings_the_host_back_with_a_clean_slate():
    down: dict[str, DownHost] = {}
    health = HostHealth(down, down_after=1, reprobe_after=5.0)
    health.failed("h", "gone", now=0.0, wall=0.0)
    assert health.probe_wait("h", 0.0) == 5.0
    assert health.probe_answered("h", 8, now=5.0)
    assert down == {} and health.changes == 2 and not health.has_failures_in_row("h")
    assert health.failed("h", "gone again", now=6.0, wall=6.0) is not None  # down_after=1: at once, and probed anew
    assert health.probe_wait("h", 6.0) == 5.0


def test_the_backoff_doubles_up_to_ten_minutes():
    assert [reprobe_delay(30.0, n) for n in range(6)] == [30.0, 60.0, 120.0, 240.0, 480.0, REPROBE_MAX]
    assert REPROBE_MAX == 600.0
