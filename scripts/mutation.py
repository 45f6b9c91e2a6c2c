#!/usr/bin/env python3
"""Mutation testing of the safety core: do the tests fail when a promise breaks?

Three parts (docs/testing.md explains them):

  changed  what CI runs: mutmut only on the safety functions whose code, or a test that reaches them,
           changed since the committed report (docs/mutation-report.json; scripts/mutation_diff.py),
           under a time cap. Fails when one of their mutants survives unexplained, or when the cap
           is reached before all of them ran (then run `full` and commit its report).
  full     mutmut on every safety function — report markers and statistics, resume keys, triage
           ranking, secret masking, and the agent's revert/verify/journal/recovery (driven in-process
           against real git repositories by tests/unit/test_agent_tree.py). Every surviving mutant must
           be listed as equivalent in docs/testing.md, with why. `--write` refreshes the report.
  planted  one-line bugs a reviewer planted by hand, each in a throw-away copy of the project, each
           with the tests that must kill it — including the agent paths through a real sshd, which
           mutmut cannot attribute to tests because they run the agent in another process.

    scripts/mutation.py changed [--cap-s 300] [--write]   # CI; --write merges the run into the report
    scripts/mutation.py full [--write]                    # ~40 minutes on two cores
    scripts/mutation.py planted [--write docs/mutation-planted.md]

Exit status: 0 when every mutant is killed or explained, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mutation_diff import (  # scripts/ is this script's own folder, first on sys.path
    FunctionResult,
    Report,
    SafetyFunction,
    changes_since,
    function_fingerprint,
    tests_fingerprint,
)

ROOT = Path(__file__).resolve().parents[1]
EXPLAINED_DOC = ROOT / "docs" / "testing.md"
REPORT_JSON = ROOT / "docs" / "mutation-report.json"
REPORT_MD = ROOT / "docs" / "mutation-report.md"

# The safety core, by mutmut's mutant names (module.x_function / module.xǁClassǁmethod).
SAFETY_CORE = [
    # revert and verification, journal and recovery (the agent, in-process)
    "harness.agent.tree.xǁTreeǁrevert__mutmut_*",
    "harness.agent.tree.xǁTreeǁapply__mutmut_*",
    "harness.agent.tree.xǁTreeǁplan__mutmut_*",
    "harness.agent.tree.xǁTreeǁnew_journal__mutmut_*",
    "harness.agent.tree.xǁTreeǁleftover_journal__mutmut_*",
    "harness.agent.tree.xǁGitǁmanifest__mutmut_*",  # what the revert's verification compares, byte for byte
    "harness.agent.tree.xǁTreeǁsnapshot__mutmut_*",
    "harness.agent.tree.x_digest__mutmut_*",
    "harness.agent.tree.xǁGitǁstatus_entries__mutmut_*",
    "harness.agent.tree.x_numstat_paths__mutmut_*",
    "harness.agent.attempt.xǁAttemptǁcleanup__mutmut_*",
    "harness.agent.attempt.xǁAttemptǁrecover__mutmut_*",
    "harness.agent.attempt.xǁAttemptǁrecover_leftover_journal__mutmut_*",
    "harness.agent.attempt.xǁAttemptǁapply__mutmut_*",
    # a bisect step's checkout: the clean-tree refusal, the journaled checkout, HEAD and its branch put back
    "harness.agent.attempt.xǁAttemptǁcheck_out__mutmut_*",
    "harness.agent.checkout.x_blocking_changes__mutmut_*",
    "harness.agent.checkout.x_restore_ref__mutmut_*",
    "harness.agent.checkout.x_current_ref__mutmut_*",
    # (Where a patch set may write — patchpaths.path_problem / patch_set_refusals / _resolve on the controller,
    # treescan.write_problem on the host — joins once the survivors of their first run (2026-12-02) are killed
    # or explained: see "Not yet in the safety core" in docs/testing.md.)
    # secret masking
    "harness.masking.x_mask_secrets__mutmut_*",
    "harness.masking.x_secret_values__mutmut_*",
    "harness.masking.x_mask_files__mutmut_*",
    "harness.masking.x_controller_secret_values__mutmut_*",
    "harness.masking.x_is_secret_flag__mutmut_*",
    "harness.masking.x__secret_args__mutmut_*",
    "harness.masking.x_redact_argv__mutmut_*",
    "harness.masking.x_attempt_secrets__mutmut_*",
    # resume keys
    "harness.experiments.plan.x_content_key__mutmut_*",
    "harness.experiments.plan.x__key_fields__mutmut_*",
    "harness.experiments.plan.x_host_signature__mutmut_*",
    "harness.experiments.patchsets.x_variants_digest__mutmut_*",  # PatchSet.sha256 (mutmut skips properties)
    # report markers
    "harness.analysis.compare.x__apply_baseline__mutmut_*",
    "harness.analysis.compare.x_judge__mutmut_*",  # the one comparison: table, night against night, page, bisect
    "harness.analysis.units.x_lower_is_better__mutmut_*",
    "harness.analysis.significance.x_mann_whitney_p__mutmut_*",
    "harness.analysis.significance.x__u_counts__mutmut_*",  # the Mann-Whitney test's exact distribution
    "harness.analysis.significance.x__exact_sf__mutmut_*",
    "harness.analysis.significance.x__normal_sf__mutmut_*",
    "harness.analysis.compare.x_ratio_text__mutmut_*",
    # triage ranking
    "harness.triage.classify.x__sig__mutmut_*",
    "harness.triage.classify.xǁTriageǁ_message__mutmut_*",
    "harness.triage.classify.xǁTriageǁverdict__mutmut_*",
]


@dataclass(frozen=True)
class Plant:
    """A one-line bug: `find` (exactly once in `file`) becomes `replace`; `killers` must fail."""

    name: str
    file: str
    find: str
    replace: str
    killers: tuple[str, ...]


AGENT_TREE = "tests/unit/test_agent_tree.py"
PROMISES = "tests/integration/test_promises_agent.py"
PLANTS = [
    Plant("revert check forced to verified=True", "harness/agent/tree.py",
          'verified = digest(after) == journal.tree_before', "verified = True",
          (f"{AGENT_TREE}::test_files_created_in_the_tree_while_patched_make_the_revert_unverified",
           f"{PROMISES}::test_unverifiable_revert_is_reported_keeps_the_journal_and_next_attempt_refuses_changing_nothing")),
    Plant("cleanup ignores an unverified revert", "harness/agent/attempt.py",
          'if not revert.verified and self.result.status == Status.OK:', "if False:",
          (f"{AGENT_TREE}::test_files_created_in_the_tree_while_patched_make_the_revert_unverified",
           f"{PROMISES}::test_unverifiable_revert_is_reported_keeps_the_journal_and_next_attempt_refuses_changing_nothing")),
    Plant("directories created by a patch set never removed", "harness/agent/tree.py",
          "os.rmdir(os.path.join(self.repo, rel))", "pass",
          (f"{AGENT_TREE}::test_awkward_patch_set_is_applied_then_restored_byte_for_byte",
           f"{PROMISES}::test_awkward_patch_set_serves_and_leaves_tree_identical_directories_included")),
    Plant("files a patch set added are not deleted on revert", "harness/agent/tree.py",
          "if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):", "if False:",
          (f"{AGENT_TREE}::test_awkward_patch_set_is_applied_then_restored_byte_for_byte",)),
    Plant("heartbeat silence never aborts the agent", "harness/agent/attempt.py",
          'self.link.abort("controller-silent")', "pass",
          (f"{PROMISES}::test_controller_stopped_with_stdin_open_server_stopped_and_tree_reverted_after_heartbeat_timeout",)),
    Plant("stdin EOF does not abort the agent", "harness/agent/link.py",
          '            self.abort("controller-gone")\n\n        threading.Thread(target=run, name="stdin"',
          '            pass\n\n        threading.Thread(target=run, name="stdin"',
          (f"{PROMISES}::test_agent_stdin_eof_aborts_stops_server_and_reverts_with_no_heartbeat_timeout",)),
    Plant("▲ and ▼ swapped in the comparison table", "harness/analysis/compare.py",
          'MARKERS = {"better": "▲", "worse": "▼"', 'MARKERS = {"better": "▼", "worse": "▲"',
          ("tests/unit/test_report.py",)),
    Plant("significance level raised from 0.05 to 0.5", "harness/analysis/compare.py",
          "ALPHA = 0.05", "ALPHA = 0.5", ("tests/unit/test_report.py",)),
    Plant("lower-is-better metrics judged as higher-is-better", "harness/analysis/compare.py",
          "better = out.ratio < 1 if lower_is_better(metric) else out.ratio > 1", "better = out.ratio > 1",
          ("tests/unit/test_report.py",)),
    Plant("secret left unmasked in the crash verdict", "harness/run/runner.py",
          'triage_text(mask_secrets(ev.log_tail or "", follow.secrets), ev.exit_code)',
          'triage_text(ev.log_tail or "", ev.exit_code)',
          (f"{PROMISES}::test_secret_inside_the_fatal_line_is_masked_everywhere_and_the_key_line_kept",)),
    Plant("secret left unmasked in record.error", "harness/run/recording.py",
          "error = mask_secrets(error, follow.secrets)", "error = error",
          (f"{PROMISES}::test_secret_in_a_failed_benchmarks_output_is_masked_in_the_error_and_logs",)),
    Plant("only .log files masked", "harness/masking.py",
          "def mask_files(directory: Path, secrets: list[str]) -> None:",
          "def mask_files(directory: Path, secrets: list[str]) -> None:\n"
          "    for f in directory.glob('*.log'):\n"
          "        f.write_text(mask_secrets(f.read_text(errors='replace'), secrets))\n\n\n"
          "def _unused(directory: Path, secrets: list[str]) -> None:",
          ("tests/unit/test_masking.py", f"{PROMISES}::test_secret_in_a_hung_servers_stack_dump_is_masked")),
    Plant("files/ content left out of the resume key", "harness/experiments/patchsets.py",
          'oct(f.mode).encode() + b"\\0" + f.content + b"\\0"', 'oct(f.mode).encode() + b"\\0"',
          ("tests/unit/test_plan.py",)),
    Plant("files/ modes left out of the resume key", "harness/experiments/patchsets.py",
          'b"\\0" + oct(f.mode).encode() + b"\\0" + f.content', 'b"\\0" + f.content',
          ("tests/unit/test_plan.py",)),
    Plant("OOM ranked below illegal memory access in triage", "harness/triage/signatures.py",
          '("oom", 30, (', '("oom", 45, (', ("tests/unit/test_triage.py",)),
    # Hosts configured other ways (issue "Nothing lost, nothing left behind"):
    Plant("the bytes saved before applying are not put back (git's filters decide)", "harness/agent/tree.py",
          "            if backup:\n                copy_raw(", "            if False:\n                copy_raw(",
          ("tests/integration/test_patch_shapes.py::test_autocrlf_on_the_host_does_not_fool_the_revert_check",)),
    Plant("the check compares git's filtered view instead of raw bytes", "harness/agent/treescan.py",
          '    return "file:%s:%s" % ("x" if st.st_mode & 0o111 else "-", sha256_file(path))',
          '    return "file:%s:%s" % ("x" if st.st_mode & 0o111 else "-", hashlib.sha256(open(path, "rb").read()'
          '.replace(b"\\r\\n", b"\\n")).hexdigest())',
          ("tests/integration/test_patch_shapes.py::test_an_unverifiable_revert_is_never_reported_verified_whatever_git_config_says",)),
    Plant("a symlink to a folder is not removed on revert", "harness/agent/tree.py",
          "if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):",
          "if os.path.lexists(path) and not os.path.isdir(path):",
          ("tests/integration/test_patch_shapes.py",)),
    Plant("no watchdog: a killed agent leaves the server running", "harness/agent/attempt.py",
          "            if self.watchdog:  #", "            if False:  #",
          ("tests/integration/test_faults.py::test_agent_sigkilled_mid_benchmark_its_watchdog_cleans_the_host_within_10s",)),
    Plant("recovery does not wait for GPU memory", "harness/agent/status.py",
          "    if env is not None:\n        held = wait_gpu_release(",
          "    if False:\n        held = wait_gpu_release(",
          ("tests/unit/test_agent_journal.py::test_recovery_whose_server_still_holds_gpu_memory_refuses_the_attempt_naming_it",)),
    Plant("SIGTERM kills the controller without cleanup", "harness/cli/app.py",
          "    for sig in (signal.SIGTERM, signal.SIGHUP):\n        signal.signal(sig, signal_as_interrupt)",
          "    pass",
          ("tests/integration/test_cli.py::test_sigterm_or_sighup_stops_reverts_and_keeps_the_cases_already_measured",)),
    Plant("the login shell interprets the command (plain shlex quoting)", "harness/hosts/ssh.py",
          "            return remote_command(self.host.python, argv)",
          "            import shlex\n            return shlex.join(argv)",
          ("tests/unit/test_remote_command.py", "tests/integration/test_hosts_other_ways.py::"
           "test_a_user_whose_login_shell_is_tcsh_runs_an_attempt_and_the_host_is_left_as_found")),
    Plant("fetched files are not checked against the agent's sha256", "harness/run/runner.py",
          "        if remote in expected and sha256_file(str(local)) != expected[remote]:",
          "        if False:",
          ("tests/unit/test_fetch.py",)),
    Plant("bastions accept any host key", "harness/hosts/ssh.py",
          "            self._check_host_keys(hop.client)\n            hop = hop.gateway",
          "            if hop is conn:\n                self._check_host_keys(hop.client)\n"
          "            hop = hop.gateway",
          ("tests/integration/test_hosts_other_ways.py::test_host_keys_are_checked_on_every_hop_through_a_bastion",)),
    Plant("two harnesses may run one run", "harness/cli/run.py",
          "    with store.lock_run(run_id),", "    with __import__(\"contextlib\").nullcontext(),",
          ("tests/integration/test_sweep.py::test_a_second_harness_on_the_same_run_is_refused_at_once_and_nothing_is_duplicated",)),
    Plant("orphans re-parented to the agent are left running", "harness/agent/procs.py",
          "    if not is_subreaper():\n        return []", "    if True:\n        return []",
          ("tests/integration/test_hosts_other_ways.py::"
           "test_a_grandchild_that_calls_setsid_and_clears_its_environment_does_not_outlive_the_attempt",)),
    Plant("no liveness check during the benchmark", "harness/agent/server.py",
          "                    self.liveness = Liveness(self.url(\"/health\"))", "                    pass",
          ("tests/integration/test_hosts_other_ways.py::"
           "test_a_server_frozen_during_the_benchmark_is_hung_within_no_progress_not_the_bench_timeout",)),
]


# ============================================================================ mutmut: full and changed


def explained_mutants() -> dict[str, str]:
    """`name`: reason lines under the 'Equivalent mutants' heading of docs/testing.md."""
    out: dict[str, str] = {}
    if not EXPLAINED_DOC.exists():
        return out
    section = EXPLAINED_DOC.read_text().split("## Equivalent mutants", 1)
    if len(section) < 2:
        return out
    for m in re.finditer(r"^- `([^`]+)`:?\s*(.*)$", section[1].split("\n## ", 1)[0], re.M):
        out[m.group(1)] = m.group(2)
    return out


@dataclass
class MutmutRun:
    statuses: dict[str, str]  # mutant: killed / survived / timeout / not checked / ...
    tests_by_function: dict[str, list[str]]  # mangled function name (module.xǁClassǁname): test ids
    seconds: float
    capped: bool


def run_mutmut(patterns: list[str], cap_s: float | None = None) -> MutmutRun:
    """Run mutmut on `patterns` (a fresh copy of the sources: cached results can go stale), stopped after
    `cap_s` seconds; return each matching mutant's status and which tests reached which function."""
    import signal

    shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    cmd = [sys.executable, "-m", "mutmut", "run", *patterns]
    print("$ " + " ".join(cmd[2:]), flush=True)
    t0 = time.monotonic()
    # Its own process group: at the cap, mutmut and the test workers it forked stop together.
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    capped = False
    try:
        out, _ = p.communicate(timeout=cap_s)
    except subprocess.TimeoutExpired:
        capped = True
        os.killpg(p.pid, signal.SIGTERM)
        try:
            out, _ = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
    seconds = time.monotonic() - t0
    # mutmut says so in words when its own run of the tests (stats, or the clean run) fails, not always by code.
    if not capped and (p.returncode not in (0, 1) or "Failed to run clean test" in out
                       or "failed to collect stats" in out):
        # 1 is also what mutmut returns with survivors in some versions; a failing clean run returns 1 too.
        print(out[-5000:])
        raise SystemExit(f"mutmut run failed (exit code {p.returncode}): the tests fail without any mutant")
    return collect_run(patterns, seconds, capped)


