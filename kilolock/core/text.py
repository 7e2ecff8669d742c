"""What text Kilolock accepts, decided once, at the edge.  Pure functions, no
Twisted, no I/O.

Every request body that is JSON (a LockInfo, an unlock body, a state, a
control-API or native-API body) and every query parameter goes through
here before anything is stored or looked up:

  - nesting: a JSON document nests at most L{MAX_JSON_DEPTH} levels
    (C{too_deep});
  - numbers: every number is finite; C{NaN}, C{Infinity} and numbers beyond
    a double's range such as C{1e400} are refused (C{not_finite}) -- in a
    state they are accepted (its bytes are stored as they are) and projected
    as text, see L{kilolock.tfstate.values.compact_json};
  - text: valid UTF-8, and inside it no unpaired surrogate escape such as
    C{"\\ud800"} (C{invalid_unicode}) and no NUL, C{"\\u0000"} or C{%00}
    (C{nul_character}) -- in every string of a body that is not a state,
    object keys included, and in every query parameter.  PostgreSQL's
    C{text} and C{jsonb} can hold neither;
  - whole numbers in a path or a parameter are ASCII digits up to
    L{MAX_WHOLE_NUMBER} (what a database integer holds; C{out_of_range}
    when only the database notices);
  - length: identifiers have a maximum length (C{too_long}): a lock ID
    L{MAX_LOCK_ID_LENGTH} characters, a LockInfo body L{MAX_LOCK_INFO_BYTES}.
    Path segments (255 bytes) and hosted names have their own rules
    (L{kilolock.rules.paths}, L{kilolock.rules.hosted}).

A state is different: Terraform must never be refused for a state it
produced.  Its bytes are stored exactly as they arrived, NUL and unpaired
surrogates included; only its nesting depth is bounded (the same
L{MAX_JSON_DEPTH}).  The text the projection takes out of a state into
database rows is made safe instead (L{clean_text}, L{clean_json_text}).

Errors are L{InvalidText}: a 400 whose code names the rule, with the field
when one is at fault.  Messages never quote the text.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from kilolock.core.errors import InvalidText
from kilolock.core.json_fast import UNDECIDED, fast_decode

__all__ = [
    "INVALID_UNICODE",
    "JSON_WHITESPACE",
    "MAX_JSON_DEPTH",
    "MAX_LOCK_ID_LENGTH",
    "MAX_LOCK_INFO_BYTES",
    "MAX_WHOLE_NUMBER",
    "NOT_FINITE",
    "NUL_CHARACTER",
    "OUT_OF_RANGE",
    "TOO_DEEP",
    "TOO_LONG",
    "NotJSON",
    "check_depth",
    "check_depth_bounded",
    "check_document",
    "check_text",
    "clean_document",
    "clean_json_text",
    "clean_text",
    "decode_utf8",
    "load_json",
    "nesting_depth",
    "skip_json_whitespace",
    "stored_document",
    "stored_members",
    "text_problem",
    "whole_number",
]

#: How deep any JSON document Kilolock reads may nest (an object or array
#: inside another counts one level; a document that is a scalar has depth 0).
#: Far beyond any state Terraform writes (its attribute values rarely nest
#: 20 levels), and shallow enough that every reader of a stored document
#: -- the projection, the diff, the answers' JSON encoder -- handles it.
MAX_JSON_DEPTH = 512
#: The longest lock ID (characters).  Terraform's are 36 (a UUID).
MAX_LOCK_ID_LENGTH = 1024
#: The largest LockInfo body.  Terraform's is about 300 bytes.
MAX_LOCK_INFO_BYTES = 64 * 1024

#: The largest whole number a path segment or a parameter may name (a
#: version, an event's sequence number, a page size): a database integer.
MAX_WHOLE_NUMBER = 2**31 - 1

#: The rules, as the error codes that name them.
TOO_DEEP = "too_deep"
NOT_FINITE = "not_finite"
NUL_CHARACTER = "nul_character"
INVALID_UNICODE = "invalid_unicode"
TOO_LONG = "too_long"
OUT_OF_RANGE = "out_of_range"

_SURROGATE = re.compile("[\ud800-\udfff]")
_UNSAFE = re.compile("[\x00\ud800-\udfff]")


class NotJSON(ValueError):
    """The bytes are not JSON at all (each parser words that in its own error)."""


# -- text ----------------------------------------------------------------------


def text_problem(text: str) -> str | None:
    """The rule C{text} breaks (L{NUL_CHARACTER} or L{INVALID_UNICODE}), or
    None when a database can hold it as it is."""
    if "\x00" in text:
        return NUL_CHARACTER
    if not text.isascii() and _SURROGATE.search(text) is not None:
        return INVALID_UNICODE
    return None


_WORDING = {
    NUL_CHARACTER: "contains a NUL character (\\u0000 or %00)",
    INVALID_UNICODE: "is not valid Unicode (an unpaired surrogate such as \\ud800)",
}


def check_text(text: str, what: str, field: str | None = None,
               max_length: int | None = None) -> str:
    """C{text}, when it breaks no text rule.

    @param what: how the message names it (C{"the lock ID"}).
    @param field: the field the error names, if any.
    @raise InvalidText: naming the rule.
    """
    problem = text_problem(text)
    if problem is not None:
        raise InvalidText(problem, f"{what} {_WORDING[problem]}", field)
    if max_length is not None and len(text) > max_length:
        raise InvalidText(TOO_LONG, f"{what} is longer than {max_length} characters", field)
    return text


def decode_utf8(raw: bytes, what: str, field: str | None = None) -> str:
    """C{raw} as text.  @raise InvalidText: (C{invalid_unicode}) it is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidText(INVALID_UNICODE, f"{what} is not valid UTF-8", field) from None


