"""Whether two decoded JSON documents are identical, for tests that hold a
faster decoder to the standard library's."""

from __future__ import annotations

import struct
from typing import Any


def same_document(left: Any, right: Any) -> bool:
    """Whether two decoded documents are identical: types, dict key order,
    float bits (-0.0 is not 0.0).  Iterative: any depth."""
    pending = [(left, right)]
    while pending:
        a, b = pending.pop()
        if type(a) is not type(b):
            return False
        if isinstance(a, float):
            if struct.pack("<d", a) != struct.pack("<d", b):
                return False
        elif isinstance(a, dict):
            if list(a) != list(b):
                return False
            pending.extend(zip(a.values(), b.values(), strict=True))
        elif isinstance(a, list):
            if len(a) != len(b):
                return False
            pending.extend(zip(a, b, strict=True))
        elif a != b:
            return False
    return True
