"""Value types shared by configuration sections, kept in a leaf module so detectors can import them."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any) -> Any:
    """``"30s"``, ``"10m"``, ``"1h"``, ``"250ms"`` or a number of seconds → seconds (float)."""
    if isinstance(value, bool):
        return value  # rejected by the float validation that follows
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            return float(m.group(1)) * _UNIT_S[m.group(2)]
    return value


#: A duration in seconds; YAML accepts ``30s``, ``10m``, ``1h``, ``500ms`` or a number of seconds.
Duration = Annotated[float, BeforeValidator(parse_duration), Field(ge=0, json_schema_extra={"duration": True})]
#: A duration that must be longer than zero (a timeout of zero would expire everything at once).
PositiveDuration = Annotated[float, BeforeValidator(parse_duration),
                             Field(gt=0, json_schema_extra={"duration": True})]
