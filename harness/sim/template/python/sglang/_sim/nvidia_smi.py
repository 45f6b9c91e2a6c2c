"""A fake ``nvidia-smi`` for the simulated GPUs (``python -m sglang._sim.nvidia_smi``).

Supports ``--query-gpu=...``, ``--query-compute-apps=...`` with
``--format=csv[,noheader][,nounits]``, ``-i/--id``, ``-L`` and the plain summary table.
"""

import sys
import time

from sglang._sim import gpus

GPU_FIELDS = {
    # field: (header unit, value function(facts, index))
    "index": (None, lambda f, i: str(i)),
    "name": (None, lambda f, i: f["name"]),
    "gpu_name": (None, lambda f, i: f["name"]),
    "uuid": (None, lambda f, i: gpus.uuid_of(i)),
    "gpu_uuid": (None, lambda f, i: gpus.uuid_of(i)),
    "pci.bus_id": (None, lambda f, i: gpus.bus_id_of(i)),
    "gpu_bus_id": (None, lambda f, i: gpus.bus_id_of(i)),
    "compute_cap": (None, lambda f, i: f["compute_cap"]),
    "driver_version": (None, lambda f, i: f["driver_version"]),
    "count": (None, lambda f, i: str(f["count"])),
    "memory.total": ("MiB", lambda f, i: str(f["memory_total_mib"])),
    "memory.used": ("MiB", lambda f, i: str(gpus.used_mib(i))),
    "memory.free": ("MiB", lambda f, i: str(f["memory_total_mib"] - gpus.used_mib(i))),
    "utilization.gpu": ("%", lambda f, i: "0"),
    "utilization.memory": ("%", lambda f, i: "0"),
    "temperature.gpu": (None, lambda f, i: "31"),
    "power.draw": ("W", lambda f, i: "75.12"),
    "pstate": (None, lambda f, i: "P0"),
    "persistence_mode": (None, lambda f, i: "Enabled"),
}
APP_FIELDS = {
    "pid": (None, lambda r, f: str(r["pid"])),
    "process_name": (None, lambda r, f: r.get("name", "python")),
    "name": (None, lambda r, f: r.get("name", "python")),
    "used_memory": ("MiB", lambda r, f: str(r["used_mib"])),
    "used_gpu_memory": ("MiB", lambda r, f: str(r["used_mib"])),
    "gpu_uuid": (None, lambda r, f: gpus.uuid_of(r["gpu"])),
    "gpu_bus_id": (None, lambda r, f: gpus.bus_id_of(r["gpu"])),
    "gpu_name": (None, lambda r, f: f["name"]),
}
APP_HEADERS = {"used_memory": "used_gpu_memory"}


def _table(fields, spec, rows, fmt, headers=None):
    noheader = "noheader" in fmt
    nounits = "nounits" in fmt
    lines = []
    if not noheader:
        heads = []
        for name in fields:
            unit = spec[name][0]
            head = (headers or {}).get(name, name)
            heads.append(head + (" [%s]" % unit if unit else ""))
        lines.append(", ".join(heads))
    for row in rows:
        cells = []
        for name, value in zip(fields, row):
            unit = spec[name][0]
            cells.append(value if (nounits or not unit) else "%s %s" % (value, unit))
        lines.append(", ".join(cells))
    return lines


def _selected(facts, ids):
    all_ids = list(range(facts["count"]))
    if ids is None:
        return all_ids
    out = []
    for part in ids.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) >= facts["count"]:
            print("No devices were found matching the id %s" % part)
            sys.exit(6)
        out.append(int(part))
    return out


def _summary(facts, selected):
    now = time.strftime("%a %b %d %H:%M:%S %Y")
    print(now)
    bar = "+" + "-" * 89 + "+"
    print(bar)
    print(
        "| NVIDIA-SMI %-14s Driver Version: %-14s CUDA Version: %-13s|"
        % (facts["driver_version"], facts["driver_version"], facts["cuda_version"])
    )
    print(bar)
    for i in selected:
        used = gpus.used_mib(i)
        print("| %3d  %-36s On  | %-20s Off | %46s |" % (i, facts["name"][:36], gpus.bus_id_of(i), ""))
        print(
            "| N/A   31C    P0    75W / 700W | %9dMiB / %6dMiB |      0%%      Default %21s |"
            % (used, facts["memory_total_mib"], "")
        )
    print(bar)
    print("| Processes:" + " " * 78 + "|")
    print("|  GPU   PID   Type   Process name" + " " * 37 + "GPU Memory |")
    apps = [r for r in gpus.live_processes() if r["gpu"] in selected]
    if not apps:
        print("|  No running processes found" + " " * 61 + "|")
    for r in apps:
        print(
            "| %4d %7d      C   %-48s %8dMiB |"
            % (r["gpu"], r["pid"], r.get("name", "python")[-48:], r["used_mib"])
        )
    print(bar)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    facts = gpus.load_facts()
    query_gpu = query_apps = fmt = ids = None
    list_gpus = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--query-gpu="):
            query_gpu = arg.split("=", 1)[1]
        elif arg.startswith("--query-compute-apps="):
            query_apps = arg.split("=", 1)[1]
        elif arg.startswith("--format="):
            fmt = arg.split("=", 1)[1].split(",")
        elif arg in ("-i", "--id"):
            i += 1
            ids = argv[i] if i < len(argv) else ""
        elif arg.startswith("--id="):
            ids = arg.split("=", 1)[1]
        elif arg in ("-L", "--list-gpus"):
            list_gpus = True
        elif arg in ("-h", "--help"):
            print("NVIDIA System Management Interface -- simulated (sglang sim target)")
            return 0
        else:
            print('Invalid combination of input arguments. Please run "nvidia-smi -h" for help.')
            return 2
        i += 1

    selected = _selected(facts, ids)
    if list_gpus:
        for idx in selected:
            print("GPU %d: %s (UUID: %s)" % (idx, facts["name"], gpus.uuid_of(idx)))
        return 0
    if query_gpu is None and query_apps is None:
        _summary(facts, selected)
        return 0
    if fmt is None or "csv" not in fmt:
        print('"--format=csv" must be given with "--query-gpu" or "--query-compute-apps".')
        return 2

    if query_gpu is not None:
        fields = [f.strip() for f in query_gpu.split(",") if f.strip()]
        for name in fields:
            if name not in GPU_FIELDS:
                print('Field "%s" is not a valid field to query.' % name)
                print()
                return 2
        rows = [[GPU_FIELDS[n][1](facts, idx) for n in fields] for idx in selected]
        lines = _table(fields, GPU_FIELDS, rows, fmt)
    else:
        fields = [f.strip() for f in query_apps.split(",") if f.strip()]
        for name in fields:
            if name not in APP_FIELDS:
                print('Field "%s" is not a valid field to query.' % name)
                print()
                return 2
        apps = [r for r in gpus.live_processes() if r["gpu"] in selected]
        rows = [[APP_FIELDS[n][1](r, facts) for n in fields] for r in apps]
        lines = _table(fields, APP_FIELDS, rows, fmt, headers=APP_HEADERS)
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
