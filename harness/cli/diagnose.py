"""`harness triage` and `harness profile-summary`: read what a server left, a log or a profiler trace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import ConfigError
from ..results.attemptdir import SERVER_LOG, AttemptDir
from .common import exit_on_errors, out


def triage(
    logfile: Path = typer.Argument(..., help="An SGLang server log (any size; read streamed), or an attempt's "
                                             f"folder (results/RUN/EXPERIMENT/NN/): its {SERVER_LOG}."),
    exit_code: Optional[int] = typer.Option(None, "--exit-code", help="The server's exit code, if known."),
    as_json: bool = typer.Option(False, "--json", help="Print {verdict, category, key_line, phase, hint}."),
) -> None:
    """Say why a server log ended: ready, crash (category, key line, phase, hint) or incomplete."""
    import json

    from ..triage.classify import triage_file

    with exit_on_errors():
        given = logfile
        logfile = server_log_of(logfile)
        v = triage_file(logfile, exit_code)
        if as_json:
            print(json.dumps(v.to_dict()))
            return
        if logfile != given:
            out.print(f"log: {logfile}", highlight=False)
        style = {"ready": "green", "crash": "red"}.get(v.verdict or "", "yellow")
        out.print(f"[{style}]{v.verdict}[/]: {v.category} (phase: {v.phase})")
        if v.key_line:
            out.print(f"key line: {escape(v.key_line)}", highlight=False)
        if v.hint:
            out.print(f"hint: {escape(v.hint)}", highlight=False)


def server_log_of(path: Path) -> Path:
    """The log `harness triage` reads: the file given, or the server.log in the attempt folder given."""
    if path.is_dir():
        if AttemptDir(path).server_log.is_file():
            return AttemptDir(path).server_log
        raise ConfigError(f"a folder with no {SERVER_LOG}", file=path,
                          hint=f"pass a server log, or an attempt's folder that holds one "
                               f"(results/RUN/EXPERIMENT/NN/{SERVER_LOG})")
    if not path.is_file():
        raise ConfigError("log file not found", file=path, hint="check the path")
    return path


def profile_summary(
    trace: Path = typer.Argument(..., help="A torch-profiler trace (.json or .json.gz), e.g. SGLang's "
                                           "*-TP-0.trace.json.gz; read streamed."),
    top: int = typer.Option(10, "--top", help="How many operations to list."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """The operations that take the GPU's time, kernels grouped under the framework op that launched them."""
    from ..triage.profile import kernel_label, summarize_trace

    with exit_on_errors():
        if not trace.is_file():
            raise ConfigError("trace file not found", file=trace)
        try:
            summary = summarize_trace(trace, top=top)
        except (ValueError, OSError) as exc:
            raise ConfigError(f"not a readable Chrome/torch-profiler trace: {exc}", file=trace) from None
        if as_json:
            print(json.dumps(summary.to_dict(), indent=1))
            return
        per_step_us = summary.per_step_us
        per_step = (f", {per_step_us / 1e3:.2f} ms per step over {summary.steps} steps" if per_step_us is not None
                    else "")
        out.print(f"GPU time {summary.total_gpu_us / 1e3:.2f} ms in {summary.kernels} kernels{per_step}",
                  highlight=False)
        table = Table(box=None, show_header=True, header_style="bold")
        for col in ("share", "GPU ms", "calls"):
            table.add_column(col)
        # One column for the names, the top kernel under its op: two columns halve the room of each, and a
        # kernel replayed from a CUDA graph (no op: its own name stands there) would be named twice.
        table.add_column("operation (↳ its top kernel)", overflow="fold")  # a name too long is folded, not cut
        for op in summary.top:
            name = kernel_label(op.name)
            kernel = kernel_label(op.kernels[0][0]) if op.kernels else name
            table.add_row(f"{op.share * 100:5.1f}%", f"{op.gpu_us / 1e3:.2f}", str(op.calls),
                          escape(name) + (f"\n↳ {escape(kernel)}" if kernel != name else ""))
        out.print(table)
