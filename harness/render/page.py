"""A night's sweep as one self-contained page (`harness report --html DIR`, and the end of `harness demo`).

The page is static HTML: CSS inline, charts inline SVG (svgcharts.py draws them when the page is built, with
no extra installed, so no browser, server or network is needed to read it), the failed attempts' log excerpts
copied beside it under `logs/` and linked relatively — the folder opens from disk or from any static host.

`build_context` is pure (rows and records in, a dict for the template out); `write_html` reads the log
excerpts, renders the template and writes the folder (outdir.py: only files the harness wrote are ever
replaced). The numbers and their words come from compare.py (rows, cells, the one
judgement of a ratio and its significance) and units.py (a metric's words, a number's format): nothing is computed
twice.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .. import __version__
from ..analysis import answers, compare, families, stack, units
from ..common.protocol import Status
from ..masking import controller_secret_values, mask_secrets
from ..results.schemas import Record, RunInfo
from ..results.store import ResultsStore
from ..safetext import display_lines
from . import outdir, svgcharts

LOG_LINES = 200  # the last lines of a failed attempt's server log copied beside the page
PAGE = "index.html"
NO_PARETO = ("No latency–throughput chart: it needs bench cases that differ only in max_concurrency (read from the "
             "bench JSONL beside each record), measured at two levels or more.")
REFUSED = {Status.PREFLIGHT_FAILED: "refused before launch"}

AttemptKey = tuple[str, str, str]  # run, experiment, attempt


def attempt_key(rec: Record) -> AttemptKey:
    return (rec.run_id, rec.experiment, rec.attempt)


# ============================================================================ the context (pure)


def table_context(rows: list[compare.Row], metric: str) -> dict[str, Any]:
    """The comparison table as the page shows it: the terminal's texts (compare.py's), with the GPU of every
    row, the verdict of each ratio as a class (its colour) and its p-value."""
    cases = sorted({c for r in rows for c in r.cells})
    tops = any(r.top_op for r in rows)
    headers = ["experiment", "backend", "GPU", "status"]
    for c in cases:
        headers += [compare.value_header(c, metric), f"{c} vs base"]
    ans, stacks = any(r.answers for r in rows), compare.mixed_stacks(rows)
    headers += (["answers"] if ans else []) + (["top op"] if tops else []) + (["stack"] if stacks else []) + ["notes"]
    empty = compare.Cell(None, None, 0, [])
    lines = []
    for r in rows:
        cells: list[dict[str, Any]] = [{"text": r.label}, {"text": r.backend or "-"}, {"text": r.gpu or "-"},
                                       {"text": compare.status_text(r), "cls": status_class(r)}]
        for c in cases:
            cell = r.cells.get(c) or empty
            cells.append({"text": compare.cell_text(cell), "cls": "num"})
            p = f"p = {cell.p_value:.3g} (Mann-Whitney)" if cell.p_value is not None else None
            cells.append({"text": compare.ratio_text(cell, r.is_baseline),
                          "cls": f"num v-{cell.verdict.replace('/', '')}", "title": p,
                          "p": f"p={cell.p_value:.2g}" if cell.p_value is not None else None})
        if ans:
            v = r.answer_verdict
            cells.append({"text": r.answers or "", "cls": None if v is None else "v-better" if v.passed else "v-worse",
                          "title": None if v is None else f"{v.diverged} of {v.prompts} prompts diverged, {v.bad} bad"})
        if tops:
            cells.append({"text": r.top_op or "-"})
        if stacks:
            cells.append({"text": r.stack_id or "-", "cls": "mono", "title": stack_title(r)})
        notes = ([compare.short_key_line(r.key_line)] if r.key_line else []) + r.notes
        cells.append({"text": "; ".join(notes), "cls": "notes"})
        cells = [{"cls": None, "title": None, "p": None, **c} for c in cells]  # every key, for the template
        lines.append({"label": r.label, "baseline": r.is_baseline, "status": status_class(r), "cells": cells})
    return {"headers": headers, "rows": lines, "baseline": [r.label for r in rows if r.is_baseline]}


def stack_title(row: compare.Row) -> str | None:
    """What the stack id names, for its tooltip: "torch 2.9.1+cu128, CUDA runtime 12.8, …"."""
    return ", ".join(f"{k} {v}" for k, v in (row.stack or {}).items() if v) or None


def status_class(row: compare.Row) -> str:
    if row.expected:
        return "expected"
    return "ok" if row.status == Status.OK else "fail"


def failures(records: list[Record], logs: Mapping[AttemptKey, str]) -> list[dict[str, Any]]:
    """Every attempt that did not run ok (crashed, hung, refused before launch, …): why, where, and a link to
    its log excerpt (`logs`: attempt → relative link) when it had a server log."""
    out = []
    for rec in records:
        if rec.status == Status.OK:
            continue
        v = rec.verdict
        error = rec.error.strip().splitlines()[0] if rec.error and rec.error.strip() else None
        key_line = v.key_line if v and v.key_line else error
        out.append({
            "run": rec.run_id, "experiment": rec.experiment, "attempt": rec.attempt, "host": rec.host,
            "gpu": compare.gpu_of(rec), "backend": rec.backend,
            "status": rec.status.value, "what": REFUSED.get(rec.status, rec.status.value),
            "expected": bool(rec.expectation_met) and rec.expect in ("crash", "hang"),
            "category": v.category if v else None, "key_line": key_line, "phase": v.phase if v else None,
            "hint": v.hint if v else None, "error": error if error != key_line else None,
            "log": logs.get(attempt_key(rec)),
        })
    out.sort(key=lambda f: (f["expected"], f["run"], f["experiment"], f["attempt"]))
    return out


def top_ops(records: list[Record]) -> list[dict[str, Any]]:
    """The top op (by GPU time) of each backend's latest profiled attempt, per GPU."""
    latest: dict[tuple[str, str], Record] = {}
    for rec in records:
        if rec.status == Status.OK and rec.profile is not None and rec.profile.top:
            latest[(rec.backend or rec.experiment, compare.gpu_of(rec) or "-")] = rec
    out = []
    for (backend, gpu), rec in sorted(latest.items()):
        assert rec.profile is not None
        op = rec.profile.top[0]
        kernel = max(op.kernels, key=lambda k: k.gpu_us).name if op.kernels else None
        out.append({"backend": backend, "gpu": gpu, "experiment": rec.experiment, "op": op.name,
                    "share": f"{op.share * 100:.0f}%", "gpu_ms": f"{op.gpu_us / 1000:,.1f}", "calls": op.calls,
                    "kernel": kernel,
                    "next": ", ".join(f"{o.name} {o.share * 100:.0f}%" for o in rec.profile.top[1:3])})
    return out