def collect_run(patterns: list[str], seconds: float, capped: bool) -> MutmutRun:
    """What the last mutmut run (its mutants/ folder) found for `patterns`."""
    import fnmatch
    import json

    r = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=ROOT,
                       capture_output=True, text=True)
    statuses = {}
    for line in r.stdout.splitlines():
        m = re.match(r"\s*(\S+): (.+)$", line)
        if m and any(fnmatch.fnmatch(m.group(1), pat) for pat in patterns):
            statuses[m.group(1)] = m.group(2).strip()
    try:
        stats = json.loads((ROOT / "mutants" / "mutmut-stats.json").read_text())
        tests = {k: sorted(v) for k, v in stats["tests_by_mangled_function_name"].items()}
    except (OSError, ValueError, KeyError):
        tests = {}
    return MutmutRun(statuses, tests, seconds, capped)


def judge(run: MutmutRun, explained: dict[str, str], label: str, patterns: list[str]) -> bool:
    """Print the verdict on a run's mutants; True when every one was killed or is explained, and every
    pattern (a safety function) had mutants."""
    import fnmatch

    statuses = run.statuses
    # A mutant whose tests ran past their time limit was noticed too (mutmut reports it apart as "timeout").
    survivors = sorted(n for n, s in statuses.items() if s not in ("killed", "timeout", "not checked"))
    unrun = sorted(n for n, s in statuses.items() if s == "not checked")
    unexplained = [n for n in survivors if n not in explained]
    killed = sum(1 for s in statuses.values() if s in ("killed", "timeout"))
    print(f"\nmutmut, {label}: {len(statuses)} mutants, {killed} killed, {len(survivors)} not killed "
          f"({len(survivors) - len(unexplained)} explained as equivalent in docs/testing.md), "
          f"{len(unrun)} not run, {run.seconds:.0f} s")
    for n in unexplained:
        print(f"  UNEXPLAINED {statuses[n]}: {n}   (mutmut show {n})")
    if run.capped:
        print(f"  the time cap stopped the run with {len(unrun)} mutants not run: run "
              "`python3 scripts/mutation.py full --write` and commit docs/mutation-report.*")
    if not statuses:
        print("no mutant matched the safety core patterns: the names moved? update SAFETY_CORE")
        return False
    # A safety function mutmut made no mutant of is untested by this pass, not clean: its file is probably
    # missing from [tool.mutmut] only_mutate in pyproject.toml.
    unmutated = [pat for pat in patterns if not any(fnmatch.fnmatch(n, pat) for n in statuses)]
    for pat in unmutated:
        print(f"  NO MUTANT of {pat}: add its file to [tool.mutmut] only_mutate in pyproject.toml")
    return not unexplained and not unrun and not run.capped and not unmutated