def clean_text(text: str) -> str:
    """C{text} with what a database text column refuses (NUL, unpaired
    surrogates) replaced by U+FFFD: for text Kilolock takes out of a state,
    which it stores but never refuses."""
    if "\x00" not in text and (text.isascii() or not _SURROGATE.search(text)):
        return text
    return _UNSAFE.sub("\ufffd", text)


def clean_document(document: Any) -> Any:
    """A copy of a decoded document with L{clean_text} applied to every
    string, keys included (for showing a stored document where text must be
    valid Unicode, e.g. in an HTML page).  Iterative: any nesting is fine."""
    if isinstance(document, str):
        return clean_text(document)
    if not isinstance(document, dict | list):
        return document
    root: list[Any] = [None]
    pending: list[tuple[Any, Any, Any]] = [(document, root, 0)]
    while pending:
        node, parent, slot = pending.pop()
        if isinstance(node, str):
            parent[slot] = clean_text(node)
        elif isinstance(node, dict):
            copy: dict[str, Any] = {}
            parent[slot] = copy
            for key, value in node.items():
                cleaned = clean_text(key) if isinstance(key, str) else key
                copy[cleaned] = None
                pending.append((value, copy, cleaned))
        elif isinstance(node, list):
            items: list[Any] = [None] * len(node)
            parent[slot] = items
            pending.extend((value, items, index) for index, value in enumerate(node))
        else:
            parent[slot] = node
    return root[0]


# A JSON escape, taken as a unit from left to right: an escaped backslash
# (skipped), a surrogate pair (kept), a NUL or a lone surrogate (replaced).
_JSON_ESCAPE = re.compile(
    r"\\(?:\\|u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
    r"|u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2}))")
#: An escape that may need cleaning (a literal prefix: a fast search).
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


def _clean_escape(match: re.Match[str]) -> str:
    escape = match.group()
    return escape if escape == "\\\\" or len(escape) == 12 else "\\ufffd"


def clean_json_text(text: str) -> str:
    """JSON text with its NUL characters and unpaired surrogates -- escaped
    (C{\\u0000}, C{\\ud800}) or raw -- replaced by U+FFFD, as PostgreSQL's
    jsonb requires.  No parse and no recursion: any nesting is fine.
    Unchanged (and fast) in the usual case."""
    if _SUSPECT_ESCAPE.search(text) is None and (text.isascii() or not _UNSAFE.search(text)):
        return text
    return _UNSAFE.sub("\ufffd", _JSON_ESCAPE.sub(_clean_escape, text))


