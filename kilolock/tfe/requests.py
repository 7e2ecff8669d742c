"""The JSON:API documents TFE clients send, parsed and checked.

Every parser takes the raw body and returns a small value or raises
L{InvalidDocument} (400: not JSON, not an object, no C{data} object,
another C{type}) or L{InvalidAttribute} (422: an attribute missing or of
the wrong kind or value), each naming the JSON pointer at fault.  Nothing
here stores, logs or echoes a value.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from typing import Any

from attrs import frozen

from kilolock.core.text import NotJSON, load_json
from kilolock.tfe.errors import InvalidAttribute, InvalidDocument
from kilolock.tfe.model import Tag
from kilolock.tfe.names import MAX_TAGS, InvalidName, check_tag_text, check_workspace_name

#: The largest JSON:API document accepted (an inline state aside).
MAX_DOCUMENT_BYTES = 1024 * 1024
#: The largest serial (a Go int64).
MAX_SERIAL = 2**63 - 1
_MD5_HEX = re.compile(r"^[0-9a-fA-F]{32}$")

WORKSPACES = "workspaces"
STATE_VERSIONS = "state-versions"
TAGS = "tags"
TAG_BINDINGS = "tag-bindings"


@frozen
class ResourceObject:
    """The primary data of a document: its attributes and relationships."""

    attributes: dict[str, Any]
    relationships: dict[str, Any]


@frozen
class WorkspaceCreate:
    name: str
    tags: tuple[Tag, ...] = ()


@frozen
class StateVersionCreate:
    """C{POST .../state-versions}: the announced serial, MD5 (hex, lower
    case) and lineage, and the raw state when sent inline (legacy mode)."""

    serial: int
    md5: str
    lineage: str = ""
    state: bytes | None = None


def load_document(body: bytes, limit: int = MAX_DOCUMENT_BYTES) -> dict[str, Any]:
    """The body as a JSON object, under the text rules of every lane
    (L{kilolock.core.text}).

    @raise InvalidDocument: too large, not JSON, or not an object.
    @raise InvalidText: not UTF-8, nested too deeply, a non-finite number, a
        NUL or an unpaired surrogate in a string.
    """
    if len(body) > limit:
        raise InvalidDocument(f"the document is larger than {limit} bytes", "")
    try:
        document = load_json(body, "the document")
    except NotJSON:
        raise InvalidDocument("the body is not a JSON document", "") from None
    if not isinstance(document, dict):
        raise InvalidDocument("the body must be a JSON object (a JSON:API document)", "")
    return document


def primary_data(document: dict[str, Any], kind: str) -> ResourceObject:
    """The primary resource object of a document, which must be of type C{kind}.

    @raise InvalidDocument: no C{data} object, or another C{type}.
    @raise InvalidAttribute: C{attributes} or C{relationships} not objects.
    """
    data = document.get("data")
    if not isinstance(data, dict):
        raise InvalidDocument("the document has no 'data' object")
    if data.get("type") != kind:
        raise InvalidDocument(f"'data' must be of type '{kind}'", "/data/type")
    attributes = data.get("attributes", {})
    relationships = data.get("relationships", {})
    if not isinstance(attributes, dict):
        raise InvalidAttribute("'attributes' must be an object", "/data/attributes")
    if not isinstance(relationships, dict):
        raise InvalidAttribute("'relationships' must be an object", "/data/relationships")
    return ResourceObject(attributes, relationships)


def parse_workspace_create(body: bytes) -> WorkspaceCreate:
    """C{POST organizations/:org/workspaces}: the name, and tags from the
    C{tags} relationship (plain tags) and C{tag-bindings} (key/value)."""
    data = primary_data(load_document(body), WORKSPACES)
    name = _name(data.attributes.get("name"), "/data/attributes/name")
    tags = [*_related_tags(data.relationships, TAGS), *_related_tags(data.relationships,
                                                                     TAG_BINDINGS)]
    return WorkspaceCreate(name, _at_most(tags))


def parse_workspace_update(body: bytes) -> str | None:
    """C{PATCH workspaces/:id}: the new name when one is sent (everything
    else, C{terraform-version} included, is accepted and ignored)."""
    data = primary_data(load_document(body), WORKSPACES)
    if "name" not in data.attributes:
        return None
    return _name(data.attributes["name"], "/data/attributes/name")


def parse_lock_reason(body: bytes) -> str:
    """C{POST .../actions/lock}: the optional C{reason} (an empty body is fine)."""
    if not body.strip():
        return ""
    data = load_document(body).get("data")
    attributes = data.get("attributes") if isinstance(data, dict) else None
    reason = attributes.get("reason") if isinstance(attributes, dict) else None
    return reason if isinstance(reason, str) else ""


def parse_state_version_create(body: bytes, limit: int) -> StateVersionCreate:
    """C{POST workspaces/:id/state-versions} (C{limit}: the largest body,
    as an inline state may be sent).  C{json-state} and
    C{json-state-outputs} must be strings when present and are not kept."""
    data = primary_data(load_document(body, limit), STATE_VERSIONS)
    attributes = data.attributes
    serial = attributes.get("serial")
    if isinstance(serial, bool) or not isinstance(serial, int) \
            or not 0 <= serial <= MAX_SERIAL:
        raise InvalidAttribute("serial must be an integer from 0 to 2^63-1",
                               "/data/attributes/serial")
    md5 = attributes.get("md5")
    if not isinstance(md5, str) or not _MD5_HEX.match(md5):
        raise InvalidAttribute("md5 must be the 32 hex digits of the state's MD5",
                               "/data/attributes/md5")
    lineage = attributes.get("lineage", "")
    if not isinstance(lineage, str) or len(lineage) > 256 or not _plain_text(lineage):
        raise InvalidAttribute("lineage must be a string of at most 256 characters without"
                               " control characters", "/data/attributes/lineage")
    for name in ("json-state", "json-state-outputs", "state"):
        if attributes.get(name) is not None and not isinstance(attributes[name], str):
            raise InvalidAttribute(f"{name} must be a base64 string",
                                   f"/data/attributes/{name}")
    if "force" in attributes and not isinstance(attributes["force"], bool):
        raise InvalidAttribute("force must be true or false", "/data/attributes/force")
    state = None
    if attributes.get("state"):
        try:
            state = base64.b64decode(attributes["state"], validate=True)
        except (binascii.Error, ValueError):
            raise InvalidAttribute("state must be base64", "/data/attributes/state") from None
    return StateVersionCreate(serial=serial, md5=md5.lower(), lineage=lineage, state=state)


def parse_tags(body: bytes) -> tuple[Tag, ...]:
    """C{POST workspaces/:id/relationships/tags}: C{data}, a list of tags."""
    return _at_most(_tag_items(load_document(body).get("data"), TAGS, "/data"))


def parse_tag_bindings(body: bytes) -> tuple[Tag, ...]:
    """C{PATCH workspaces/:id/tag-bindings}: C{data}, a list of bindings."""
    return _at_most(_tag_items(load_document(body).get("data"), TAG_BINDINGS, "/data"))


# -- private ----------------------------------------------------------------


def _plain_text(text: str) -> bool:
    """Valid UTF-8 (no lone surrogates) without control characters."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return text.isprintable()