def report_rows(run: MutmutRun, functions: list[SafetyFunction], explained: dict[str, str],
                checked: str) -> dict[str, FunctionResult]:
    """Each function's fingerprints and mutant counts from a run, for the report."""
    import fnmatch

    rows = {}
    for fn in functions:
        mine = {n: s for n, s in run.statuses.items() if fnmatch.fnmatch(n, fn.pattern)}
        survivors = [n for n, s in mine.items() if s not in ("killed", "timeout")]
        test_ids = run.tests_by_function.get(fn.pattern.removesuffix("__mutmut_*"), [])
        rows[fn.qualname] = FunctionResult(
            code=function_fingerprint(ROOT, fn), tests=tests_fingerprint(ROOT, test_ids), test_ids=test_ids,
            mutants=len(mine), killed=len(mine) - len(survivors),
            equivalent=sum(1 for n in survivors if n in explained), checked=checked)
    return rows


def sources_digest() -> str:
    """The code and the tests as they are now: a report must describe what mutmut ran, so an edit made while
    it ran (it copies the sources when it starts) keeps the report from being written."""
    import hashlib

    h = hashlib.sha256()
    for path in sorted([*ROOT.glob("harness/**/*.py"), *ROOT.glob("tests/**/*.py")]):
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def head_commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()

    return (git("rev-parse", "--short=12", "HEAD") or "unknown") + (" (+ uncommitted changes)"
                                                                    if git("status", "--porcelain") else "")


