"""The JSON request bodies of the control API and the retention calls: the
size limit, the text rules (L{kilolock.core.text}) and the allowed
members, each checked here and worded the same everywhere."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kilolock.core.errors import InvalidField
from kilolock.core.text import NotJSON, load_json

__all__ = ["json_body", "json_body_object", "only_fields"]


def json_body(raw: bytes, limit: int, what: str = "") -> Any:
    """The JSON document of a body of at most C{limit} bytes.

    @param what: said after "the body must be a JSON object" when it is not
        JSON (e.g. C{": the OIDC policy"}).
    @raise InvalidField: naming the body, when it is too large or not JSON.
    @raise InvalidText: a text rule is broken (naming the member at fault).
    """
    if len(raw) > limit:
        raise InvalidField("body", f"the body is larger than {limit} bytes")
    try:
        return load_json(raw, "the body", "body")
    except NotJSON:
        raise InvalidField("body", "the body must be a JSON object" + what) from None


def json_body_object(raw: bytes, limit: int, what: str = "") -> dict[str, Any]:
    """As L{json_body}, and the document must be an object.

    @raise InvalidField: naming the body.
    @raise InvalidText: a text rule is broken.
    """
    document = json_body(raw, limit, what)
    if not isinstance(document, dict):
        raise InvalidField("body", "the body must be a JSON object" + what)
    return document


def only_fields(document: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """@raise InvalidField: naming the first member of C{document} not in
    C{allowed} (and listing those)."""
    names = sorted(allowed)
    for name in document:
        if name not in names:
            raise InvalidField(name, f"unknown field {name!r}; expected: " + ", ".join(names))
