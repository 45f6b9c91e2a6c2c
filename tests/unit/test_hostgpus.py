"""GPU counts of sweep hosts: `gpus:` when the inventory says it (a user's limit), else asked of the host;
a host that cannot be asked is unusable for the sweep, with the reason."""

import threading
from dataclasses import replace
from typing import Any

import pytest

from harness.common.protocol import Final, GpuInfo, RepoStatus, Status
from harness.errors import HostUnreachable
from harness.experiments.config import HostConfig
from harness.experiments.files import read_inventory_file, read_sweep_file
from harness.experiments.plan import plan_sweep
from harness.hosts.gpus import answer_from_status, apply_answers, count_gpus
from harness.run.placement import why_host_does_not_fit
from tests.conftest import PATCHES

GPU = GpuInfo(index="0", uuid="GPU-0", name="NVIDIA H200", compute_cap="9.0")


def status_with(n: int) -> Final:
    return looked(gpus=[replace(GPU, index=str(i)) for i in range(n)])


def looked(**seen: Any) -> Final:
    """A status report of a git checkout at /r, with what the agent saw there."""
    return Final(status=Status.OK, repo_status=RepoStatus(repo="/r", exists=True, git=True, **seen))


def test_a_host_without_gpus_is_not_one_gpu(tmp_path):
    f = tmp_path / "hosts.yaml"
    f.write_text("hosts:\n  box:\n    address: local\n    repo: /r\n")
    assert read_inventory_file(f).inventory.hosts["box"].gpus is None


def test_the_count_is_read_from_a_status_report_or_the_reason_there_is_none():
    assert answer_from_status(status_with(8)) == 8
    assert answer_from_status(status_with(0)) == 0  # nvidia-smi works, CUDA_VISIBLE_DEVICES leaves none
    assert "nvidia-smi" in str(answer_from_status(looked(gpus=None)))
    assert "gpus:" in str(answer_from_status(looked(gpus=None)))
    assert "/r is not a git checkout" in str(answer_from_status(Final(repo_status=RepoStatus(repo="/r", exists=False))))
    assert "boom" in str(answer_from_status(Final(status=Status.INFRA_ERROR, error="boom")))


def test_an_explicit_gpus_wins_and_is_not_asked():
    hosts = {"limited": HostConfig(address="local", repo="/a", gpus=1, arch="sm90"),  # nothing to learn
             "auto": HostConfig(address="local", repo="/b"),
             "down": HostConfig(address="local", repo="/c")}
    asked: list[str] = []
    lock = threading.Lock()

    def ask(name: str, host: HostConfig) -> Final:
        with lock:
            asked.append(name)
        if name == "down":
            raise HostUnreachable(name, "connection refused")
        return status_with(8)

    counted = count_gpus(hosts, ask)
    assert sorted(asked) == ["auto", "down"]
    assert counted.usable["limited"].gpus == 1 and counted.usable["auto"].gpus == 8
    assert counted.asked == {"auto": 8}
    assert set(counted.unusable) == {"down"}
    assert "could not ask how many GPUs it has" in counted.unusable["down"]
    assert "connection refused" in counted.unusable["down"]
    assert hosts["auto"].gpus is None, "the inventory's config is not changed (attempt keys use it)"


def test_no_host_to_ask_asks_nothing():
    hosts = {"a": HostConfig(address="local", repo="/a", gpus=2, arch="sm90")}
    counted = count_gpus(hosts, lambda n, h: pytest.fail("asked a host with gpus: and arch:"))
    assert counted.usable == hosts and not counted.unusable and not counted.asked


def test_apply_answers_is_pure():
    hosts = {"a": HostConfig(address="local", repo="/a")}
    assert apply_answers(hosts, {"a": 4}).usable["a"].gpus == 4
    assert apply_answers(hosts, {"a": "no route"}).unusable == {"a": "could not ask how many GPUs it has: no route"}


def test_an_unknown_count_does_not_refuse_before_the_host_is_asked(tmp_path):
    """`--dry-run` asks no host: a host without `gpus:` fits as far as the plan knows."""
    (tmp_path / "base.yaml").write_text("name: base\nbackend: flashinfer-mla\nmodel: {path: /m}\nserver: {tp: 2}\n")
    (tmp_path / "s.yaml").write_text("name: s\nbase: base.yaml\n")
    a = plan_sweep(read_sweep_file(tmp_path / "s.yaml"), PATCHES, {}).attempts[0]
    assert why_host_does_not_fit(a, HostConfig(address="local", repo="/a")) is None
    assert why_host_does_not_fit(a, HostConfig(address="local", repo="/a", gpus=1)) == "needs 2 GPUs, has 1"


def test_the_arch_is_read_from_the_gpus_compute_capability_when_they_agree():
    from harness.hosts.gpus import arch_from_status

    assert arch_from_status(status_with(8)) == "sm90"
    assert arch_from_status(looked(gpus=[replace(GPU, compute_cap="10.0")])) == "sm100"
    assert arch_from_status(looked(gpus=[replace(GPU, compute_cap="12.1")])) == "sm121"
    mixed = looked(gpus=[GPU, replace(GPU, compute_cap="10.0")])
    for cannot_tell in (looked(gpus=None), looked(gpus=[]), looked(gpus=[replace(GPU, compute_cap="[N/A]")]), mixed,
                        looked(gpus=[replace(GPU, compute_cap="7.5")]), looked(gpus=[replace(GPU, compute_cap="")])):
        assert arch_from_status(cannot_tell) is None, cannot_tell


def test_a_host_without_arch_learns_it_from_the_simulated_target_and_placement_pins_to_it(tmp_path):
    """The probe before a sweep asks the simulated sm100 target (inventory: `gpus:` but no `arch:`): it learns
    sm100, so an sm90-only backend no longer fits it; a dead host without `arch:` (but with `gpus:`) stays
    usable and of unknown arch; the inventory's configs (that attempt keys use) are unchanged."""
    if "/mutants/" in __file__:
        pytest.skip("mutmut's rewritten copy imports mutmut, which the simulated target's Python does not have")
    from harness.run.runner import host_status
    from harness.sim import init_target

    target = init_target(tmp_path / "sglang", arch="sm100", gpus=4)
    hosts = {"b200": HostConfig(address="local", repo=str(target.repo), python=str(target.python), gpus=4,
                                workdir=str(tmp_path / "work")),
             "gone": HostConfig(address="127.0.0.1", port=1, repo="/r", gpus=8, connect_timeout=2)}
    counted = count_gpus(hosts, host_status)
    assert counted.learned_arch == {"b200": "sm100"}
    assert counted.usable["b200"].arch == "sm100" and counted.usable["gone"].arch is None
    assert hosts["b200"].arch is None
    f = tmp_path / "base.yaml"
    f.write_text("name: e\nbackend: flashinfer-mla-fp8\nmodel: {path: /m}\nserver: {port: auto, tp: 2}\n"
                 "bench: [{name: b, num_prompts: 1, input_len: 8, output_len: 8, max_concurrency: 1}]\n")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("name: s\nbase: base.yaml\nmatrix: {backend: [flashinfer-mla-fp8]}\n")
    a = plan_sweep(read_sweep_file(sweep), PATCHES, hosts).attempts[0]
    assert why_host_does_not_fit(a, hosts["b200"]) is None  # as configured: unknown arch, the agent would check
    assert "sm90" in str(why_host_does_not_fit(a, counted.usable["b200"]))
