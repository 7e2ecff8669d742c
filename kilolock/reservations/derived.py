"""The derived parts of a state, merged: outputs, check results and the
Terraform version.  Pure: no Twisted, no I/O.

These are values Terraform computes from the resources, so a conflict on
them never refuses a merge (refusing would strand real changes already
made); it keeps the current version's value and says so.

Outputs, per name, three ways (the view's base, the view's state, the
current version): what only the view changed is taken, what only the
current version changed is kept, what both changed alike is kept.  When
both changed it differently, objects and maps (C{["object", {...}]},
C{["map", T]}) are merged by key the same way, recursively -- an output
aggregating the instances of a C{for_each} resource is re-evaluated by each
instance-targeted run with stale values for the others; anything else (a
string, a list, a tuple, a number) is atomic: the current version's value
is kept and the output is I{stale} until a run evaluates it again.

Check results, per C{(object_kind, config_addr)}: a view's C{null} (an
intermediate snapshot), and an entry with status C{unknown} and no objects
(what a targeted run writes for every checkable it did not evaluate), say
nothing; an entry the view changed since its base is taken; an entry the
base had and the view's (non-null) results lack is removed (its
configuration object was removed).  An entry equal to the base's is a
result the current version may have since bettered: it is kept.

The Terraform version is the higher of the two (Terraform reads a state
of any newer version).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from attrs import frozen

from kilolock.core.errors import InvalidState
from kilolock.reservations.canonical import canonical_digest, decode_canonical
from kilolock.reservations.render import (
    render_check_results,
    render_output,
    render_outputs,
)

__all__ = ["ChecksMerge", "OutputsMerge", "higher_version", "merge_check_results",
           "merge_outputs"]

_ABSENT: Any = object()
_RAW_MAP = msgspec.json.Decoder(dict[str, msgspec.Raw] | None)
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw] | None)


def _same(a: Any, b: Any) -> bool:
    """Whether two decoded values are the same JSON value (C{true} is not
    C{1}; absent is only absent)."""
    if a is _ABSENT or b is _ABSENT:
        return a is b
    return canonical_digest(a) == canonical_digest(b)


def _same_typed(a: Any, a_type: Any, b: Any, b_type: Any) -> bool:
    return _same(a, b) and _same(a_type, b_type)


@frozen
class OutputsMerge:
    """The merged C{outputs}: its text, whether it differs from the
    current version's, the outputs kept stale and those merged by key."""

    text: bytes
    changed: bool
    stale: tuple[str, ...]
    structural: tuple[str, ...]


def _entries(text: bytes) -> tuple[dict[str, bytes], dict[str, Any]]:
    found = _RAW_MAP.decode(text or b"{}") or {}  # null outputs: none
    raw = {name: bytes(entry) for name, entry in found.items()}
    return raw, {name: decode_canonical(entry) for name, entry in raw.items()}


def merge_outputs(base: bytes, theirs: bytes, main: bytes) -> OutputsMerge:
    """Merge the C{outputs} members' texts (see the module's docstring).
    Each is a JSON object of output objects (checked before)."""
    _, base_values = _entries(base)
    theirs_raw, theirs_values = _entries(theirs)
    main_raw, main_values = _entries(main)
    merged = dict(main_raw)
    stale: list[str] = []
    structural: list[str] = []
    changed = False
    for name in sorted({*base_values, *theirs_values, *main_values}):
        b = base_values.get(name, _ABSENT)
        t = theirs_values.get(name, _ABSENT)
        m = main_values.get(name, _ABSENT)
        if _same(t, b) or _same(t, m):
            continue
        if _same(m, b):
            changed = True
            if t is _ABSENT:
                del merged[name]
            else:
                merged[name] = theirs_raw[name]
            continue
        combined = _merge_output(b, t, m)
        if combined is None:
            stale.append(name)
            continue
        changed = True
        structural.append(name)
        merged[name] = combined
    text = render_outputs(merged) if changed else (main or b"{}")
    return OutputsMerge(text, changed, tuple(stale), tuple(structural))


def _merge_output(base: Any, theirs: Any, main: Any) -> bytes | None:
    """Two outputs changed differently, merged by key (None: they cannot
    be)."""
    if not (isinstance(theirs, dict) and isinstance(main, dict)):
        return None
    if bool(theirs.get("sensitive")) != bool(main.get("sensitive")):
        return None
    if not isinstance(base, dict):
        base = {}
    merged = _merge_typed(base.get("value", _ABSENT), base.get("type", _ABSENT),
                          theirs.get("value", _ABSENT), theirs.get("type", _ABSENT),
                          main.get("value", _ABSENT), main.get("type", _ABSENT))
    if merged is None:
        return None
    value, type_ = merged
    try:
        return render_output(value, type_, bool(main.get("sensitive")))
    except (UnicodeEncodeError, TypeError, ValueError):
        return None  # text msgspec cannot write (an unpaired surrogate): kept stale


def _kind(value: Any, type_: Any) -> str | None:
    """C{"object"} or C{"map"} for a value merged by key, else None."""
    if not isinstance(value, dict) or not isinstance(type_, list) or len(type_) != 2:
        return None
    if type_[0] == "object" and isinstance(type_[1], dict) and set(type_[1]) == set(value):
        return "object"
    if type_[0] == "map":
        return "map"
    return None


