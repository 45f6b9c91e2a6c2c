"""A real one-node Slurm cluster for the tests: munged, slurmctld and slurmd from Debian's packages, started
in a private folder on loopback ports and stopped by their pids.

Everything lives under one folder (config, state, spool, logs, munge key and socket); the daemons run as
root (`SlurmdUser=root`, accounting off). The node advertises 8 GPUs through `GresTypes=gpu` backed by 8
character-device files, so `--gres=gpu:8` schedules without a GPU. Commands reach this cluster through
`SLURM_CONF` (see `Cluster.env`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.sshd import free_port

DAEMONS = ("munged", "slurmctld", "slurmd")


def slurm_missing() -> str | None:
    """Why this machine cannot run the test cluster (None when it can)."""
    for exe in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol"):
        if not (shutil.which(exe) or Path("/usr/sbin", exe).exists()):
            return f"{exe} is not installed: run the tests through scripts/test, which installs slurm (Debian)"
    if os.geteuid() != 0:
        return "the test Slurm cluster runs its daemons as root (SlurmdUser=root)"
    return None


def _exe(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


@dataclass
class Cluster:
    root: Path
    node: str = field(default_factory=lambda: socket.gethostname().split(".")[0] or "localhost")
    cpus: int = field(default_factory=lambda: os.cpu_count() or 2)
    pids: dict[str, int] = field(default_factory=dict)
    # On a GPU host: the real device files (/dev/nvidia0, ...) instead of 8 stand-ins, and for Slurm unpacked
    # off its usual place (dpkg -x), where its plugins and slurmstepd are.
    gres_files: list[str] | None = None
    plugin_dir: str | None = None
    stepd: str | None = None
    cgroup_conf: str | None = None  # cgroup.conf's text, for hosts where slurmd's defaults cannot start

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def devices(self) -> list[str]:
        return self.gres_files or [str(self.root / "dev" / f"nvidia{i}") for i in range(8)]

    @property
    def env(self) -> dict[str, str]:
        """What a Slurm client command needs to talk to this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def start(self, timeout: float = 60.0) -> Cluster:
        for d in ("state", "spool", "log", "dev", "munge"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self._write_munge_key()
        self._write_config()
        for dev in map(Path, self.devices):  # what --gres=gpu:N hands out: character devices, like /dev/nvidiaN
            if not dev.exists():
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))
        m = self.root / "munge"
        self._spawn("munged", [_exe("munged"), "--foreground", "--force", f"--socket={m / 'socket'}",
                               f"--key-file={m / 'munge.key'}", f"--pid-file={m / 'munged.pid'}",
                               f"--log-file={m / 'munged.log'}", f"--seed-file={m / 'seed'}"])
        self._wait_for(lambda: (m / "socket").exists(), timeout, "munged's socket")
        self._spawn("slurmctld", [_exe("slurmctld"), "-D", "-f", str(self.conf)])
        self._wait_for(self._controller_answers, timeout, "slurmctld to answer")
        # -N: this node's name as the config has it, whatever the machine's hostname looks like (an FQDN, say).
        self._spawn("slurmd", [_exe("slurmd"), "-D", "-f", str(self.conf), "-N", self.node]
                    + (["-d", self.stepd] if self.stepd else []))
        self._wait_for(self._node_idle, timeout, f"node {self.node} to become idle")
        return self

    def stop(self) -> None:
        """Stop the daemons this object started, by pid, slurmd first."""
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.pids.pop(name, None)
            proc = getattr(self, "_proc_" + name, None)
            if pid is None or proc is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(pid, signal.SIGKILL)
                proc.wait(timeout=10)
            except ProcessLookupError:
                pass

    # ------------------------------------------------------------------ commands for the tests

    def run(self, *argv: str, check: bool = True) -> str:
        r = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, env={**os.environ, **self.env})
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} → {r.returncode}: {r.stderr.strip()}")
        return r.stdout

    def node_state(self) -> str:
        return self.run("sinfo", "-h", "-n", self.node, "-o", "%T").strip()

    def set_node(self, state: str, reason: str = "test") -> None:
        args = ["scontrol", "update", f"NodeName={self.node}", f"State={state}"]
        if state.upper() in ("DRAIN", "DOWN"):
            args.append(f"Reason={reason}")
        self.run(*args)

    def jobs(self) -> list[str]:
        return self.run("squeue", "-h", "-o", "%i %T %j").split("\n")[:-1]

    # ------------------------------------------------------------------ internals

    def _write_munge_key(self) -> None:
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        (self.root / "munge").chmod(0o700)

    def _write_config(self) -> None:
        r = self.root
        ctld_port, slurmd_port = free_port(), free_port()
        self.conf.write_text(f"""\
ClusterName=harnesstest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={r / 'munge' / 'socket'}
StateSaveLocation={r / 'state'}
SlurmdSpoolDir={r / 'spool'}
SlurmctldPidFile={r / 'slurmctld.pid'}
SlurmdPidFile={r / 'slurmd.pid'}
SlurmctldLogFile={r / 'log' / 'slurmctld.log'}
SlurmdLogFile={r / 'log' / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=30
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
GresTypes=gpu
{f"PluginDir={self.plugin_dir}" if self.plugin_dir else ""}
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} Gres=gpu:{len(self.devices)} State=UNKNOWN
PartitionName=gpu Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
""")
        if self.cgroup_conf is not None:
            (r / "cgroup.conf").write_text(self.cgroup_conf)
        (r / "gres.conf").write_text("".join(f"NodeName={self.node} Name=gpu File={d}\n" for d in self.devices))

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **self.env}, start_new_session=True)
        log.close()
        self.pids[name] = proc.pid
        setattr(self, "_proc_" + name, proc)

    def _controller_answers(self) -> bool:
        self._check_alive()
        r = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, env={**os.environ, **self.env})
        return "UP" in r.stdout

    def _node_idle(self) -> bool:
        self._check_alive()
        r = subprocess.run(["sinfo", "-h", "-n", self.node, "-o", "%T"], capture_output=True, text=True,
                           env={**os.environ, **self.env})
        return r.stdout.strip().rstrip("*") == "idle"

    def _check_alive(self) -> None:
        for name in self.pids:
            proc = getattr(self, "_proc_" + name)
            if proc.poll() is not None:
                log = (self.root / "log" / f"{name}.out").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{log}")

    def _wait_for(self, cond, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what} (logs in {self.root / 'log'})")
            time.sleep(0.2)
