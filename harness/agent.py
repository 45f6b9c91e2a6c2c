#!/usr/bin/env python3
"""Remote agent: the host side of one attempt, in one self-contained file (standard library only).

The controller uploads this file to the host, starts it with the host's own Python (>= 3.8) over one
SSH channel (or as a local subprocess), and writes the attempt spec as one JSON line on its stdin. The
agent then runs the whole lifecycle next to the server and streams JSON-lines events on stdout:

    LOCK → PREFLIGHT → PATCH → LAUNCH → WAIT → BENCH → STOP → REVERT → VERIFY → final event

Why here and not on the controller: `waitpid` and the log file are local to the host, so a warmup crash
is seen in milliseconds whatever the SSH latency; and the agent holds a dead man's switch — when its
stdin closes (controller killed, connection lost) or the heartbeat stops, it stops the server and
reverts before exiting. A journal under `.git/harness/` covers the agent itself being killed: the next
agent on that repo finds it and recovers before doing anything else.

Process safety: the server runs in its own session (process group); every process of the attempt
carries HARNESS_ATTEMPT=<marker> in its environment, so stragglers are found and ended by pid only
after proving they are ours. Nothing is ever run through a shell.
"""

from __future__ import annotations

import base64
import ctypes
import errno
import fcntl
import fnmatch
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request

PROTOCOL = 1
TICK_S = 0.05
MARKER_ENV = "HARNESS_ATTEMPT"
LOG_TAIL_LINES = 400
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


# ============================================================================ link to the controller


class Link:
    """JSON lines out on stdout; commands in on stdin, watched by a thread (the dead man's switch)."""

    def __init__(self):
        self._out_lock = threading.Lock()
        self.wake = threading.Event()
        self.abort_reason = None  # type: str | None
        self.last_heard = time.monotonic()
        self.closed = False

    def emit(self, event, **fields):
        if self.closed:
            return
        fields["event"] = event
        fields["t"] = time.time()
        data = json.dumps(fields, default=str) + "\n"
        with self._out_lock:
            try:
                sys.stdout.write(data)
                sys.stdout.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.closed = True
                self.abort("controller-gone")

    def abort(self, reason):
        if self.abort_reason is None:
            self.abort_reason = reason
        self.wake.set()

    def read_spec(self):
        line = sys.stdin.readline()
        if not line:
            raise SystemExit(3)
        return json.loads(line)

    def keep_alive(self, interval):
        """A line every `interval` seconds, so the controller can tell a quiet agent from a lost link."""
        def run():
            while not self.closed:
                time.sleep(interval)
                self.emit("alive")

        threading.Thread(target=run, name="alive", daemon=True).start()

    def watch_stdin(self):
        def run():
            for line in sys.stdin:
                self.last_heard = time.monotonic()
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if msg.get("cmd") == "abort":
                    self.abort("aborted")
                elif msg.get("cmd") == "ping" and msg.get("echo") is not None:
                    self.emit("pong", echo=msg["echo"], host_time=time.time())
            self.abort("controller-gone")

        threading.Thread(target=run, name="stdin", daemon=True).start()


class Aborted(Exception):
    pass


class StageFailed(Exception):
    """Ends the attempt with `status`; `message` says why in words a user can act on."""

    def __init__(self, status, message, **details):
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details


# ============================================================================ small host helpers


def run(argv, cwd=None, env=None, timeout=120, input_bytes=None):
    return subprocess.run(argv, cwd=cwd, env=env, input=input_bytes, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=timeout)


class Git:
    def __init__(self, repo):
        self.repo = repo

    def __call__(self, *args, env=None, check=True, input_bytes=None):
        full_env = None
        if env:
            full_env = dict(os.environ)
            full_env.update(env)
        p = run(["git", "-C", self.repo] + list(args), env=full_env, input_bytes=input_bytes)
        if check and p.returncode != 0:
            raise StageFailed("preflight-failed", "git %s failed: %s" % (
                " ".join(args[:3]), p.stderr.decode(errors="replace").strip()[-1500:]))
        return p

    def out(self, *args, **kw):
        return self(*args, **kw).stdout.decode(errors="surrogateescape")

    def status_entries(self):
        """Dirty paths (tracked changes and untracked-not-ignored files), from porcelain v1 -z."""
        raw = self.out("status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames")
        paths = []
        for entry in raw.split("\0"):
            if len(entry) > 3:
                paths.append((entry[:2], entry[3:]))
        return paths

    def tracked(self, paths):
        if not paths:
            return set()
        p = self("ls-files", "-z", "--", *paths)
        return set(x for x in p.stdout.decode(errors="surrogateescape").split("\0") if x)

    def tree_state(self, scratch_dir):
        """Content hash of the work tree: tracked files plus untracked files that are not ignored.

        Built with a throw-away index (the real one is never touched), so it is git's own tree hash of
        exactly what is on disk; two equal hashes mean byte-identical trees (modes included).
        """
        gitdir = self.out("rev-parse", "--absolute-git-dir").strip()
        index = os.path.join(scratch_dir, "tree-index-%d" % os.getpid())
        try:
            real = os.path.join(gitdir, "index")
            if os.path.exists(real):
                shutil.copyfile(real, index)
            env = {"GIT_INDEX_FILE": index}
            self("add", "-A", "--", ".", env=env)
            return self.out("write-tree", env=env).strip()
        finally:
            if os.path.exists(index):
                os.remove(index)