def _name(value: Any, pointer: str) -> str:
    try:
        return check_workspace_name(value)
    except InvalidName as error:
        raise InvalidAttribute(str(error), pointer) from None


def _related_tags(relationships: dict[str, Any], kind: str) -> Iterator[Tag]:
    if kind not in relationships:
        return iter(())
    relationship = relationships[kind]
    pointer = f"/data/relationships/{kind}"
    if not isinstance(relationship, dict):
        raise InvalidAttribute(f"the {kind} relationship must be an object", pointer)
    return _tag_items(relationship.get("data"), kind, pointer + "/data")


def _tag_items(items: Any, kind: str, pointer: str) -> Iterator[Tag]:
    if not isinstance(items, list):
        raise InvalidDocument(f"'data' must be a list of {kind}", pointer)
    if len(items) > MAX_TAGS:
        raise InvalidAttribute(f"at most {MAX_TAGS} tags", pointer)
    for position, item in enumerate(items):
        where = f"{pointer}/{position}"
        if not isinstance(item, dict) or item.get("type") != kind:
            raise InvalidDocument(f"each item must be an object of type '{kind}'", where)
        attributes = item.get("attributes")
        if not isinstance(attributes, dict):
            raise InvalidAttribute("a tag needs its attributes", where + "/attributes")
        try:
            if kind == TAGS:
                yield Tag(check_tag_text(attributes.get("name"), "tag name"))
            else:
                yield Tag(check_tag_text(attributes.get("key"), "tag key"),
                          check_tag_text(attributes.get("value", ""), "tag value",
                                         empty=True))
        except InvalidName as error:
            raise InvalidAttribute(str(error), where + "/attributes") from None


def _at_most(tags: Any) -> tuple[Tag, ...]:
    found = tuple(tags)
    if len(found) > MAX_TAGS:
        raise InvalidAttribute(f"at most {MAX_TAGS} tags", "/data")
    return found
