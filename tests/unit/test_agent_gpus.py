"""Which GPUs an attempt records: the ones CUDA_VISIBLE_DEVICES leaves to the server, not every GPU of the
box (seen live: on a two-H200 machine with one host entry per GPU, each record listed both GPUs, and the
other attempt's memory in use as this one's)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from harness.agent.gpu import query_gpus, visible_gpus
from harness.common.protocol import GpuInfo

UUIDS = ["GPU-5e1a0000-0000-4000-8000-000000000000", "GPU-77b2e0f1-1111-4000-8000-000000000001",
         "GPU-9c3d0000-2222-4000-8000-000000000002"]
BOX = [{"index": str(i), "uuid": u, "name": "NVIDIA H200"} for i, u in enumerate(UUIDS)]


def indices(gpus: list[dict[str, str]] | list[GpuInfo]) -> list[str]:
    return [g.index if isinstance(g, GpuInfo) else g["index"] for g in gpus]


def test_without_the_variable_every_gpu_is_visible():
    assert indices(visible_gpus(BOX, None)) == ["0", "1", "2"]


def test_indices_select_and_order_the_gpus():
    assert indices(visible_gpus(BOX, "2")) == ["2"]
    assert indices(visible_gpus(BOX, "2,0")) == ["2", "0"]
    assert indices(visible_gpus(BOX, " 1 , 2 ")) == ["1", "2"]


def test_uuid_prefixes_select_gpus_as_cuda_does():
    assert indices(visible_gpus(BOX, "GPU-77b2e0f1")) == ["1"]
    assert indices(visible_gpus(BOX, f"{UUIDS[2]},0")) == ["2", "0"]


def test_the_list_ends_at_the_first_entry_that_names_no_gpu():
    assert indices(visible_gpus(BOX, "1,7,0")) == ["1"]
    assert indices(visible_gpus(BOX, "GPU-")) == []  # a prefix of several UUIDs names none
    assert indices(visible_gpus(BOX, "0,0")) == ["0"]  # a repeated GPU ends the list (CUDA: invalid)
    assert visible_gpus(BOX, "") == [] and visible_gpus(BOX, "-1") == []


def test_query_gpus_applies_the_variable_to_what_nvidia_smi_prints(tmp_path: Path):
    """nvidia-smi itself ignores CUDA_VISIBLE_DEVICES: a stand-in that prints the whole box, like the real one."""
    smi = tmp_path / "nvidia-smi"
    rows = "\n".join(f"{i}, {u}, NVIDIA H200, 9.0, 143771, {i * 100}" for i, u in enumerate(UUIDS))
    smi.write_text(f"#!{sys.executable}\nprint('''{rows}''')\n")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    assert indices(query_gpus(env) or []) == ["0", "1", "2"]
    pinned = query_gpus({**env, "CUDA_VISIBLE_DEVICES": "1"})
    assert pinned == [GpuInfo(index="1", uuid=UUIDS[1], name="NVIDIA H200", compute_cap="9.0",
                              memory_total_mib="143771", memory_used_mib="100")]
