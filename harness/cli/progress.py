"""Progress on the console: live (rich) on a terminal, one plain line per event on a pipe."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, TypeVar

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..common.protocol import Status
from ..results.schemas import Record
from ..safetext import display_line

if TYPE_CHECKING:
    from ..run.health import DownHost

P = TypeVar("P", bound="AttemptProgress")

STATUS_STYLE = {Status.OK: "green", Status.CRASHED: "red", Status.HUNG: "yellow", Status.ABORTED: "magenta"}


class AttemptProgress:
    """Per attempt: the stage it is in and the time spent."""

    def __init__(self, console: Console):
        self.console = console
        self.live: Live | None = None
        self._lock = threading.Lock()
        self.rows: dict[str, tuple[str, float, float]] = {}  # label → (stage, attempt start, stage start)

    def __enter__(self: P) -> P:
        if self.console.is_terminal:
            self.live = Live(console=self.console, refresh_per_second=8, transient=True, get_renderable=self.render)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    def render(self) -> RenderableType:
        # Text, never markup: a line printed while the view is up redraws it with that print's options, and a
        # note is printed with markup off (its words as written), which would show `[cyan]wait[/]` as it is.
        table = Table.grid(padding=(0, 2))
        now = time.monotonic()
        with self._lock:
            rows = list(self.rows.items())
        for label, (stage, t0, ts) in rows:
            table.add_row(_cell(label, "bold"), _cell(stage, "cyan"), _cell(f"{now - ts:5.1f}s in stage"),
                          _cell(f"{now - t0:6.1f}s total"))
        return table

    def stage(self, label: str, stage: str) -> None:
        now = time.monotonic()
        with self._lock:
            t0 = self.rows.get(label, (None, now, now))[1]
            self.rows[label] = (stage, t0, now)
        if self.live is None:
            self.console.print(f"[{now - t0:6.1f}s] {label}: {stage}", highlight=False, markup=False)

    def note(self, label: str, message: str) -> None:
        self.console.print(f"{label}: {message}", highlight=False, markup=False)


class SweepProgress(AttemptProgress):
    """Per host: the attempt and its stage with elapsed time; totals done / failed / left; time left."""

    def __init__(self, console: Console, total: int):
        super().__init__(console)
        self.total = total
        self.by_host: dict[str, str] = {}  # host → attempt label
        self.counts: tuple[int, int, int, float | None] = (0, 0, total, None)
        self.down: dict[str, str] = {}  # host → "NAME down since HH:MM: why"

    def render(self) -> RenderableType:
        table = Table(box=None, padding=(0, 2), show_header=True, header_style="bold")
        for col in ("host", "attempt", "stage", "in stage", "elapsed"):
            table.add_column(col)
        now = time.monotonic()
        with self._lock:
            hosts = dict(self.by_host)
            rows = dict(self.rows)
        for host, label in sorted(hosts.items()):
            match = [(lbl, v) for lbl, v in rows.items() if lbl.startswith(label.split(" r")[0] + "#")]
            if match:  # Text, never markup (AttemptProgress.render says why)
                _, (stage, t0, ts) = match[-1]
                table.add_row(_cell(host), _cell(label), _cell(stage, "cyan"), _cell(f"{now - ts:5.1f}s"),
                              _cell(f"{now - t0:6.1f}s"))
            else:
                table.add_row(_cell(host), _cell(label), _cell(""), _cell(""), _cell(""))
        footer = Text(self.totals_line())
        return Group(table, footer)

    def totals_line(self) -> str:
        """Done / failed / left, the time left, and the hosts the sweep no longer uses (so a short "time
        left" is never read as the whole story while hosts are down)."""
        done, failed, left, eta = self.counts
        eta_s = f", about {_fmt_duration(eta)} left" if eta is not None and left else ""
        with self._lock:
            down = sorted(self.down.values())
        waiting = f"; waiting: {'; '.join(down)}" if down else ""
        return f"{done} done ({failed} not ok), {left} left of {self.total}{eta_s}{waiting}"

    def attempt_started(self, host: str, label: str) -> None:
        with self._lock:
            self.by_host[host] = label
        if self.live is None:
            self.console.print(f"{host}: start {label}", highlight=False, markup=False)

    def attempt_finished(self, host: str, label: str, record: Record) -> None:
        with self._lock:
            if self.by_host.get(host) == label:
                del self.by_host[host]
            for lbl in [lbl for lbl in self.rows if lbl.startswith(record.experiment + "#")]:
                del self.rows[lbl]
        detail = outcome_detail(record)
        detail = f" ({detail})" if detail else ""
        style = STATUS_STYLE.get(record.status, "magenta")
        self.console.print(f"{escape(host)}: {escape(label)} → [{style}]{record.status}[/]{escape(detail)}",
                           highlight=False)

    def stage(self, label: str, stage: str) -> None:
        now = time.monotonic()
        with self._lock:
            t0 = self.rows.get(label, (None, now, now))[1]
            self.rows[label] = (stage, t0, now)
        # On a pipe, sweep stages would drown the log: only starts and ends are printed there.

    def totals(self, done: int, failed: int, left: int, eta_s: float | None) -> None:
        self.counts = (done, failed, left, eta_s)
        if self.live is None:
            self.console.print(f"-- {self.totals_line()}", highlight=False, markup=False)

    def host_down(self, host: str, down: DownHost) -> None:
        line = down.describe(host)
        with self._lock:
            self.down[host] = line
        self.console.print(f"[red]host {escape(host)} is down[/] (no more work goes to it until a re-probe "
                           f"answers): {escape(line)}", highlight=False)

    def host_up(self, host: str, since: float) -> None:
        with self._lock:
            self.down.pop(host, None)
        self.console.print(f"[green]host {escape(host)} back up at {_clock(since)}[/] (a re-probe answered; it "
                           f"takes work again)", highlight=False)


def _cell(text: str, style: str = "") -> Text:
    """A cell of the live view: Text (not markup, see AttemptProgress.render), its control characters escaped
    as the console does for strings (Text skips that)."""
    return Text(display_line(text), style=style)


def outcome_detail(record: Record, limit: int = 160) -> str:
    """What the progress line adds to an attempt's status: the cause, in words the status does not already say
    (a hang's category is "hung": its phase says more)."""
    status = Status(record.status).value
    if record.verdict is not None:
        if record.verdict.category != status:
            return record.verdict.category
        return f"stuck in {record.verdict.phase}" if record.verdict.phase else ""
    if record.status == Status.OK or not record.error:
        return ""
    first = record.error.strip().splitlines()[0].strip()
    if first.lower() in (status, status + ":"):
        return ""
    return _elide_middle(first, limit)


def _elide_middle(text: str, limit: int) -> str:
    # The middle, not the end: a message's end is where git's reason or the key fact sits.
    if len(text) <= limit:
        return text
    keep = limit - 1
    return text[: keep // 2] + "…" + text[len(text) - (keep - keep // 2):]


def _clock(wall: float) -> str:
    return time.strftime("%H:%M", time.localtime(wall))


def _fmt_duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 90:
        return f"{seconds}s"
    if seconds < 5400:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