def _merge_typed(base: Any, base_type: Any, theirs: Any, theirs_type: Any, main: Any,
                 main_type: Any) -> tuple[Any, Any] | None:
    """Merge two typed values by key: an object's attributes with their
    types, a map's elements (of one element type)."""
    kind = _kind(theirs, theirs_type)
    if kind is None or kind != _kind(main, main_type):
        return None
    if kind == "map" and not _same(theirs_type, main_type):
        return None
    base_kind = _kind(base, base_type) if base is not _ABSENT else kind
    if base_kind != kind:
        base, base_type = {}, None
    elif base is _ABSENT:
        base = {}
    value: dict[str, Any] = {}
    attributes: dict[str, Any] = {}

    def element_type(type_: Any, key: str) -> Any:
        if not isinstance(type_, list):
            return _ABSENT
        return type_[1] if kind == "map" else type_[1].get(key, _ABSENT)

    for key in sorted({*base, *theirs, *main}):
        b, t, m = base.get(key, _ABSENT), theirs.get(key, _ABSENT), main.get(key, _ABSENT)
        bt = element_type(base_type, key) if b is not _ABSENT else _ABSENT
        tt = element_type(theirs_type, key) if t is not _ABSENT else _ABSENT
        mt = element_type(main_type, key) if m is not _ABSENT else _ABSENT
        if _same_typed(t, tt, b, bt) or _same_typed(t, tt, m, mt):
            chosen = (m, mt)
        elif _same_typed(m, mt, b, bt):
            chosen = (t, tt)
        else:
            inner = _merge_typed(b, bt, t, tt, m, mt)
            if inner is None:
                return None
            chosen = inner
        if chosen[0] is not _ABSENT:
            value[key] = chosen[0]
            attributes[key] = chosen[1]
    if kind == "map":
        return value, main_type
    return value, ["object", attributes]


# -- check results ---------------------------------------------------------------


@frozen
class ChecksMerge:
    """The merged C{check_results}: its text, and whether it differs from
    the current version's."""

    text: bytes
    changed: bool


def _checks(text: bytes, what: str) -> tuple[list[tuple[tuple[str, str], bytes, Any]], bool]:
    """The entries of a C{check_results} text, each with its key and text,
    and whether it was null."""
    raw = _RAW_LIST.decode(text or b"null")
    if raw is None:
        return [], True
    entries = []
    for position, entry_text in enumerate(raw):
        entry = decode_canonical(entry_text)
        if (not isinstance(entry, dict) or not isinstance(entry.get("object_kind"), str)
                or not isinstance(entry.get("config_addr"), str)):
            raise InvalidState(f"{what}[{position}] must be an object with a string"
                               " object_kind and config_addr")
        entries.append(((entry["object_kind"], entry["config_addr"]), bytes(entry_text), entry))
    return entries, False


def check_results_valid(text: bytes) -> None:
    """Return if C{text} is a C{check_results} member Kilolock can merge.

    @raise InvalidState: naming the entry that is not.
    """
    try:
        _checks(text, "check_results")
    except msgspec.DecodeError:  # not a list, or text JSON cannot hold (an unpaired surrogate)
        raise InvalidState("check_results must be null or a list of objects") from None


def _no_information(entry: Any) -> bool:
    return entry.get("status") == "unknown" and entry.get("objects") is None


def merge_check_results(base: bytes, theirs: bytes, main: bytes) -> ChecksMerge:
    """Merge the C{check_results} members' texts (see the module's
    docstring)."""
    theirs_entries, theirs_null = _checks(theirs, "check_results")
    if theirs_null:
        return ChecksMerge(main or b"null", False)
    base_entries = {key: entry for key, _, entry in _checks(base, "check_results")[0]}
    main_entries, _ = _checks(main, "check_results")
    merged: dict[tuple[str, str], tuple[bytes, Any]] = {
        key: (text, entry) for key, text, entry in main_entries}
    changed = False
    for key, text, entry in theirs_entries:
        if _no_information(entry):
            continue
        if key in base_entries and _same(entry, base_entries[key]):
            continue
        if key in merged and _same(entry, merged[key][1]):
            continue
        merged[key] = (text, entry)
        changed = True
    theirs_keys = {key for key, _, _ in theirs_entries}
    for key in base_entries:
        if key not in theirs_keys and key in merged:
            del merged[key]
            changed = True
    if not changed:
        return ChecksMerge(main or b"null", False)
    return ChecksMerge(render_check_results([text for text, _ in merged.values()]), True)


# -- the Terraform version -------------------------------------------------------

_VERSION = re.compile(r"v?(\d+(?:\.\d+)*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?")


def _version_key(text: str) -> tuple[tuple[int, ...], int, tuple[tuple[int, int, str], ...]]:
    """How go-version orders versions: numbers segment by segment (missing
    ones are 0), a release above its pre-releases, pre-releases by their
    dot-separated parts (numbers below words)."""
    match = _VERSION.fullmatch(text)
    if match is None:
        raise ValueError(text)
    numbers = tuple(int(part) for part in match.group(1).split("."))
    numbers = numbers + (0,) * (3 - len(numbers))
    pre = match.group(2)
    if pre is None:
        return numbers, 1, ()
    parts = tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                  for part in pre.split("."))
    return numbers, 0, parts


def higher_version(main: str | None, theirs: str | None) -> str | None:
    """The higher of two Terraform versions (the current version's when
    either is not a version)."""
    if theirs is None or main is None:
        return main or theirs
    try:
        return theirs if _version_key(theirs) > _version_key(main) else main
    except ValueError:
        return main