def unchanged_since(before: str) -> bool:
    if sources_digest() == before:
        return True
    print("harness/ or tests/ changed while mutmut ran: the report was not written (run it again)")
    return False


def safety_functions() -> list[SafetyFunction]:
    return [SafetyFunction.from_pattern(p) for p in SAFETY_CORE]


def load_report() -> Report | None:
    try:
        return Report.from_json(REPORT_JSON.read_text())
    except OSError:
        return None


def write_report(report: Report) -> None:
    REPORT_JSON.write_text(report.to_json())
    REPORT_MD.write_text(report.to_markdown())
    print(f"wrote {REPORT_JSON.relative_to(ROOT)} and {REPORT_MD.relative_to(ROOT)}")


def full(write: bool) -> bool:
    functions = safety_functions()
    before = sources_digest()
    run = run_mutmut([fn.pattern for fn in functions])
    explained = explained_mutants()
    ok = judge(run, explained, "safety core", [fn.pattern for fn in functions])
    write = write and unchanged_since(before)
    survivors = {n for n, s in run.statuses.items() if s not in ("killed", "timeout")}
    for n in sorted(set(explained) - survivors):
        print(f"  note: docs/testing.md explains {n}, which no longer survives (remove the line)")
    if write and ok:  # a report is a promise that CI need not look again: only a clean pass writes one
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        write_report(Report(date=stamp, commit=head_commit(), minutes=round(run.seconds / 60, 1),
                            functions=report_rows(run, functions, explained, stamp)))
    elif write:
        print("the report was not written: first kill or explain what is listed above")
    return ok


