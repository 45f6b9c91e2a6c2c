"""The words a user reads first: `--version`, an attempt's one-line cause on the progress line, an apply
failure's first line (git's reason on it, not after a dangling colon) and an abort's reason."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from typer.testing import CliRunner

from harness import __version__
from harness.agent.checkout import git_reason
from harness.agent.errors import abort_message
from harness.cli.app import app
from harness.cli.progress import AttemptProgress, SweepProgress, outcome_detail
from harness.results.schemas import Record

GIT_APPLY_STDERR = ("Checking patch python/sglang/srt/layers/attention/flashinfer_mla_backend.py...\n"
                    "error: patch failed: python/sglang/srt/layers/attention/flashinfer_mla_backend.py:412\n"
                    "error: python/sglang/srt/layers/attention/flashinfer_mla_backend.py: patch does not apply\n")


def record(**kw) -> Record:
    base = dict(run_id="r", experiment="e", attempt="01", host="h", status="ok")
    base.update(kw)
    return Record(**base)


def progress_line(rec: Record) -> str:
    buf = io.StringIO()
    SweepProgress(Console(file=buf, width=400), total=1).attempt_finished("sim-h200", "e r1", rec)
    return buf.getvalue().strip()


def test_version_prints_and_exits_0():
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"harness {__version__}"


def test_git_reason_is_the_first_error_line_without_its_prefix():
    assert git_reason(GIT_APPLY_STDERR) == ("patch failed: "
                                            "python/sglang/srt/layers/attention/flashinfer_mla_backend.py:412")
    assert git_reason("fatal: corrupt patch at line 7\n") == "fatal: corrupt patch at line 7"
    assert git_reason("") == "git gave no reason"


def test_an_apply_failure_ends_its_progress_line_with_gits_reason_not_a_colon():
    error = ("patch set flashinfer_mla_fp8, 0001-plan-fp8.patch does not apply to /root/sglang at 0123456789ab: "
             + git_reason(GIT_APPLY_STDERR) + "\n" + GIT_APPLY_STDERR)
    line = progress_line(record(status="apply-failed", error=error))
    assert line.endswith("flashinfer_mla_backend.py:412)"), line
    assert "0001-plan-fp8.patch" in line and not line.endswith(":)")


def test_a_long_first_line_is_cut_in_the_middle_so_the_reason_at_its_end_stays():
    error = "patch set s, p.patch does not apply to /" + "very/" * 60 + "deep at abc: patch failed: x.py:3"
    detail = outcome_detail(record(status="apply-failed", error=error))
    assert len(detail) <= 160 and "…" in detail
    assert detail.startswith("patch set s, p.patch") and detail.endswith("patch failed: x.py:3")


def test_a_hang_says_where_it_stuck_not_hung_twice():
    rec = record(status="hung", verdict={"category": "hung", "key_line": "Init torch distributed begin.",
                                         "phase": "distributed-init", "hint": None})
    line = progress_line(rec)
    assert "hung (hung)" not in line and line.endswith("→ hung (stuck in distributed-init)"), line
    no_phase = record(status="hung", verdict={"category": "hung", "key_line": None, "phase": None, "hint": None})
    assert progress_line(no_phase).endswith("→ hung")


def test_a_crash_shows_its_category():
    rec = record(status="crashed", verdict={"category": "oom", "key_line": "CUDA out of memory", "phase": "warmup",
                                            "hint": None})
    assert progress_line(rec).endswith("→ crashed (oom)")


def test_an_abort_says_why_once():
    for reason in ("controller-abort", "controller-gone", "controller-silent", "signal 15",
                   "the attempt's time budget of 60s is spent"):
        error = abort_message(reason)
        line = progress_line(record(status="aborted", error=error, abort_reason=reason))
        assert line.count("abort") == 1, line  # the status word only, and the reason in other words
    assert "controller-silent" in abort_message("controller-silent")  # the token stays greppable
    assert abort_message("signal 15") == "the agent received signal 15 and stopped"


@pytest.mark.parametrize("kind", ["attempt", "sweep"])
def test_live_progress_never_shows_raw_markup_while_a_note_is_printed(kind):
    """A note printed while the live view is up redraws the view with the note's print options (markup off,
    so the note's words show as written): the live lines must render the same either way, never `[cyan]…[/]`."""
    buf = io.StringIO()
    console = Console(file=buf, width=120, force_terminal=True, force_interactive=True, color_system="truecolor")
    progress = AttemptProgress(console) if kind == "attempt" else SweepProgress(console, total=2)
    with progress:
        if isinstance(progress, SweepProgress):
            progress.attempt_started("sim-h200", "e r1")
        progress.stage("e#01", "wait")
        assert progress.live is not None
        progress.live.refresh()  # the view as the refresh thread draws it, with its own options
        progress.note("e#01", "a note with [brackets] kept as written")  # the view drawn again below the note
    shown = buf.getvalue()
    assert "wait" in shown and "a note with [brackets] kept as written" in shown
    assert "[cyan]" not in shown and "[/]" not in shown and "[bold]" not in shown, shown


def _command_paths(group, prefix=()):
    for name, cmd in group.commands.items():
        yield (*prefix, name)
        if hasattr(cmd, "commands"):  # a group (typer's own, or click's in an older typer)
            yield from _command_paths(cmd, (*prefix, name))


def test_help_shows_no_value_type_after_a_flag():
    """A flag takes no value: `--dry-run <bool>` reads as if it wanted one. Every command's --help."""
    import typer

    paths = [(), *_command_paths(typer.main.get_command(app))]
    assert ("sweep",) in paths and ("patch", "new") in paths
    for path in paths:
        res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "160"})
        assert res.exit_code == 0, (path, res.output)
        assert "<bool>" not in res.output, (path, res.output)
        assert "--help" in res.output
    res = CliRunner().invoke(app, ["sweep", "--help"], env={"COLUMNS": "160"})
    assert "--dry-run" in res.output and "<path>" in res.output  # options that take a value still say which