def provenance(records: list[Record], runs: Mapping[str, RunInfo | None]) -> dict[str, Any]:
    """Where and on what the runs ran: one line per run and host, and every patch set's hash."""
    hosts: dict[tuple[str, str], dict[str, Any]] = {}
    patches: dict[tuple[str, str], set[str]] = {}
    stacks: dict[tuple[str, str, str], stack.Fingerprint] = {}
    for rec in records:
        p = rec.provenance
        line = hosts.setdefault((rec.run_id, rec.host), {
            "run": rec.run_id, "host": rec.host, "hostname": set(), "gpu": set(), "arch": set(), "sglang": set(),
            "flashinfer": set(), "commit": set(), "harness": set()})
        for k, value in (("hostname", p.hostname), ("gpu", compare.gpu_of(rec)), ("arch", p.arch or rec.arch),
                         ("sglang", p.server_version), ("flashinfer", p.flashinfer_version),
                         ("commit", p.base_commit), ("harness", p.harness_version)):
            if value:
                line[k].add(value)
        for name, digest in p.patch_sets.items():
            patches.setdefault((rec.run_id, name), set()).add(digest)
        fp = stack.fingerprint(rec)
        if fp is not None:
            stacks[(rec.run_id, rec.host, stack.stack_id(fp) or "")] = fp
    lines = [{k: (", ".join(sorted(v)) or "-") if isinstance(v, set) else v for k, v in h.items()}
             for _, h in sorted(hosts.items())]
    return {
        "hosts": lines,
        "patches": [{"run": run, "name": name, "sha256": ", ".join(sorted(d))}
                    for (run, name), d in sorted(patches.items())],
        "stack_facts": [k for k in stack.MATTERS + stack.NOTE_ONLY if k != "driver"],
        "stacks": [{"run": run, "host": host, "id": sid, **{k: v or "-" for k, v in fp.items()}}
                   for (run, host, sid), fp in sorted(stacks.items())],
        "runs": [{"run": run_id, "sweep": info.sweep if info else None, "created": info.created if info else None,
                  "baseline": info.baseline if info else None, "planned": len(info.attempts) if info else None}
                 for run_id, info in runs.items()],
    }