def changed(cap_s: float, write: bool, last_run: bool = False) -> bool:
    report = load_report()
    if report is None:
        print(f"no mutation report at {REPORT_JSON.relative_to(ROOT)}: run `python3 scripts/mutation.py full "
              "--write` and commit it")
        return False
    try:
        todo = changes_since(report, safety_functions(), ROOT)
    except LookupError as exc:
        print(exc)
        return False
    print(f"mutation report: {report.date}, commit {report.commit}: {report.mutants} mutants, "
          f"{report.killed} killed, {report.equivalent} equivalent")
    if not todo:
        print("no safety function, nor a test that reaches one, changed since the report: no mutant to run")
        return True
    for c in todo:
        print(f"  {c.function.qualname}: {c.why}")
    before = sources_digest()
    if last_run:  # survivors explained since: judge what mutmut found then, without running it again
        if not last_run_matches_sources():
            return False
        run = collect_run([c.function.pattern for c in todo], 0.0, False)
    else:
        run = run_mutmut([c.function.pattern for c in todo], cap_s=cap_s or None)
    explained = explained_mutants()
    ok = judge(run, explained, f"{len(todo)} changed safety function(s)", [c.function.pattern for c in todo])
    write = write and unchanged_since(before)
    if write:
        write_clean_rows(report, run, [c.function for c in todo], explained)
    return ok


