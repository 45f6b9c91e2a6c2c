"""What every YAML model of the harness is made of: frozen models that refuse unknown keys, and the field types
they share (a safe name, a finite number)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from .configerrors import SAFE_NAME

Name = Annotated[str, Field(pattern=SAFE_NAME)]
Finite = Annotated[float, Field(allow_inf_nan=False)]  # YAML's .inf and .nan are no number of seconds


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