def proc_stat(pid):
    """(state, ppid, pgid, starttime) from /proc/<pid>/stat, or None when gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read().decode(errors="replace")
    except (OSError, ValueError):
        return None
    fields = data[data.rfind(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19])


def all_pids():
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def group_members(pgid):
    out = []
    for pid in all_pids():
        st = proc_stat(pid)
        if st and st[2] == pgid and st[0] != "Z":
            out.append(pid)
    return out


def marked_pids(marker):
    """Live processes whose environment carries our attempt marker (only ours can carry it)."""
    needle = ("%s=%s" % (MARKER_ENV, marker)).encode()
    out = []
    for pid in all_pids():
        if pid == os.getpid():
            continue
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        st = proc_stat(pid)
        if needle in env and st and st[0] != "Z":
            out.append(pid)
    return out


def reap_adopted(exclude=()):
    """Reap zombies re-parented to us (we are a child subreaper), never our own Popen children."""
    me = os.getpid()
    for pid in all_pids():
        if pid in exclude:
            continue
        st = proc_stat(pid)
        if st and st[1] == me and st[0] == "Z":
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def become_subreaper():
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass


def listening_inodes(port):
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    local, state, inode = parts[1], parts[3], parts[9]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        inodes.add(inode)
        except OSError:
            continue
    return inodes


def pids_holding(inodes, pids):
    holders = []
    targets = set("socket:[%s]" % i for i in inodes)
    for pid in pids:
        try:
            fds = os.listdir("/proc/%d/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink("/proc/%d/fd/%s" % (pid, fd)) in targets:
                    holders.append(pid)
                    break
            except OSError:
                continue
    return holders


def pick_free_port(host):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.bind((host if host not in ("0.0.0.0", "::") else "", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def fill_slots(argv, port):
    """Replace the controller's {"slot": "port"} placeholders with the port chosen on the host."""
    return [str(port) if isinstance(a, dict) and a.get("slot") == "port" else a for a in argv]


def port_free(host, port):
    if listening_inodes(port):
        return False
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def write_json_atomic(path, obj):
    tmp = path + ".tmp-%d" % os.getpid()
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


VERSION_RE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)""", re.MULTILINE)


def read_server_version(repo):
    """SGLang's version from its source: _version.py (written by the build) first, then version.py;
    only module-level assignments count (version.py also holds a '0.0.0.dev0' fallback)."""
    for rel in ("python/sglang/_version.py", "python/sglang/version.py"):
        try:
            with open(os.path.join(repo, rel)) as f:
                m = VERSION_RE.search(f.read())
            if m:
                return m.group(1)
        except OSError:
            continue
    return None


def arch_of(compute_cap):
    """'9.0' -> 'sm90', '12.0' -> 'sm120' (nvidia-smi's compute_cap)."""
    try:
        major, minor = str(compute_cap).strip().split(".")
        return "sm%d%d" % (int(major), int(minor))
    except ValueError:
        return None


def read_backend_choices(repo):
    """The --attention-backend choices of the SGLang checkout, read from its source (importing SGLang
    would take many seconds and a GPU stack). None when no literal list is found."""
    import ast

    candidates = ["python/sglang/srt/arg_groups/choices.py", "python/sglang/srt/server_args.py"]
    for rel in candidates:
        try:
            with open(os.path.join(repo, rel)) as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ATTENTION_BACKEND_CHOICES"
                                                    for t in node.targets):
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    return None
                return [str(v) for v in value]
    return None


def query_gpus(env):
    exe = shutil.which("nvidia-smi", path=env.get("PATH"))
    if not exe:
        return None
    try:
        p = run([exe, "--query-gpu=index,name,compute_cap,memory.total,memory.used",
                 "--format=csv,noheader,nounits"], env=env, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    gpus = []
    for line in p.stdout.decode(errors="replace").splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) >= 5:
            gpus.append({"index": parts[0], "name": parts[1], "compute_cap": parts[2],
                         "memory_total_mib": parts[3], "memory_used_mib": parts[4]})
    return gpus


# ============================================================================ server log follower


class LogFollower:
    """Reads the server's log file as it grows: lines (tqdm `\\r` redraws collapsed, ANSI stripped),
    fatal-pattern and ready-pattern matches, and the time of the last growth (for the hang timer)."""

    def __init__(self, path, fatal_patterns, ready_pattern, prefix_pattern=None):
        self.path = path
        self.fatal = [re.compile(p) for p in fatal_patterns]
        self.prefix = re.compile(prefix_pattern) if prefix_pattern else None
        self.ready = re.compile(ready_pattern)
        self._f = None
        self._partial = b""
        self.tail = []
        self.last_growth = time.monotonic()
        self.first_fatal = None  # (monotonic time, line)
        self.ready_seen = False
        self.lines_read = 0

    def poll(self):
        if self._f is None:
            try:
                self._f = open(self.path, "rb")
            except OSError:
                return
        data = self._f.read()
        if not data:
            return
        self.last_growth = time.monotonic()
        data = self._partial + data
        pieces = data.split(b"\n")
        self._partial = pieces.pop()
        for raw in pieces:
            self._line(raw)

    def drain(self):
        self.poll()
        if self._partial:
            self._line(self._partial)
            self._partial = b""

    def _line(self, raw):
        text = ANSI_RE.sub("", raw.decode("utf-8", errors="replace")).rstrip("\r")
        if "\r" in text:
            text = text.rsplit("\r", 1)[-1]
        self.lines_read += 1
        self.tail.append(text)
        if len(self.tail) > LOG_TAIL_LINES:
            del self.tail[: len(self.tail) - LOG_TAIL_LINES]
        message = self.prefix.sub("", text.lstrip(), count=1) if self.prefix else text
        if self.first_fatal is None and any(p.search(message) for p in self.fatal):
            self.first_fatal = (time.monotonic(), text)
        if not self.ready_seen and self.ready.search(text):
            self.ready_seen = True

    def close(self):
        if self._f:
            self._f.close()


class HealthProbe:
    """Polls GET /health_generate in a thread until it answers 200 (or is told to stop)."""

    def __init__(self, url, wake):
        self.url = url
        self.ok = False
        self.last_error = None
        self._stop = threading.Event()
        self._wake = wake
        threading.Thread(target=self._run, name="health", daemon=True).start()

    def _run(self):
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via http_proxy
        while not self._stop.is_set():
            try:
                with opener.open(self.url, timeout=25) as r:
                    if r.status == 200:
                        self.ok = True
                        self._wake.set()
                        return
            except (urllib.error.URLError, OSError, ValueError) as exc:
                self.last_error = str(exc)
            self._stop.wait(0.2)

    def stop(self):
        self._stop.set()


