"""The simulated GPUs: static facts and the processes that hold their memory.

Facts come from ``<state dir>/gpus.json`` (written when the target is created); it also
holds the simulated installation's FlashInfer version (``flashinfer_version``).
Every simulated scheduler process registers itself in ``<state dir>/procs/<pid>.json``
with the GPU it runs on and the memory it holds; the fake ``nvidia-smi`` and the
memory accounting of other servers read these files and ignore dead pids.
"""

import json
import os

from sglang._sim import state_dir

# arch -> (name, memory.total in MiB, compute capability)
GPU_SPECS = {
    "sm90": ("NVIDIA H200", 143771, "9.0"),
    "sm100": ("NVIDIA B200", 183359, "10.0"),
    "sm120": ("NVIDIA RTX PRO 6000 Blackwell", 97887, "12.0"),
}
DEFAULT_FACTS = {
    "arch": "sm90",
    "count": 8,
    "name": "NVIDIA H200",
    "memory_total_mib": 143771,
    "compute_cap": "9.0",
    "driver_version": "570.133.20",
    "cuda_version": "12.8",
    # Not a GPU fact, but a fact of the simulated installation: what its FlashInfer does.
    "flashinfer_version": "0.7.2",
}
# Memory a CUDA context takes before anything is allocated.
CONTEXT_MIB = 530


def load_facts():
    path = os.path.join(state_dir(), "gpus.json")
    try:
        with open(path) as f:
            facts = json.load(f)
    except FileNotFoundError:
        facts = {}
    merged = dict(DEFAULT_FACTS)
    merged.update(facts)
    return merged


def device_capability():
    major, minor = load_facts()["compute_cap"].split(".")
    return int(major), int(minor)


def uuid_of(index):
    return "GPU-5e1a0000-0000-4000-8000-%012d" % index


def bus_id_of(index):
    return "00000000:%02X:00.0" % (0x18 + 0x10 * index)


def physical_gpu(logical_id):
    """Map a CUDA device ordinal to a physical index, honouring CUDA_VISIBLE_DEVICES."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    count = load_facts()["count"]
    if visible is None or visible.strip() == "":
        ids = list(range(count)) if visible is None else []
    else:
        ids = []
        for part in visible.split(","):
            part = part.strip()
            if not part.isdigit() or int(part) >= count:
                break
            ids.append(int(part))
    if logical_id >= len(ids):
        return None
    return ids[logical_id]


# ---------------------------------------------------------------- process registry


def _procs_dir():
    return os.path.join(state_dir(), "procs")


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
        return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def register_process(gpu_index, used_mib):
    """Record (or update) that this process holds used_mib on a physical GPU."""
    directory = _procs_dir()
    os.makedirs(directory, exist_ok=True)
    pid = os.getpid()
    record = {"pid": pid, "gpu": gpu_index, "used_mib": int(used_mib), "name": _exe_name()}
    if leak_gpu_memory():
        record["leak"] = True  # a driver-level leak: the memory stays held after the process is gone
    tmp = os.path.join(directory, ".%d.tmp" % pid)
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, os.path.join(directory, "%d.json" % pid))


def leak_gpu_memory():
    return os.environ.get("SGLANG_SIM_LEAK_GPU_MEMORY", "") not in ("", "0", "false", "False")


def unregister_process():
    if leak_gpu_memory():
        return
    try:
        os.unlink(os.path.join(_procs_dir(), "%d.json" % os.getpid()))
    except FileNotFoundError:
        pass


def live_processes():
    """Registered processes that are still alive, sorted by (gpu, pid)."""
    out = []
    directory = _procs_dir()
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return out
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(directory, name)
        try:
            with open(path) as f:
                record = json.load(f)
        except (OSError, ValueError):
            continue
        if not pid_alive(int(record.get("pid", -1))) and not record.get("leak"):
            try:
                os.unlink(path)
            except OSError:
                pass
            continue
        out.append(record)
    out.sort(key=lambda r: (r["gpu"], r["pid"]))
    return out


def used_mib(gpu_index, exclude_pid=None):
    return sum(r["used_mib"] for r in live_processes() if r["gpu"] == gpu_index and r["pid"] != exclude_pid)


def _exe_name():
    import sys

    return sys.executable or "python"


# ---------------------------------------------------------------- memory of one process


def format_size(nbytes):
    """Like the CUDA caching allocator's format_size."""
    if nbytes < 1024 * 1024:
        return "%.2f KiB" % (nbytes / 1024.0)
    if nbytes < 1024**3:
        return "%.2f MiB" % (nbytes / 1024.0**2)
    return "%.2f GiB" % (nbytes / 1024.0**3)


class DeviceMemory(object):
    """Memory this process holds on one simulated GPU, visible to nvidia-smi."""

    def __init__(self, logical_id, physical_id):
        self.logical_id = logical_id
        self.physical_id = physical_id
        self.total_mib = load_facts()["memory_total_mib"]
        self.context_mib = CONTEXT_MIB
        self.allocated_mib = 0.0
        register_process(physical_id, self.used_mib())

    def used_mib(self):
        return self.context_mib + self.allocated_mib

    def free_mib(self):
        return self.total_mib - used_mib(self.physical_id, exclude_pid=os.getpid()) - self.used_mib()

    def available_gb(self):
        """What SGLang's get_available_gpu_memory reports (GiB, labelled GB)."""
        return max(self.free_mib(), 0) / 1024.0

    def allocate(self, nbytes):
        mib = nbytes / 1024.0**2
        if mib > self.free_mib():
            from sglang._sim.torch import OutOfMemoryError

            free_bytes = max(self.free_mib(), 0) * 1024.0**2
            mine = self.used_mib() * 1024.0**2
            raise OutOfMemoryError(
                "CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is "
                "free. Including non-PyTorch memory, this process has %s memory in use. Of the allocated "
                "memory %s is allocated by PyTorch, and %s is reserved by PyTorch but unallocated. If "
                "reserved but unallocated memory is large try setting "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
                "documentation for Memory Management  "
                "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
                % (
                    format_size(nbytes),
                    self.logical_id,
                    format_size(self.total_mib * 1024.0**2),
                    format_size(free_bytes),
                    format_size(mine),
                    format_size(self.allocated_mib * 1024.0**2),
                    format_size(min(self.allocated_mib * 0.01, 1500) * 1024.0**2),
                )
            )
        self.allocated_mib += mib
        register_process(self.physical_id, self.used_mib())

    def release(self):
        unregister_process()
