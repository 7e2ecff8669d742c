"""Outputs as the TFE API shows them: from the projection of the current
version (sensitive values withheld), or one output read out of a stored
version's bytes (its value included, for a caller allowed to read state)."""

from __future__ import annotations

import json
from typing import Any

from attrs import frozen

from kilolock.core.model import OutputRow

#: The TFE C{type} of each cty type kind.
_KINDS = {"string": "string", "number": "number", "bool": "boolean", "list": "array",
          "set": "array", "tuple": "array", "map": "object", "object": "object"}


@frozen
class OutputView:
    """One output: its name, whether it is sensitive, its cty type (the
    decoded JSON of the state's C{type}, None when the state has none) and
    its value (None when withheld)."""

    name: str
    sensitive: bool
    detailed_type: Any
    value: Any

    @property
    def type_name(self) -> str:
        """The TFE C{type}: the JSON kind of the value (C{string}, C{number},
        C{boolean}, C{array}, C{object})."""
        kind = self.detailed_type[0] if isinstance(self.detailed_type, list) \
            else self.detailed_type
        if isinstance(kind, str) and kind in _KINDS:
            return _KINDS[kind]
        return _json_kind(self.value)


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string"


def view_of_row(row: OutputRow) -> OutputView:
    """An output of the projection (its value None when sensitive)."""
    return OutputView(
        name=row.name, sensitive=row.sensitive,
        detailed_type=None if row.type is None else json.loads(row.type),
        value=None if row.value is None or row.sensitive else json.loads(row.value))


def output_of_state(raw: bytes, index: int) -> OutputView | None:
    """Output C{index} (in the state's order) of a v4 state's bytes, value
    included; None when the state has no such output (or is not a v4 state
    whose outputs can be read: an encrypted envelope)."""
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    outputs = document.get("outputs") if isinstance(document, dict) else None
    if not isinstance(outputs, dict) or not 0 <= index < len(outputs):
        return None
    name, output = list(outputs.items())[index]
    if not isinstance(output, dict):
        return None
    return OutputView(name=name, sensitive=output.get("sensitive") is True,
                      detailed_type=output.get("type"), value=output.get("value"))
