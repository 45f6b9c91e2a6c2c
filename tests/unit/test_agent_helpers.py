"""Pure helpers of the remote agent."""

from harness.agent import procs, server, tree
from harness.common import targetid


def test_numstat_paths_plain_and_renames():
    raw = "1\t1\tpython/a.py\0" "3\t0\t\0old/name.py\0new/name.py\0" "-\t-\tbin.dat\0"
    assert tree.numstat_paths(raw) == {"python/a.py", "old/name.py", "new/name.py", "bin.dat"}


def test_log_follower_handles_carriage_returns_ansi_and_partial_lines(tmp_path):
    log = tmp_path / "server.log"
    f = server.LogFollower(str(log), [r"^Scheduler hit an exception"], r"fired up and ready",
                          r"^(?:\[[^\]]*\]\s*)+")
    log.write_bytes(b"Capturing  0%\rCapturing 50%\rCapturing 100%\n\x1b[31m[2026-01-01 00:00:00 TP3] Scheduler hit an ")
    f.poll()
    assert f.tail == ["Capturing 100%"] and f.first_fatal is None
    with open(log, "ab") as w:
        w.write(b"exception: boom\x1b[0m\nThe server is fired up and ready to roll!")
    f.poll()
    assert f.first_fatal[1] == "[2026-01-01 00:00:00 TP3] Scheduler hit an exception: boom"
    assert not f.ready_seen  # the last line is not complete yet
    f.drain()
    assert f.ready_seen


def test_port_free_detects_listener():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    try:
        assert not procs.port_free("127.0.0.1", port)
    finally:
        s.close()
    assert procs.port_free("127.0.0.1", port)


def test_server_version_read_from_the_source_like_sglang_0523_lays_it_out(tmp_path):
    pkg = tmp_path / "python" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "version.py").write_text("try:\n    from sglang._version import __version__\nexcept ImportError:\n"
                                    "    __version__ = \"0.0.0.dev0\"\n")
    assert targetid.read_server_version(str(tmp_path)) is None
    (pkg / "_version.py").write_text("__version__ = version = '0.5.23'\n__version_tuple__ = (0, 5, 23)\n")
    assert targetid.read_server_version(str(tmp_path)) == "0.5.23"


def test_numstat_paths_keep_tabs_that_are_part_of_a_file_name():
    raw = "1\t0\tpkg/a\tb.py\0" "2\t2\tdocs/x\ty\tz.md\0"
    assert tree.numstat_paths(raw) == {"pkg/a\tb.py", "docs/x\ty\tz.md"}