def whole_number(text: str) -> int | None:
    """C{text} as a whole number -- ASCII digits only, at most
    L{MAX_WHOLE_NUMBER} -- or None when it is not one."""
    if not text.isascii() or not text.isdigit() or len(text) > 10:
        return None
    number = int(text)
    return number if number <= MAX_WHOLE_NUMBER else None


# -- JSON documents --------------------------------------------------------------


class _Constant(Exception):
    """C{NaN}, C{Infinity} or C{-Infinity} in a document (not JSON numbers)."""


def _reject_constant(name: str) -> Any:
    raise _Constant(name)


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def load_json(raw: bytes, what: str, field: str | None = None) -> Any:
    """Decode a JSON body that is not a state (a LockInfo, an unlock body, a
    control-API or native-API body) under every rule of this module.

    @param what: how messages name the body (C{"the lock body"}).
    @return: the decoded document.
    @raise NotJSON: the bytes are UTF-8 but not JSON.
    @raise InvalidText: a rule is broken (not UTF-8 included).
    """
    text = decode_utf8(raw, what, field)
    document = fast_decode(raw)
    try:
        if document is UNDECIDED:
            document = _DECODER.decode(text)
    except _Constant as constant:
        raise InvalidText(NOT_FINITE, f"{what} holds {constant}, which is not a JSON number",
                          field) from None
    except RecursionError:
        raise _too_deep(what, field) from None
    except ValueError:
        raise NotJSON(what) from None
    check_document(document, what, field)
    return document


def _too_deep(what: str, field: str | None = None) -> InvalidText:
    return InvalidText(TOO_DEEP, f"{what} nests deeper than {MAX_JSON_DEPTH} levels", field)


def check_document(document: Any, what: str, field: str | None = None) -> None:
    """Check a decoded document: its depth, its numbers, every string (keys
    included).  Iterative: no document is too deep to be checked.  An error
    inside a member of a top-level object names that member as its field
    (else C{field}), and the value at fault by its JSON pointer
    (C{/data/attributes/name}).

    @raise InvalidText: naming the first rule broken.
    """
    stack: list[tuple[Any, int, str | None, tuple[str, ...]]] = [(document, 0, field, ())]
    while stack:
        node, depth, at, path = stack.pop()
        try:
            if isinstance(node, str):
                check_text(node, f"a string in {what}", at)
            elif isinstance(node, float):
                if not math.isfinite(node):
                    raise InvalidText(NOT_FINITE, f"{what} holds a number beyond the range of"
                                                  " a double (such as 1e400)", at)
            elif isinstance(node, dict | list):
                if depth >= MAX_JSON_DEPTH:
                    raise _too_deep(what, at)
                if isinstance(node, dict):
                    for key, value in node.items():
                        check_text(key, f"a key in {what}", at)
                        member = key if depth == 0 else at
                        stack.append((value, depth + 1, member, (*path, key)))
                else:
                    stack.extend((item, depth + 1, at, (*path, str(index)))
                                 for index, item in enumerate(node))
        except InvalidText as error:
            error.pointer = "".join("/" + step.replace("~", "~0").replace("/", "~1")
                                    for step in path)
            raise


def _float_or_text(text: str) -> float | str:
    number = float(text)
    return number if math.isfinite(number) else text


#: Decodes stored documents for showing: numbers beyond a double's range, and
#: NaN or Infinity, become their text.
_SHOWING = json.JSONDecoder(parse_float=_float_or_text, parse_constant=str)


def stored_document(raw: bytes | str) -> Any:
    """A JSON document a store kept (a LockInfo, an event's detail, a
    projected attribute object), decoded for showing in an answer: numbers
    beyond a double's range as their text; None when it is not JSON or nests
    deeper than L{MAX_JSON_DEPTH} (stores may hold such documents from before
    these rules).  Its strings may hold anything: answers escape what UTF-8
    cannot carry."""
    try:
        text = raw if isinstance(raw, str) else raw.decode("utf-8")
        document = _SHOWING.decode(text)
    except (ValueError, RecursionError):
        return None
    if (text.count("[") + text.count("{") > MAX_JSON_DEPTH
            and nesting_depth(document) > MAX_JSON_DEPTH):
        return None
    return document


