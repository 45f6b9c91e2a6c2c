"""A fake ``nvidia-smi`` for the simulated GPUs (``python -m sglang._sim.nvidia_smi``).

Supports ``--query-gpu=...``, ``--query-compute-apps=...`` with
``--format=csv[,noheader][,nounits]``, ``-i/--id``, ``-L``, ``--version`` and the plain summary table.
Clocks and power limits are each arch's (plausible, not measured); ``gpus.json`` may override any of
``CLOCKS``' keys (a capped power limit, application clocks set with ``-ac``).
"""

import sys
import time

from sglang._sim import gpus

# arch -> clocks (MHz) and power limit (W); the default application clocks are the max ones.
CLOCKS = {
    "sm90": {"sm_max_mhz": 1980, "mem_max_mhz": 3201, "sm_idle_mhz": 345, "power_limit_w": 700.0},
    "sm100": {"sm_max_mhz": 1965, "mem_max_mhz": 3996, "sm_idle_mhz": 120, "power_limit_w": 1000.0},
    "sm120": {"sm_max_mhz": 2617, "mem_max_mhz": 14001, "sm_idle_mhz": 180, "power_limit_w": 600.0},
}


def clock(facts, name):
    """A clock or power fact: gpus.json's own value, else the arch's (application clocks: the max ones)."""
    base = dict(CLOCKS.get(facts.get("arch"), CLOCKS["sm90"]))
    base.setdefault("app_sm_mhz", base["sm_max_mhz"])
    base.setdefault("app_mem_mhz", base["mem_max_mhz"])
    base.setdefault("default_power_limit_w", base["power_limit_w"])
    return facts.get(name, base.get(name))


def _sm_now(facts, i):
    """Busy (a process holds memory on it): the application clock; idle: the idle clock."""
    busy = any(r["gpu"] == i for r in gpus.live_processes())
    return str(clock(facts, "app_sm_mhz") if busy else clock(facts, "sm_idle_mhz"))


def _watts(value):
    return "%.2f" % float(value)


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
    "persistence_mode": (None, lambda f, i: f.get("persistence_mode", "Enabled")),
    "clocks.sm": ("MHz", _sm_now),
    "clocks.current.sm": ("MHz", _sm_now),
    "clocks.gr": ("MHz", _sm_now),
    "clocks.mem": ("MHz", lambda f, i: str(clock(f, "app_mem_mhz"))),
    "clocks.current.memory": ("MHz", lambda f, i: str(clock(f, "app_mem_mhz"))),
    "clocks.max.sm": ("MHz", lambda f, i: str(clock(f, "sm_max_mhz"))),
    "clocks.max.gr": ("MHz", lambda f, i: str(clock(f, "sm_max_mhz"))),
    "clocks.max.mem": ("MHz", lambda f, i: str(clock(f, "mem_max_mhz"))),
    "clocks.max.memory": ("MHz", lambda f, i: str(clock(f, "mem_max_mhz"))),
    "clocks.applications.graphics": ("MHz", lambda f, i: str(clock(f, "app_sm_mhz"))),
    "clocks.applications.memory": ("MHz", lambda f, i: str(clock(f, "app_mem_mhz"))),
    "clocks.default_applications.graphics": ("MHz", lambda f, i: str(clock(f, "sm_max_mhz"))),
    "clocks.default_applications.memory": ("MHz", lambda f, i: str(clock(f, "mem_max_mhz"))),
    "power.limit": ("W", lambda f, i: _watts(clock(f, "power_limit_w"))),
    "enforced.power.limit": ("W", lambda f, i: _watts(clock(f, "power_limit_w"))),
    "power.default_limit": ("W", lambda f, i: _watts(clock(f, "default_power_limit_w"))),
    "power.max_limit": ("W", lambda f, i: _watts(clock(f, "default_power_limit_w"))),
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
            "| N/A   31C    P0    75W / %3dW | %9dMiB / %6dMiB |      0%%      Default %21s |"
            % (clock(facts, "power_limit_w"), used, facts["memory_total_mib"], "")
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
        elif arg == "--version":
            driver = facts["driver_version"]
            print("NVIDIA-SMI version  : %s\nNVML version        : %s\nDRIVER version      : %s\n"
                  "CUDA Version        : %s" % (driver, driver.rsplit(".", 1)[0], driver, facts["cuda_version"]))
            return 0
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
