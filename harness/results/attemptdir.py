"""An attempt's folder, `results/<run-id>/<experiment>/<attempt>/`: the one module that knows the names of the files
in it. The store, the runner (which fetches them), the recording (which reads them), the page, the export and the
triage command ask an `AttemptDir` for a path; no other module spells a name.

    record.json                         the attempt's record (`schemas.Record`)
    record.partial.json                 the same, provisional, while the attempt runs
    server.log                          the server's log as fetched from the host (masked)
    stack-dump.txt                      py-spy's dump of a hung server's processes
    bench-<case>.jsonl, .log            SGLang's bench JSONL and the client's output, per bench case
    bench-<case>.warmup.jsonl, .log     the case's warm-up pass, kept apart from its metrics
    answers.json                        the answer check's answers (an archived run may keep answers.json.gz)
    profile/                            the torch-profiler traces (the rank-0 one is summarised in the record)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..common.protocol import Final

RECORD = "record.json"
PROVISIONAL = "record.partial.json"
SERVER_LOG = "server.log"
STACK_DUMP = "stack-dump.txt"
ANSWERS = "answers.json"
PROFILE = "profile"
_BENCH = "bench-"
_WARMUP = ".warmup"
_RANK0_TRACES = "*-TP-0*.trace.json*"  # SGLang's trace of tensor-parallel rank 0 (.json or .json.gz)


def warmup_name(case: str) -> str:
    """The name a bench case's warm-up files go by beside its own: `<case>.warmup`."""
    return case + _WARMUP


def bench_outputs(final: Final) -> list[tuple[str, str]]:
    """(name, JSONL path on the host) of every bench output to fetch: each case's, then each warm-up's as
    `<case>.warmup` (its log beside it, as a case's)."""
    warmups = [(warmup_name(c.name), c.warmup_file) for c in final.bench.cases or [] if c.warmup_file]
    return list((final.bench.files or {}).items()) + warmups


@dataclass(frozen=True)
class AttemptDir:
    """One attempt's folder and the path of each file in it (nothing is read or created here)."""

    path: Path

    @property
    def record(self) -> Path:
        return self.path / RECORD

    @property
    def provisional(self) -> Path:
        return self.path / PROVISIONAL

    @property
    def server_log(self) -> Path:
        return self.path / SERVER_LOG

    @property
    def stack_dump(self) -> Path:
        return self.path / STACK_DUMP

    @property
    def profile(self) -> Path:
        return self.path / PROFILE

    def answers(self, name: str | None = None) -> Path:
        """The answer check's file (`name`: as the record's `answers.file` says; only its last part counts)."""
        return self.path / Path(name or ANSWERS).name

    def bench_jsonl(self, case: str) -> Path:
        return self.path / f"{_BENCH}{Path(case).name}.jsonl"

    def bench_log(self, case: str) -> Path:
        return self.path / f"{_BENCH}{Path(case).name}.log"

    def bench_logs(self) -> list[tuple[str, Path]]:
        """Each bench client log in the folder, by its case (a warm-up's as `<case>.warmup`), in name order."""
        return [(p.name[len(_BENCH):-len(".log")], p) for p in sorted(self.path.glob(f"{_BENCH}*.log"))]

    def profile_file(self, name: str) -> Path:
        """Where a trace fetched from the host goes (its file name kept)."""
        return self.profile / name.rsplit("/", 1)[-1]

    def rank0_traces(self) -> list[Path]:
        return sorted(self.profile.glob(_RANK0_TRACES)) if self.profile.is_dir() else []

    def profile_files(self) -> list[str]:
        """Every file under profile/, relative to the folder (as the record lists them)."""
        return sorted(self.relative(p) for p in self.profile.iterdir()) if self.profile.is_dir() else []

    def fetched(self, final: Final) -> list[tuple[str, Path]]:
        """What the agent's final report names on the host, and where each file goes in this folder: the server
        log, each bench case's JSONL and client log (warm-ups' too), the answers, the profile's traces, a hung
        server's stack dump."""
        wanted: list[tuple[str, Path]] = []
        if final.server.log:
            wanted.append((final.server.log, self.server_log))
        for case, path in bench_outputs(final):
            wanted += [(path, self.bench_jsonl(case)), (path[: -len(".jsonl")] + ".log", self.bench_log(case))]
        wanted += [(final.bench.answers_file, self.answers())] if final.bench.answers_file else []
        wanted += [(path, self.profile_file(path)) for path in final.bench.profile_files or []]
        if final.server.stack_dump:
            wanted.append((final.server.stack_dump, self.stack_dump))
        return wanted

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.path))