def changes(records: list[Record], rows: list[compare.Row], metric: str, run_a: str, run_b: str) -> dict[str, Any]:
    """What changed from run A to run B: provenance (versions, commits, patch hashes, GPUs), experiments
    added or gone, statuses, and each experiment's medians (B over A, with the significance test)."""
    def facts(run: str) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for rec in records:
            if rec.run_id != run:
                continue
            p = rec.provenance
            for k, value in (("SGLang", p.server_version), ("FlashInfer", p.flashinfer_version),
                             ("base commit", p.base_commit), ("GPU", compare.gpu_of(rec)), ("host", rec.host),
                             ("harness", p.harness_version)):
                out.setdefault(k, set()).update([value] if value else [])
            for name, digest in p.patch_sets.items():
                out.setdefault(f"patch set {name}", set()).add(digest[:12])
            for k, value in (stack.fingerprint(rec) or {}).items():
                if k not in ("FlashInfer", "GPU", "driver"):  # listed above, or as the full driver version
                    out.setdefault(f"stack: {k}", set()).update([value] if value else [])
        return out

    fa, fb = facts(run_a), facts(run_b)
    setup = [{"what": k, "a": ", ".join(sorted(fa.get(k, ()))) or "-", "b": ", ".join(sorted(fb.get(k, ()))) or "-"}
             for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]
    by = {(r.run_id, r.experiment, r.gpu): r for r in rows}
    exps_a = {(e, g) for (run, e, g) in by if run == run_a}
    exps_b = {(e, g) for (run, e, g) in by if run == run_b}

    def name(e: str, g: str | None) -> str:
        return e + (f" @ {g}" if g else "")

    moved = []
    for e, g in sorted(exps_a & exps_b, key=lambda x: (x[0], x[1] or "")):
        ra, rb = by[(run_a, e, g)], by[(run_b, e, g)]
        if ra.status != rb.status or ra.expected != rb.expected:
            moved.append({"experiment": name(e, g), "case": "status", "a": compare.status_text(ra),
                          "b": compare.status_text(rb), "change": "status changed", "cls": "v-na"})
        other_stack = stack.differences(rb.stack, ra.stack)[0]  # what makes B's numbers not comparable to A's
        if other_stack:
            moved.append({"experiment": name(e, g), "case": "stack", "a": ra.stack_id or "-", "b": rb.stack_id or "-",
                          "change": "not comparable: " + ", ".join(other_stack), "cls": "v-na"})
        for case in sorted(set(ra.cells) & set(rb.cells)):
            ca, cb = ra.cells[case], rb.cells[case]
            if not ca.median or cb.median is None:
                continue
            # B against A: the one rule, `compare --against`'s; across stacks a ratio without a verdict
            cell = compare.judge(ca, cb, metric, comparable=not other_stack)
            moved.append({"experiment": name(e, g), "case": case, "a": compare.cell_text(ca),
                          "b": compare.cell_text(cb), "change": compare.ratio_text(cell, False),
                          "cls": f"v-{cell.verdict.replace('/', '')}"})
    return {"a": run_a, "b": run_b, "setup": setup, "results": moved,
            "added": [name(e, g) for e, g in sorted(exps_b - exps_a, key=lambda x: (x[0], x[1] or ""))],
            "gone": [name(e, g) for e, g in sorted(exps_a - exps_b, key=lambda x: (x[0], x[1] or ""))]}


def summary(records: list[Record]) -> list[dict[str, Any]]:
    counts = Counter(r.status.value for r in records)
    return [{"status": s, "n": n, "cls": "ok" if s == Status.OK.value else "fail"} for s, n in counts.most_common()]


