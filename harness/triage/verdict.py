"""Why a server ended: the one type for what the log reader answers (harness.triage.classify) and what a
record keeps (`Record.verdict`, harness.results.schemas), which also holds the hang timer's answer."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from ..safetext import DisplayLine


class Verdict(BaseModel):
    """The log reader fills every field; a hang's or a port clash's verdict has no `verdict` (no log was
    judged) and may lack a phase. A key left unset stays out of record.json, as it always has."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    verdict: str | None = None  # ready | crash | incomplete (from the log reader; absent for a hang)
    category: str  # one of classify.CATEGORIES, or hung / port-in-use
    key_line: DisplayLine | None = None  # the single most telling line (shown escaped)
    phase: str | None = None  # where startup was: args, distributed-init, ..., serving, unknown
    hint: DisplayLine | None = None  # one actionable sentence

    def __init__(self, *fields: Any, **named: Any) -> None:
        # The log reader builds verdicts positionally, in the order the fields are declared above.
        super().__init__(**dict(zip(type(self).model_fields, fields)), **named)

    def to_dict(self) -> dict[str, Any]:
        """Every field, set or not: what `harness triage --json` prints and an attempt's live verdict holds."""
        return self.model_dump()