# ============================================================================ the attempt


class Attempt:
    def __init__(self, spec, link):
        self.spec = spec
        self.link = link
        self.repo = os.path.abspath(os.path.expanduser(spec["repo"]))
        self.git = Git(self.repo)
        self.workdir = os.path.abspath(os.path.expanduser(spec.get("workdir") or "~/.cache/harness"))
        self.attempt_dir = os.path.join(self.workdir, "attempts", spec["run_id"], spec["attempt_id"])
        self.marker = "%s/%s" % (spec["run_id"], spec["attempt_id"])
        self.timeouts = spec["timeouts"]
        self.timings = {}
        self.gitdir = None
        self.lock_fd = None
        self.journal_path = None
        self.journal = None
        self.server = None
        self.server_pgid = None
        self.server_start = None
        self.server_died_at = None
        self.server_exit = None
        self.log = None
        self.log_path = os.path.join(self.attempt_dir, "server.log")
        self.bench_files = {}
        self.result = {"status": "ok", "error": None}
        self.recovered = None
        self._stage = None
        self._stage_t = None
        self.t_start = time.monotonic()
        self.seen_pids = set()  # every pid of the server's group seen alive: checked on the GPUs at the end

    # ------------------------------------------------------------------ plumbing

    def stage(self, name):
        now = time.monotonic()
        if self._stage is not None:
            self.timings[self._stage + "_s"] = round(now - self._stage_t, 4)
        self._stage, self._stage_t = name, now
        if name is not None:
            self.link.emit("stage", stage=name)

    def check_abort(self):
        deadline = self.spec.get("deadline_s")
        if deadline and time.monotonic() - self.t_start > float(deadline) and not self.link.abort_reason:
            self.result["budget_exceeded"] = True
            self.link.abort("the attempt's time budget of %ss is spent" % deadline)
        hb = self.spec.get("heartbeat_timeout_s")
        if hb and time.monotonic() - self.link.last_heard > hb:
            self.link.abort("controller-silent")
        if self.link.abort_reason:
            raise Aborted(self.link.abort_reason)

    def server_env(self):
        env = dict(os.environ)
        env.update(self.spec["server"].get("env") or {})
        python = self.spec["server"]["argv"][0]
        if os.path.isabs(python):
            env["PATH"] = os.path.dirname(python) + os.pathsep + env.get("PATH", "")
        env["PYTHONUNBUFFERED"] = "1"
        # Bytecode goes to our work dir, not into __pycache__/ beside the sources: the target tree must
        # stay byte-identical even where the repo does not ignore __pycache__.
        env["PYTHONPYCACHEPREFIX"] = os.path.join(self.workdir, "pycache")
        env[MARKER_ENV] = self.marker
        return env

    # ------------------------------------------------------------------ lifecycle

    def recover(self):
        """On demand: take the lock, and if a journal is left, stop its server and restore the tree."""
        t0 = time.monotonic()
        try:
            self.stage("lock")
            self.take_lock()
            self.stage("recover")
            self.recover_leftover_journal()
            if self.recovered is None:
                self.result["recovered"] = None
                self.result["message"] = "no journal: nothing to recover"
        except StageFailed as exc:
            self.result.update(status=exc.status, error=exc.message, **exc.details)
        except Exception:
            self.result.update(status="infra-error", error="agent error:\n" + traceback.format_exc())
        finally:
            self.stage(None)
            self.release_lock()
            self.timings["total_s"] = round(time.monotonic() - t0, 4)
        return self.result

    def run(self):
        t0 = self.t_start = time.monotonic()
        try:
            self.stage("lock")
            self.take_lock()
            self.stage("preflight")
            self.recover_leftover_journal()
            plan = self.preflight()
            self.check_abort()
            self.stage("patch")
            self.apply(plan)
            self.check_abort()
            if self.spec.get("mode") == "apply-revert":  # a dry run of the patches: apply, compile, revert
                self.stage("compile")
                self.compile_changed()
                return self.result
            self.stage("launch")
            self.launch()
            self.stage("wait")
            self.wait_ready()
            self.link.emit("ready", ready_s=round(time.monotonic() - self.t_launch, 3))
            self.stage("bench")
            self.bench()
            if self.spec.get("profile"):
                self.stage("profile")
                self.profile()
        except Aborted as exc:
            self.result.update(status="aborted", error="attempt aborted: %s" % exc)
        except StageFailed as exc:
            self.result.update(status=exc.status, error=exc.message, **exc.details)
        except Exception:
            self.result.update(status="infra-error", error="agent error:\n" + traceback.format_exc())
        finally:
            self.cleanup()
            self.timings["total_s"] = round(time.monotonic() - t0, 4)
        return self.result

    def cleanup(self):
        """Stop and revert on every path; a failure here is reported, never swallowed."""
        try:
            if self.server is not None:
                self.stage("stop")
                self.result["stop"] = self.stop_server()
            if self.journal is not None:
                self.stage("revert")
                self.result["revert"] = self.revert(self.journal)
                if not self.result["revert"]["verified"] and self.result["status"] == "ok":
                    self.result.update(status="infra-error", error="revert could not be verified")
        except Exception:
            self.result.update(status="infra-error", error="cleanup failed:\n" + traceback.format_exc())
        finally:
            self.stage(None)
            if self.log is not None:
                self.log.close()
            self.release_lock()

    # ------------------------------------------------------------------ lock

    def take_lock(self):
        if not os.path.isdir(self.repo):
            raise StageFailed("preflight-failed", "target repo %s does not exist on the host" % self.repo)
        p = self.git("rev-parse", "--absolute-git-dir", check=False)
        if p.returncode != 0:
            raise StageFailed("preflight-failed", "%s is not a git repository" % self.repo)
        self.gitdir = p.stdout.decode().strip()
        hdir = os.path.join(self.gitdir, "harness")
        os.makedirs(hdir, exist_ok=True)
        self.journal_path = os.path.join(hdir, "journal.json")
        lock_path = os.path.join(hdir, "lock")
        holder_path = lock_path + ".json"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + float(self.spec.get("lock_wait_s") or 0)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
            if time.monotonic() >= deadline:
                os.close(fd)
                holder = {}
                try:
                    with open(holder_path) as f:
                        holder = json.load(f)
                except (OSError, ValueError):
                    pass
                raise StageFailed(
                    "infra-error",
                    "target repo %s is locked by run %s attempt %s (agent pid %s on this host) since %s"
                    % (self.repo, holder.get("run_id", "?"), holder.get("attempt_id", "?"),
                       holder.get("pid", "?"), holder.get("since", "?")),
                    locked_by=holder)
            self.check_abort()
            self.link.wake.wait(0.25)
        self.lock_fd = fd
        write_json_atomic(holder_path, {"run_id": self.spec["run_id"], "attempt_id": self.spec["attempt_id"],
                                        "pid": os.getpid(),
                                        "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")})

    def release_lock(self):
        if self.lock_fd is not None:
            try:
                os.remove(os.path.join(self.gitdir, "harness", "lock.json"))
            except OSError:
                pass
            os.close(self.lock_fd)
            self.lock_fd = None

    # ------------------------------------------------------------------ preflight

    def recover_leftover_journal(self):
        if not os.path.exists(self.journal_path):
            return
        with open(self.journal_path) as f:
            journal = json.load(f)
        self.link.emit("recovering", journal=journal)
        stopped = stop_recorded_server(journal, float(self.timeouts.get("stop_grace", 10)))
        revert = self.revert(journal)
        self.recovered = {"journal": journal, "stop": stopped, "revert": revert}
        self.result["recovered"] = self.recovered
        if not revert["verified"]:
            raise StageFailed("preflight-failed",
                              "found the journal of an interrupted attempt (%s) and could not restore the "
                              "tree exactly; changed paths: %s" % (journal.get("attempt_id"),
                                                                    ", ".join(revert.get("diff", [])[:20])))

    def preflight(self):
        spec = self.spec
        os.makedirs(self.attempt_dir, exist_ok=True)
        base = self.git.out("rev-parse", "HEAD").strip()
        self.result["base_commit"] = base
        if spec.get("base_ref"):
            p = self.git("rev-parse", "--verify", spec["base_ref"] + "^{commit}", check=False)
            want = p.stdout.decode().strip()
            if p.returncode != 0:
                raise StageFailed("preflight-failed", "base_ref %r is not known in %s" % (spec["base_ref"], self.repo))
            if want != base:
                raise StageFailed("preflight-failed", "HEAD is %s but the experiment pins base_ref %r = %s"
                                  % (base[:12], spec["base_ref"], want[:12]))
        self.result["server_version"] = read_server_version(self.repo)
        self.result["gpus"] = query_gpus(self.server_env())
        allow = spec.get("allow_dirty") or []
        dirty_before = self.git.status_entries()
        unexpected = [p for _, p in dirty_before if not any(fnmatch.fnmatch(p, g) for g in allow)]
        if unexpected:
            raise StageFailed("preflight-failed",
                              "target tree %s is not clean; %d dirty path(s): %s" % (
                                  self.repo, len(unexpected), ", ".join(unexpected[:30])),
                              dirty=unexpected)
        srv = spec["server"]
        if srv["port"] == "auto":
            srv["port"] = pick_free_port(srv.get("host", "127.0.0.1"))
            self.result["port"] = srv["port"]
        elif not port_free(srv.get("host", "127.0.0.1"), int(srv["port"])):
            raise StageFailed("preflight-failed", "port %s is already in use on the host (set `port: auto` in the "
                              "experiment to let the harness pick a free one)" % srv["port"], port_in_use=srv["port"])
        tree_before = self.git.tree_state(self.attempt_dir)
        self.check_target_fits()

        # Patches: write them out, learn which paths they touch, check they apply (changes nothing).
        pdir = os.path.join(self.attempt_dir, "patches")
        os.makedirs(pdir, exist_ok=True)
        patch_paths = []
        for i, p in enumerate(spec.get("patches") or []):
            path = os.path.join(pdir, "%02d-%s-%s" % (i, p["set"], p["name"]))
            with open(path, "w") as f:
                f.write(p["text"])
            patch_paths.append(path)
        touched = set()
        if patch_paths:
            check = self.git("apply", "--check", "--whitespace=nowarn", *patch_paths, check=False)
            if check.returncode != 0:
                raise StageFailed("apply-failed", self.name_failing_patch(patch_paths, base, check))
            raw = self.git.out("apply", "--numstat", "-z", *patch_paths)
            touched.update(numstat_paths(raw))
        new_files = []
        for entry in spec.get("files") or []:
            rel = entry["path"]
            if rel.startswith("/") or ".." in rel.split("/") or rel.split("/")[0] == ".git":
                raise StageFailed("apply-failed", "patch set %s: unsafe path in files/: %r" % (entry["set"], rel))
            touched.add(rel)
            new_files.append(entry)
        tracked = self.git.tracked(sorted(touched))
        dirty_paths = set(p for _, p in dirty_before)
        clash = sorted(touched & dirty_paths)
        if clash:
            raise StageFailed("preflight-failed", "patches touch paths that are dirty (allow-listed) in the "
                              "target tree: %s" % ", ".join(clash))
        restore = sorted(touched & tracked)
        delete = sorted(touched - tracked)
        for rel in delete:
            if os.path.lexists(os.path.join(self.repo, rel)):
                raise StageFailed("apply-failed", "would overwrite %s, which exists but is not tracked by git "
                                  "(your file? move it away first)" % rel)
        created_dirs = set()
        for rel in delete:
            d = os.path.dirname(rel)
            while d and not os.path.isdir(os.path.join(self.repo, d)):
                created_dirs.add(d)
                d = os.path.dirname(d)
        return {"base": base, "tree_before": tree_before, "dirty_before": sorted(dirty_paths),
                "patch_paths": patch_paths, "new_files": new_files, "restore": restore, "delete": delete,
                "created_dirs": sorted(created_dirs, key=lambda d: -d.count("/"))}

    def name_failing_patch(self, patch_paths, base, failed):
        """Patches apply as a series: find the first one that does not, so the message can name it."""
        culprit, err = None, failed.stderr
        for k in range(1, len(patch_paths) + 1):
            p = self.git("apply", "--check", "--whitespace=nowarn", *patch_paths[:k], check=False)
            if p.returncode != 0:
                culprit, err = self.spec["patches"][k - 1], p.stderr
                break
        where = "patch set %s, %s" % (culprit["set"], culprit["name"]) if culprit else "the patches"
        return "%s does not apply to %s at %s:\n%s" % (where, self.repo, base[:12],
                                                       err.decode(errors="replace").strip()[-3000:])

    def check_target_fits(self):
        """Refuse what cannot run here: a backend this SGLang does not know, a GPU arch the backend's
        kernels do not support, too few GPUs. With `expect: crash` it runs anyway (to reproduce a
        failure on purpose) and the problems are recorded as warnings."""
        req = self.spec.get("requirements") or {}
        gpus = self.result.get("gpus")
        detected = arch_of(gpus[0]["compute_cap"]) if gpus else None
        arch = req.get("arch") or detected
        self.result["arch"] = arch
        problems = []
        backend = req.get("attention_backend")
        if backend:
            choices = read_backend_choices(self.repo)
            self.result["attention_backend_choices"] = choices
            added = any(('"%s"' % backend) in p["text"] or ("'%s'" % backend) in p["text"]
                        for p in self.spec.get("patches") or [])
            if choices is not None and backend not in choices and not added:
                problems.append("SGLang %s on this host does not accept --attention-backend %s (valid: %s)"
                                % (self.result.get("server_version") or "?", backend, ", ".join(choices)))
        archs = req.get("archs")
        if archs and arch and arch not in archs:
            gpu_name = gpus[0]["name"] if gpus else "this GPU"
            problems.append("backend %s needs %s; this host's GPU is %s (%s)"
                            % (req.get("backend") or backend, "/".join(archs), arch, gpu_name))
        need = int(req.get("gpus") or 0)
        if gpus is not None and need > len(gpus):
            problems.append("the experiment needs %d GPUs; nvidia-smi on this host shows %d" % (need, len(gpus)))
        if problems:
            if self.spec.get("expect") == "crash":
                self.result["preflight_warnings"] = problems
                self.link.emit("warning", problems=problems)
            else:
                raise StageFailed("preflight-failed", "cannot run here: " + "; ".join(problems),
                                  cannot_run=problems)

    # ------------------------------------------------------------------ patch

    def apply(self, plan):
        self.journal = {
            "version": 1, "run_id": self.spec["run_id"], "attempt_id": self.spec["attempt_id"],
            "agent_pid": os.getpid(), "marker": self.marker, "repo": self.repo,
            "base_commit": plan["base"], "tree_before": plan["tree_before"],
            "dirty_before": plan["dirty_before"], "restore": plan["restore"], "delete": plan["delete"],
            "created_dirs": plan["created_dirs"], "server": None, "state": "applying",
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        write_json_atomic(self.journal_path, self.journal)  # before the first byte changes
        if plan["patch_paths"]:
            p = self.git("apply", "--whitespace=nowarn", *plan["patch_paths"], check=False)
            if p.returncode != 0:  # all or nothing: git apply wrote nothing
                raise StageFailed("apply-failed", "git apply failed:\n" + p.stderr.decode(errors="replace")[-3000:])
        for entry in plan["new_files"]:
            dest = os.path.join(self.repo, entry["path"])
            os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
            with open(dest, "wb") as f:
                f.write(base64.b64decode(entry["content_b64"]))
            os.chmod(dest, int(entry.get("mode", 0o644)))
        # Cross-check with git: anything changed that the journal does not cover is added to it.
        changed = set(p for _, p in self.git.status_entries()) - set(plan["dirty_before"])
        extra = sorted(changed - set(plan["restore"]) - set(plan["delete"]))
        if extra:
            tracked = self.git.tracked(extra)
            self.journal["restore"] = sorted(set(plan["restore"]) | (set(extra) & tracked))
            self.journal["delete"] = sorted(set(plan["delete"]) | (set(extra) - tracked))
        self.journal["state"] = "applied"
        write_json_atomic(self.journal_path, self.journal)
        self.result["changed_paths"] = {"restore": self.journal["restore"], "delete": self.journal["delete"]}

    def compile_changed(self):
        """Every patched or new .py file must at least compile (syntax) under the host's Python."""
        errors = []
        paths = [p for p in self.journal["restore"] + self.journal["delete"] if p.endswith(".py")]
        for rel in paths:
            path = os.path.join(self.repo, rel)
            if not os.path.exists(path):
                continue
            try:
                with open(path, "rb") as f:
                    compile(f.read(), rel, "exec", dont_inherit=True)
            except (SyntaxError, ValueError) as exc:
                errors.append("%s: %s" % (rel, exc))
        self.result["compiled"] = paths
        if errors:
            raise StageFailed("apply-failed", "patched files do not compile:\n" + "\n".join(errors),
                              compile_errors=errors)

    # ------------------------------------------------------------------ launch and wait

    def launch(self):
        srv = self.spec["server"]
        logf = open(self.log_path, "wb")
        try:
            self.server = subprocess.Popen(fill_slots(srv["argv"], srv["port"]), cwd=self.repo,
                                           env=self.server_env(), stdin=subprocess.DEVNULL, stdout=logf,
                                           stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise StageFailed("crashed", "cannot start the server: %s" % exc) from None
        finally:
            logf.close()
        self.t_launch = time.monotonic()
        self.server_pgid = self.server.pid
        st = proc_stat(self.server.pid)
        self.server_start = st[3] if st else None
        self.journal["server"] = {"pid": self.server.pid, "pgid": self.server_pgid, "start": self.server_start}
        self.journal["state"] = "running"
        write_json_atomic(self.journal_path, self.journal)
        self.result["server_pid"] = self.server.pid
        self.link.emit("launched", pid=self.server.pid, log=self.log_path)
        self.log = LogFollower(self.log_path, self.spec.get("fatal_patterns") or [], self.spec["ready_pattern"],
                               self.spec.get("line_prefix_pattern"))

        def wait_exit():
            self.server.wait()
            self.server_died_at = (time.time(), time.monotonic())
            self.link.wake.set()

        threading.Thread(target=wait_exit, name="waitpid", daemon=True).start()

    def server_crash(self, phase_hint):
        """The server died (or printed a fatal line and lingered): stop waiting and say so at once."""
        self.log.drain()
        died = self.server_died_at
        self.link.emit("crash", exit_code=self.server.returncode, died_at=died[0] if died else None,
                       since_death_s=(time.monotonic() - died[1]) if died else None,
                       fatal_line=self.log.first_fatal[1] if self.log.first_fatal else None,
                       log_tail="\n".join(self.log.tail), stage=phase_hint)
        self.result["server_exit"] = self.server.returncode
        if died:
            self.result["died_at"] = died[0]
        return StageFailed("crashed", "server %s during %s" % (
            "exited with code %s" % self.server.returncode if self.server.returncode is not None
            else "printed a fatal error and did not exit", phase_hint))

    def watch_server(self, phase):
        """One tick of watching: raise when the server died or printed a fatal line and lingered."""
        self.log.poll()
        if self.server.poll() is not None:
            raise self.server_crash(phase)
        ff = self.log.first_fatal
        if ff and time.monotonic() - ff[0] > float(self.timeouts["fatal_grace"]):
            raise self.server_crash(phase)

    def wait_ready(self):
        srv = self.spec["server"]
        t = self.timeouts
        probe = None
        host = srv.get("host", "127.0.0.1")
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        url = "http://%s:%s/health_generate" % (host if ":" not in host else "[%s]" % host, srv["port"])
        try:
            while True:
                self.check_abort()
                self.watch_server("startup")
                now = time.monotonic()
                if self.log.ready_seen and probe is None:
                    probe = HealthProbe(url, self.link.wake)
                if probe is not None and probe.ok:
                    owners = pids_holding(listening_inodes(int(srv["port"])), group_members(self.server_pgid)
                                          + marked_pids(self.marker))
                    if not owners:
                        raise StageFailed("crashed", "the ready line appeared and port %s answers, but the process "
                                          "listening there is not this attempt's server (stale server?)"
                                          % srv["port"], foreign_port=True)
                    self.timings["ready_s"] = round(now - self.t_launch, 4)
                    self.seen_pids.update(group_members(self.server_pgid))
                    return
                if now - self.t_launch > float(t["ready"]):
                    raise self.hung("not ready after the ready timeout of %ss" % t["ready"])
                if now - self.log.last_growth > float(t["no_progress"]):
                    raise self.hung("no log output for %ss while starting (no_progress timeout)" % t["no_progress"])
                self.link.wake.wait(TICK_S)
                self.link.wake.clear()
        finally:
            if probe is not None:
                probe.stop()

    def hung(self, why):
        self.log.drain()
        self.stack_dump()
        self.link.emit("hung", reason=why, log_tail="\n".join(self.log.tail[-50:]))
        return StageFailed("hung", "server hung: " + why)

    # ------------------------------------------------------------------ bench

    def bench(self):
        cases = self.spec.get("bench") or []
        env = self.server_env()
        t_bench = time.monotonic()
        for case in cases:
            out = os.path.join(self.attempt_dir, "bench-%s.jsonl" % case["name"])
            self.bench_files[case["name"]] = out
            self.result["bench_files"] = self.bench_files  # fetched back even when the case fails
            for rep in range(int(case.get("repeats", 1))):
                self.run_bench_case(case, rep, out, env)
        self.timings["bench_s"] = round(time.monotonic() - t_bench, 4)

    def run_client(self, name, argv, log_path, env):
        """Run a benchmark client against the server while still watching the server; its exit code."""
        with open(log_path, "ab") as logf:
            proc = subprocess.Popen(argv, cwd=self.attempt_dir, env=env, stdin=subprocess.DEVNULL, stdout=logf,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + float(self.timeouts["bench"])
        try:
            while proc.poll() is None:
                self.check_abort()
                self.watch_server("serving")
                if time.monotonic() > deadline:
                    raise StageFailed("bench-failed", "benchmark case %s did not finish within %ss"
                                      % (name, self.timeouts["bench"]))
                self.link.wake.wait(TICK_S)
                self.link.wake.clear()
        finally:
            if proc.poll() is None:
                kill_group(proc.pid, signal.SIGKILL)
                proc.wait()
        self.watch_server("serving")  # a server crash explains a failed client better than the client does
        return proc.returncode

    def run_bench_case(self, case, rep, out, env):
        argv = fill_slots(case["argv"], self.spec["server"]["port"]) + ["--output-file", out]
        logp = os.path.join(self.attempt_dir, "bench-%s.log" % case["name"])
        self.link.emit("bench-start", case=case["name"], repeat=rep)
        lines_before = count_lines(out)
        returncode = self.run_client(case["name"], argv, logp, env)
        tail = read_tail(logp, 3000)
        if returncode != 0:
            raise StageFailed("bench-failed", "benchmark case %s exited %s:\n%s" % (case["name"], returncode, tail))
        new = read_jsonl(out)[lines_before:]
        if not new:
            raise StageFailed("bench-failed", "benchmark case %s wrote no result line to its --output-file:\n%s"
                              % (case["name"], tail))
        self.link.emit("bench-result", case=case["name"], repeat=rep, result=new[-1])

    # ------------------------------------------------------------------ profile

    def http(self, path, body=None, timeout=30):
        srv = self.spec["server"]
        host = srv.get("host", "127.0.0.1")
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        url = "http://%s:%s%s" % (host if ":" not in host else "[%s]" % host, srv["port"], path)
        data = json.dumps(body or {}).encode()
        req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=timeout) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def profile(self):
        """SGLang's /start_profile while a short load runs, then the trace files. Never fails the attempt:
        a profile that did not come is recorded as `profile_error`."""
        p = self.spec["profile"]
        out_dir = os.path.join(self.attempt_dir, "profile")
        os.makedirs(out_dir, exist_ok=True)
        try:
            code, text = self.http("/start_profile", {"output_dir": out_dir, "num_steps": p["steps"],
                                                      "activities": p["activities"]})
            if code != 200:
                self.result["profile_error"] = "/start_profile answered %s: %s" % (code, text.strip())
                return
            argv = fill_slots(p["argv"], self.spec["server"]["port"]) + [
                "--output-file", os.path.join(self.attempt_dir, "profile-load.jsonl")]
            rc = self.run_client("profile-load", argv, os.path.join(self.attempt_dir, "profile-load.log"),
                                 self.server_env())
            if rc != 0:
                self.result["profile_error"] = "the profiling load (case %s) exited %s" % (p["case"], rc)
            files = self.wait_traces(out_dir, 2.0)
            if not files:  # fewer steps ran than asked: stop it ourselves
                self.http("/stop_profile", timeout=float(p["timeout"]))
                files = self.wait_traces(out_dir, float(p["timeout"]))
            if files:
                self.result["profile_files"] = files
            else:
                self.result["profile_error"] = "no trace files appeared in %s within %ss" % (out_dir, p["timeout"])
        except (OSError, ValueError) as exc:
            self.result["profile_error"] = "profiling failed: %s" % exc

    def wait_traces(self, out_dir, timeout):
        """Trace files, once they exist and their sizes stop changing (ranks write them after the stop)."""
        end = time.monotonic() + timeout
        last = None
        while True:
            files = sorted(os.path.join(out_dir, f) for f in os.listdir(out_dir)
                           if re.search(r"-TP-\d+.*\.trace\.json(\.gz)?$", f))
            sizes = [os.path.getsize(f) for f in files]
            if files and sizes == last:
                return files
            last = sizes
            if time.monotonic() >= end:
                return files if files else []
            self.check_abort()
            self.watch_server("profile")
            time.sleep(0.25)

    def stack_dump(self):
        """Where a hung server is stuck, from py-spy when the host has it (kept beside the record)."""
        env = self.server_env()
        exe = shutil.which("py-spy", path=env.get("PATH"))
        if not exe or self.server is None:
            return
        path = os.path.join(self.attempt_dir, "stack-dump.txt")
        chunks = []
        for pid in [self.server.pid] + [p for p in group_members(self.server_pgid) if p != self.server.pid]:
            try:
                p = run([exe, "dump", "--pid", str(pid)], env=env, timeout=30)
                chunks.append("=== pid %d (exit %d)\n%s%s" % (pid, p.returncode, p.stdout.decode(errors="replace"),
                                                               p.stderr.decode(errors="replace")))
            except (OSError, subprocess.TimeoutExpired) as exc:
                chunks.append("=== pid %d: py-spy failed: %s\n" % (pid, exc))
        with open(path, "w") as f:
            f.write("\n".join(chunks))
        self.result["stack_dump"] = path

    # ------------------------------------------------------------------ stop

    def stop_server(self):
        known = set(self.seen_pids) | set(group_members(self.server_pgid)) | set(marked_pids(self.marker))
        known.add(self.server.pid)
        info = stop_group(self.server, self.server_pgid, self.marker, float(self.timeouts["stop_grace"]))
        self.result["server_exit"] = self.server.returncode
        held = wait_gpu_release(known, self.server_env(), float(self.timeouts.get("gpu_release", 30)))
        if held:
            info["gpu_dirty"] = held
            self.result["gpu_dirty"] = held
        return info

    # ------------------------------------------------------------------ revert and verify

    def revert(self, journal):
        """Restore exactly what the journal lists; never a blanket clean. Then verify the tree hash."""
        repo_git = Git(journal.get("repo") or self.repo)
        restore = journal.get("restore") or []
        for i in range(0, len(restore), 200):
            chunk = restore[i:i + 200]
            repo_git("checkout", journal["base_commit"], "--", *chunk)
        root = journal.get("repo") or self.repo
        for rel in journal.get("delete") or []:
            path = os.path.join(root, rel)
            if os.path.lexists(path) and not os.path.isdir(path):
                os.remove(path)
        for rel in journal.get("created_dirs") or []:
            try:
                os.rmdir(os.path.join(root, rel))
            except OSError:
                pass
        os.makedirs(self.attempt_dir, exist_ok=True)
        after = repo_git.tree_state(self.attempt_dir)
        verified = after == journal["tree_before"]
        diff = []
        if not verified:
            p = repo_git("diff", "--name-only", journal["tree_before"], after, check=False)
            diff = [x for x in p.stdout.decode(errors="replace").splitlines() if x]
        else:
            os.remove(self.journal_path)
            if journal is self.journal:
                self.journal = None
        return {"verified": verified, "tree_before": journal["tree_before"], "tree_after": after, "diff": diff}


# ============================================================================ status and recovery


def host_status(attempt):
    """What is going on in a target repo: its lock, a leftover journal, the GPUs."""
    out = {"repo": attempt.repo, "exists": os.path.isdir(attempt.repo)}
    p = attempt.git("rev-parse", "--absolute-git-dir", check=False) if out["exists"] else None
    if p is None or p.returncode != 0:
        return out
    hdir = os.path.join(p.stdout.decode().strip(), "harness")
    lock = {"held": False}
    if os.path.exists(os.path.join(hdir, "lock")):
        fd = os.open(os.path.join(hdir, "lock"), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            lock["held"] = True
            try:
                with open(os.path.join(hdir, "lock.json")) as f:
                    lock.update(json.load(f))
            except (OSError, ValueError):
                pass
        finally:
            os.close(fd)
    out["lock"] = lock
    try:
        with open(os.path.join(hdir, "journal.json")) as f:
            out["journal"] = json.load(f)
    except (OSError, ValueError):
        out["journal"] = None
    env = attempt.server_env()
    out["gpus"] = query_gpus(env)
    out["gpu_apps"] = gpu_apps(env)
    out["head"] = attempt.git.out("rev-parse", "HEAD").strip()
    out["dirty"] = [path for _, path in attempt.git.status_entries()]
    return out


# ============================================================================ process groups


def kill_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def stop_group(popen, pgid, marker, grace):
    """TERM the group, wait `grace`, KILL it, then end any marked straggler by pid; confirm all gone."""
    t0 = time.monotonic()
    info = {"signal": None, "stragglers": [], "left": []}

    def alive():
        reap_adopted(exclude=(popen.pid,) if popen is not None else ())
        if popen is not None:
            popen.poll()
        return group_members(pgid) + [p for p in marked_pids(marker) if proc_stat(p)]

    def wait_gone(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if not alive():
                return True
            time.sleep(TICK_S)
        return not alive()

    if alive():
        info["signal"] = "TERM"
        kill_group(pgid, signal.SIGTERM)
        if not wait_gone(grace):
            info["signal"] = "KILL"
            kill_group(pgid, signal.SIGKILL)
            wait_gone(5.0)
    for pid in marked_pids(marker):  # escaped the group (setsid) but carries our marker
        info["stragglers"].append(pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    wait_gone(5.0)
    info["left"] = alive()
    info["stop_s"] = round(time.monotonic() - t0, 4)
    return info


def gpu_apps(env):
    """{pid: used MiB} of compute processes on the GPUs, from nvidia-smi; None without nvidia-smi."""
    exe = shutil.which("nvidia-smi", path=env.get("PATH"))
    if not exe:
        return None
    try:
        p = run([exe, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"], env=env, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return None
    apps = {}
    for line in p.stdout.decode(errors="replace").splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit():
            try:
                apps[int(parts[0])] = apps.get(int(parts[0]), 0) + int(float(parts[1]))
            except ValueError:
                continue
    return apps


def wait_gpu_release(pids, env, timeout):
    """Wait until none of `pids` holds GPU memory any more; return what is still held after `timeout`."""
    end = time.monotonic() + timeout
    while True:
        apps = gpu_apps(env)
        if apps is None:
            return None
        held = {str(pid): mib for pid, mib in apps.items() if pid in pids}
        if not held or time.monotonic() >= end:
            return held or None
        time.sleep(0.25)


def stop_recorded_server(journal, grace):
    """Recovery: end the journal's server only if that pid is still the same process (start time)."""
    srv = journal.get("server")
    if not srv:
        return {"state": "never-launched"}
    st = proc_stat(int(srv["pid"]))
    same = st is not None and srv.get("start") is not None and st[3] == int(srv["start"])
    if not same and not group_members(int(srv["pgid"])) and not marked_pids(journal.get("marker", "")):
        return {"state": "already-gone"}
    if not same:
        # The leader is gone or its pid was reused: only the marker proves which processes are ours.
        pids = marked_pids(journal.get("marker", ""))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return {"state": "killed-marked", "pids": pids}
    info = stop_group(None, int(srv["pgid"]), journal.get("marker", ""), grace)
    info["state"] = "stopped"
    return info


# ============================================================================ small readers


def numstat_paths(raw):
    """Paths from `git apply --numstat -z` (renames come as an empty field then old\\0new)."""
    out = set()
    parts = raw.split("\0")
    i = 0
    while i < len(parts):
        rec = parts[i]
        if not rec:
            i += 1
            continue
        fields = rec.split("\t")
        if len(fields) >= 3 and fields[2] == "" and i + 2 < len(parts):
            out.add(parts[i + 1])
            out.add(parts[i + 2])
            i += 3
        elif len(fields) >= 3:
            out.add(fields[2])
            i += 1
        else:
            i += 1
    return out


def count_lines(path):
    return len(read_jsonl(path))


def read_jsonl(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        continue
    except OSError:
        pass
    return rows


def read_tail(path, nbytes):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - nbytes))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


# ============================================================================ entry point


def main():
    link = Link()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda s, f: link.abort("signal %d" % s))
    become_subreaper()
    spec = link.read_spec()
    if spec.get("protocol") != PROTOCOL:
        link.emit("final", status="infra-error", error="agent protocol %s, controller sent %s"
                  % (PROTOCOL, spec.get("protocol")))
        return 3
    link.emit("hello", protocol=PROTOCOL, pid=os.getpid(), host_time=time.time(), python=sys.version.split()[0],
              hostname=socket.gethostname())
    link.watch_stdin()
    link.keep_alive(float(spec.get("alive_interval_s") or 2.0))
    attempt = Attempt(spec, link)
    mode = spec.get("mode", "attempt")
    if mode == "status":
        link.emit("final", status="ok", **host_status(attempt))
        return 0
    result = attempt.recover() if mode == "recover" else attempt.run()
    result["timings"] = attempt.timings
    result["attempt_dir"] = attempt.attempt_dir
    result["server_log"] = attempt.log_path if os.path.exists(attempt.log_path) else None
    result["abort_reason"] = link.abort_reason
    link.emit("final", **result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