def build_context(records: list[Record], rows: list[compare.Row], metric: str, *,
                  runs: Mapping[str, RunInfo | None], plots: list[dict[str, Any]],
                  pareto: list[dict[str, Any]] | None = None, logs: Mapping[AttemptKey, str] | None = None,
                  chosen_baseline: bool = False, generated: str | None = None,
                  against: dict[str, Any] | None = None, bisects: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Everything the template shows. `plots`: one {case, svg} per bench case; `pareto`: the latency–throughput
    charts (svgcharts.py). `against`: the run against an earlier one (nightstext.page_context), or None;
    `bisects`: each bisect run's section (bisecttext.page_context)."""
    run_ids = list(runs)
    diff = changes(records, rows, metric, run_ids[0], run_ids[1]) if len(run_ids) == 2 else None
    return {
        "title": "harness report: " + ", ".join(run_ids),
        "run_ids": run_ids,
        "generated": generated or time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "harness_version": __version__,
        "metric": metric, "metric_title": units.metric_title(metric, better=True),
        "significant": compare.SIGNIFICANT, "not_significant": compare.NOT_SIGNIFICANT,
        "interval_legend": compare.INTERVAL_LEGEND,
        "drift_legend": compare.DRIFT_LEGEND,
        "answers_legend": answers.LEGEND,
        "noisy_cv": f"{compare.NOISY_CV * 100:.0f}%", "min_samples": compare.MIN_SAMPLES,
        "chosen_baseline": chosen_baseline,
        "attempts": len(records), "summary": summary(records),
        "table": table_context(rows, metric),
        "plots": plots, "pareto": pareto or [], "pareto_note": None if pareto else NO_PARETO,
        "failures": failures(records, logs or {}),
        "top_ops": top_ops(records),
        "provenance": provenance(records, runs),
        "changes": diff,
        "against": against,
        "bisects": bisects or [],
    }


# ============================================================================ charts (svgcharts.py, no extra)


def charts(records: list[Record], rows: list[compare.Row], metric: str,
           stores: Mapping[str, ResultsStore]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The page's charts: one per bench case, and the latency–throughput ones of each family of cases (their
    max_concurrency read from the bench JSONL beside the records)."""
    def read(rec: Record, case: str) -> list[dict[str, Any]]:
        store = stores.get(rec.run_id)
        return store.read_bench_lines(rec, case) if store is not None else []

    fams = families.families(rows, records, families.read_loads(records, read))
    return svgcharts.case_plots(rows, metric), svgcharts.pareto_plots(fams)


# ============================================================================ writing the folder


def log_excerpt(path: Path, lines: int = LOG_LINES, secrets: list[str] | None = None) -> str:
    """The last `lines` lines of a server log. Logs are masked when fetched (runner); the values of secret-named
    variables of this environment (as `controller_secret_values` picks them) are masked again, in case the page
    leaves the machine."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 512 * 1024))
        data = f.read().decode("utf-8", errors="replace")
    tail = data.splitlines()[-lines:]
    head = f"# last {len(tail)} lines of {path.name}\n" if len(tail) == lines else ""
    secrets = secrets if secrets is not None else controller_secret_values()
    excerpt = mask_secrets(head + "\n".join(tail) + "\n", secrets)
    return display_lines(excerpt)  # for reading (browser, terminal): server.log itself stays byte-exact


def log_excerpts(records: list[Record], stores: Mapping[str, ResultsStore]) -> dict[AttemptKey, tuple[str, str]]:
    """Each failed attempt's server log excerpt, to be written beside the page as
    `logs/<run>/<experiment>-<attempt>.log.txt`: attempt → (its path relative to the page, the excerpt)."""
    out = {}
    for rec in records:
        store = stores.get(rec.run_id)
        if rec.status == Status.OK or store is None:
            continue
        src = store.attempt_of(rec).server_log
        if not src.is_file():
            continue
        rel = f"logs/{_safe(rec.run_id)}/{_safe(rec.experiment)}-{_safe(rec.attempt)}.log.txt"
        out[attempt_key(rec)] = (rel, log_excerpt(src))
    return out


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip(".") or "_"


def _shown(value: Any) -> Any:
    """Every value the page prints: a host's control characters shown escaped (autoescape then makes it HTML);
    markup the harness made itself (the charts' SVG, marked safe) is left as it is."""
    from markupsafe import Markup

    if isinstance(value, str) and not isinstance(value, Markup):
        return display_lines(value)
    return value


def render(context: dict[str, Any]) -> str:
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(loader=PackageLoader("harness.render", "templates"),
                      autoescape=select_autoescape(["html", "j2"]), undefined=StrictUndefined, trim_blocks=True,
                      lstrip_blocks=True, finalize=_shown)
    return env.get_template("report.html.j2").render(**context)


def write_html(out_dir: Path, records: list[Record], rows: list[compare.Row], metric: str, *,
               stores: Mapping[str, ResultsStore], runs: Mapping[str, RunInfo | None],
               chosen_baseline: bool = False, against: dict[str, Any] | None = None,
               bisects: list[dict[str, Any]] | None = None) -> Path:
    """Write the page and its log excerpts into `out_dir` (created; an earlier page of ours there is replaced,
    anything else there refused: outdir.write_folder); the page's path."""
    outdir.check(out_dir)  # refuse a foreign folder before the work of building the page
    excerpts = log_excerpts(records, stores)
    logs = {key: "/".join(quote(part) for part in rel.split("/")) for key, (rel, _) in excerpts.items()}
    plots, pareto = charts(records, rows, metric, stores)
    context = build_context(records, rows, metric, runs=runs, plots=plots, pareto=pareto, logs=logs,
                            chosen_baseline=chosen_baseline, against=against, bisects=bisects)
    contents = {rel: text.encode("utf-8") for rel, text in excerpts.values()}
    contents[PAGE] = render(context).encode("utf-8")
    outdir.write_folder(out_dir, contents)
    return out_dir / PAGE