def last_run_matches_sources() -> bool:
    """mutants/ (the last mutmut run) was made from the sources as they are now: its copies of the tests and of
    every module mutmut does not mutate are byte for byte ours (the mutated modules are compared by git: they
    must have no uncommitted change)."""
    import tomllib

    mutated = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]["only_mutate"])
    copy = ROOT / "mutants"
    if not copy.is_dir():
        print("no mutants/ folder: there is no last run to judge")
        return False
    ours = [p.relative_to(ROOT) for p in [*ROOT.glob("harness/**/*.py"), *ROOT.glob("tests/**/*.py")]]
    differ = [str(rel) for rel in ours if str(rel) not in mutated
              and (not (copy / rel).is_file() or (copy / rel).read_bytes() != (ROOT / rel).read_bytes())]
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", *sorted(mutated)],
                           capture_output=True, text=True).stdout.strip()
    if differ or dirty:
        print("the last mutmut run was made from other sources: " + ", ".join((differ + [dirty])[:5]))
        return False
    return True


def write_clean_rows(report: Report, run: MutmutRun, functions: list[SafetyFunction],
                     explained: dict[str, str]) -> None:
    """Into the report: the functions of a run whose every mutant was killed or explained (a row is a promise
    that CI need not look again); the others stay as they were, so the next `changed` runs them again."""
    import fnmatch

    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows = report_rows(run, functions, explained, stamp)
    clean = {}
    for fn in functions:
        mine = [n for n, s in run.statuses.items() if fnmatch.fnmatch(n, fn.pattern)]
        row = rows[fn.qualname]
        if mine and not run.capped and row.killed + row.equivalent == row.mutants:
            clean[fn.qualname] = row
    if clean:
        report.functions.update(clean)
        write_report(report)
    left = [fn.qualname for fn in functions if fn.qualname not in clean]
    if left:
        print("not written (first kill or explain what is listed above, then run `changed --write` again): "
              + ", ".join(left))