#: JSON's whitespace (its four characters, nothing else).
JSON_WHITESPACE = re.compile(r"[ \t\n\r]*")


def skip_json_whitespace(text: str, position: int) -> int:
    """The position of the first character at or after C{position} that is
    not JSON whitespace."""
    match = JSON_WHITESPACE.match(text, position)
    assert match is not None
    return match.end()


def stored_members(raw: bytes) -> dict[str, Any]:
    """The members of a JSON object a store kept, for reading its top-level
    fields whatever the caller's stack: C{{}} when it is not a JSON object.

    C{json.loads} decodes nesting by recursion, so whether a deeply nested
    document decodes depends on how deep the calling stack already is (a
    Deferred's callbacks run some frames deeper than a direct call).  When it
    does not, the object is read member by member instead: nested values
    are skipped (read as None) by a bracket scan that does not recurse,
    scalar values decoded on their own.  Either way a scalar member reads
    the same.  (The skipped values are not checked to be JSON: a store only
    keeps documents that were.)
    """
    try:
        text = raw.decode("utf-8")
        document = json.loads(text)
    except RecursionError:
        return _members_without_recursion(text)
    except ValueError:
        return {}
    return document if isinstance(document, dict) else {}


#: A JSON string, or a bracket outside strings.
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def _members_without_recursion(text: str) -> dict[str, Any]:
    members: dict[str, Any] = {}
    decode = json.JSONDecoder().raw_decode

    def skip(position: int) -> int:
        return skip_json_whitespace(text, position)

    try:
        position = skip(0)
        if text[position:position + 1] != "{":
            return {}
        position = skip(position + 1)
        while text[position:position + 1] == '"':
            key, position = decode(text, position)
            position = skip(position)
            if text[position:position + 1] != ":":
                return {}
            position = skip(position + 1)
            if text[position:position + 1] in ("[", "{"):
                members[key], position = None, _container_end(text, position)
            else:
                members[key], position = decode(text, position)
            position = skip(position)
            if text[position:position + 1] != ",":
                break
            position = skip(position + 1)
    except ValueError:
        return {}
    if text[position:position + 1] != "}" or skip(position + 1) != len(text):
        return {}
    return members


def _container_end(text: str, position: int) -> int:
    """The position after the array or object that starts at C{position}.
    @raise ValueError: it does not end."""
    depth = 0
    for token in _STRING_OR_BRACKET.finditer(text, position):
        bracket = token.group()
        if bracket in ("[", "{"):
            depth += 1
        elif bracket in ("]", "}"):
            depth -= 1
            if depth == 0:
                return token.end()
    raise ValueError("unterminated")


def nesting_depth(document: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """How deep C{document} nests (0 for a scalar), counted up to C{limit} + 1
    (deeper documents are not walked further).  Iterative."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        depth += 1
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                return deepest
        stack.extend((child, depth) for child in children if isinstance(child, dict | list))
    return deepest


def check_depth(text: str, start: int, end: int, value: Any, above: int,
                what: str) -> None:
    """Check the depth of C{value}, decoded from C{text[start:end]}, that
    sits C{above} levels deep in its document.

    Cheap for large states: a value with no more opening brackets in its
    text than the levels left cannot be too deep, and is not walked.

    @raise InvalidText: (C{too_deep}) it nests too deep.
    """
    check_depth_bounded(text.count("[", start, end) + text.count("{", start, end),
                        value, above, what)


def check_depth_bounded(opens: int, value: Any, above: int, what: str) -> None:
    """Check the depth of C{value}, whose text holds at most C{opens}
    opening brackets (C{[} and C{{}, in strings too), and that sits C{above}
    levels deep in its document: a value cannot nest deeper than its opening
    brackets, so it is walked only when they are more than the levels left.

    @raise InvalidText: (C{too_deep}) it nests too deep.
    """
    room = MAX_JSON_DEPTH - above
    if opens <= room:
        return
    if nesting_depth(value, room) > room:
        raise _too_deep(what)
