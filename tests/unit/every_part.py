"""An agent's final report with every part a record keeps set (`Final`), and the record `make_record` makes of
it: what tests/fixtures/records/every-part.json holds, as the record format wrote it before the record's parts
became the outcome's own dataclasses (issue #46). Shared by the test that reads it back and the one that makes it
again."""

from __future__ import annotations

from pathlib import Path

from harness.common.protocol import (
    BenchFacts,
    CaseFacts,
    ChangedPaths,
    Final,
    GpuClocks,
    GpuInfo,
    GpuState,
    Hello,
    Journal,
    LockHolder,
    PatchFacts,
    PrefillTokens,
    PreflightFacts,
    RecoveryReport,
    RevertReport,
    ServerFacts,
    StackFacts,
    Status,
    StopReport,
)
from harness.experiments.config import HostConfig
from harness.experiments.resolve import resolve_file
from harness.experiments.spec import build_spec
from harness.results.schemas import Record
from harness.run.recording import AgentReport, make_record

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "records" / "every-part.json"
EXPERIMENT = "name: every-part\nbackend: flashinfer-mla\nmodel: {path: /m}\nbench: [{name: c1, num_prompts: 2}]\n"


def final() -> Final:
    gpus = [GpuState(index="0", sm_mhz=1980, mem_mhz=None, temperature_c=41.0, power_w=None, memory_used_mib=0)]
    return Final(
        status=Status.OK, timings={"ready_s": 12.5},
        preflight=PreflightFacts(
            base_commit="a" * 40, server_version="0.5.16", flashinfer_version="0.6.1",
            patch_variants={"p": "sglang==0.5.16"}, arch="sm_90", port=30001,
            gpus=[GpuInfo(index="0", uuid="GPU-1", name="NVIDIA H200", compute_cap="9.0", memory_total_mib="143771",
                          memory_used_mib="0")],
            warnings=["kv \x1b]52;c;Zm9v\x07 fits"], locked_by=LockHolder(run_id="r0", pid=7),
            stack=StackFacts(torch="2.9.1", cuda_runtime=None, sgl_kernel="0.3.21", driver="570.1\x1b[2J",
                             packages=310, gpus=[GpuClocks(index="0", sm_max_mhz=1980, power_limit_w=700.0)])),
        patch=PatchFacts(changed_paths=ChangedPaths(restore=["python/x.py"], delete=["python/new.py"])),
        server=ServerFacts(exit_code=0, stop=StopReport(signal="TERM", pids=[11, 12], stop_s=1.25)),
        bench=BenchFacts(cases=[CaseFacts(
            name="c1", prefix_cache="cold", seeds=[1001, 2001], warmup_seed=1, warmup=True, warmup_s=3.5,
            warmup_file="/host/attempt/bench-c1.warmup.jsonl", cooldown_s=None,
            prefill=[PrefillTokens(repeat=-1, new=100, cached=0, batches=1), PrefillTokens(repeat=0, new=90,
                                                                                         cached=10, batches=2)],
            gpu_start=gpus, gpu_end=gpus)]),
        revert=RevertReport(verified=True, tree_before="b" * 64, tree_after="b" * 64),
        recovered=RecoveryReport(journal=Journal(attempt_id="old-01", restore=["python/x.py"]),
                                 stop=StopReport(state="already-gone"),
                                 revert=RevertReport(verified=False, diff=["python/y.py"]), by="recover"))


def make(project: Path) -> Record:
    """`make_record` on `final()`, for an experiment written under `project` (a record carries its path)."""
    (project / "patches").mkdir(parents=True, exist_ok=True)
    f = project / "every-part.yaml"
    f.write_text(EXPERIMENT)
    r = resolve_file(f, project / "patches")
    spec = build_spec(r, HostConfig(address="local", repo="/r", python="/venv/bin/python"), run_id="r1",
                      attempt_id="every-part-01")
    follow = AgentReport(final=final(), hello=Hello(python="3.11.7", hostname="gpu-1"),
                         bench_rows={"c1": [{"output_throughput": 100.5, "completed": 2},
                                            {"output_throughput": 99, "completed": 2}]})
    record = make_record(r, "gpu-1", "r1", "every-part-01", spec, follow, project / "attempt", None, 42.0)
    record.experiment_file = "/project/every-part.yaml"  # where it was made: the same text wherever that is
    return record