# ============================================================================ planted bugs


def project_copy(dest: Path) -> None:
    """The tracked and untracked-not-ignored files of the project, as they are on disk now."""
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, check=True).stdout.decode()
    for rel in filter(None, out.split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def plant_into(copy: Path, plant: Plant) -> None:
    path = copy / plant.file
    text = path.read_text()
    n = text.count(plant.find)
    if n != 1:
        raise SystemExit(f"plant {plant.name!r}: expected the line once in {plant.file}, found it {n} times "
                         "(the code moved: update PLANTS in scripts/mutation.py)")
    path.write_text(text.replace(plant.find, plant.replace))


def run_tests(copy: Path, tests: tuple[str, ...]) -> tuple[int, str]:
    # PYTHONPATH: every process the tests start (the CLI, the agent) imports the planted copy, not the
    # installed package.
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    p = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests], cwd=copy,
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    tail = [ln for ln in p.stdout.splitlines() if ln.strip()][-1:] or [""]
    return p.returncode, tail[0]


def planted(write: Path | None) -> bool:
    rows = []
    ok = True
    with tempfile.TemporaryDirectory(prefix="harness-planted-") as tmp:
        clean = Path(tmp) / "clean"
        project_copy(clean)
        rc, tail = run_tests(clean, tuple(sorted({t for p in PLANTS for t in p.killers})))
        if rc != 0:
            print(f"the killing tests fail without any plant: {tail}")
            return False
        for plant in PLANTS:
            copy = Path(tmp) / "planted"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(clean, copy)
            plant_into(copy, plant)
            t0 = time.monotonic()
            rc, tail = run_tests(copy, plant.killers)
            killed = rc == 1  # tests ran and failed; 2-5 would be a broken run, not a kill
            ok &= killed
            rows.append((plant, killed, time.monotonic() - t0, tail))
            print(f"{'killed  ' if killed else 'SURVIVED'} {plant.name}  ({time.monotonic() - t0:.0f} s: {tail})",
                  flush=True)
    if write:
        lines = ["# Planted bugs and the tests that kill them", "",
                 "Written by `scripts/mutation.py planted --write docs/mutation-planted.md`; each bug is planted",
                 "alone in a throw-away copy of the project and its killing tests are run there.", "",
                 f"Last run: {time.strftime('%Y-%m-%d %H:%M %Z')}, "
                 f"{sum(1 for r in rows if r[1])} of {len(rows)} killed.", "",
                 "| planted bug | file | killed | tests that must fail | s |", "| --- | --- | --- | --- | --- |"]
        for plant, killed, secs, _ in rows:
            tests = "<br>".join(f"`{t}`" for t in plant.killers)
            lines.append(f"| {plant.name} | `{plant.file}` | {'yes' if killed else '**no**'} | {tests} | {secs:.0f} |")
        write.write_text("\n".join(lines) + "\n")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=["changed", "full", "planted"])
    ap.add_argument("--write", nargs="?", const=True, default=None, metavar="PATH",
                    help="full, changed: refresh docs/mutation-report.*; planted: write the results table to PATH")
    ap.add_argument("--cap-s", type=float, default=300.0,
                    help="changed: stop mutmut after this many seconds (0: no cap, for a refresh by hand)")
    ap.add_argument("--last-run", action="store_true",
                    help="changed: judge the last run's mutants/ again (after explaining survivors) instead of "
                         "running mutmut; refused when the sources changed since")
    args = ap.parse_args()
    if args.part == "changed":
        ok = changed(args.cap_s, bool(args.write), args.last_run)
    elif args.part == "full":
        ok = full(bool(args.write))
    else:
        if args.write is True:
            ap.error("planted --write needs a path (docs/mutation-planted.md)")
        ok = planted(Path(args.write) if args.write else None)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
