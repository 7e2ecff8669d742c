"""The text rules, decided once in L{kilolock.core.text}, and every parser
that applies them: each rule has its code, each field its name, and what
the projection and the answers do with text a database cannot hold."""

from __future__ import annotations

import json
from typing import Any

import psycopg2.errors
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilolock.core.errors import BadRequest, InvalidLockInfo, InvalidText
from kilolock.core.model import LockInfo
from kilolock.core.text import (
    MAX_JSON_DEPTH,
    MAX_LOCK_ID_LENGTH,
    MAX_LOCK_INFO_BYTES,
    MAX_WHOLE_NUMBER,
    TOO_DEEP,
    NotJSON,
    check_depth,
    check_depth_bounded,
    check_text,
    clean_json_text,
    clean_text,
    load_json,
    nesting_depth,
    stored_document,
    stored_members,
    whole_number,
)
from kilolock.stateops.requests import parse_operation
from kilolock.store.postgres.refusals import input_refusal
from kilolock.web.body import unlock_lock_id
from kilolock.web.documents import json_bytes
from kilolock.web.native.history import rollback_version
from kilolock.web.retention import policy_body, purge_body

#: Any character, unpaired surrogates and NUL included.
ANY_CHARACTER = st.characters(codec=None, exclude_categories=())
ANY_TEXT = st.text(ANY_CHARACTER, max_size=30)
DOCUMENTS = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), ANY_TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(ANY_TEXT, inner, max_size=4)),
    max_leaves=20)


def nested(depth: int, inner: str = "1") -> bytes:
    return ("[" * depth + inner + "]" * depth).encode()


def refusal(raw: bytes) -> tuple[str, str | None]:
    """The (rule, field) load_json refuses C{raw} with."""
    with pytest.raises(InvalidText) as caught:
        load_json(raw, "the body")
    assert caught.value.status == 400
    return caught.value.code, caught.value.field


# -- each rule, with its code ------------------------------------------------------------


@pytest.mark.parametrize(("raw", "rule"), [
    (nested(100_000), "too_deep"),
    (nested(MAX_JSON_DEPTH + 1), "too_deep"),
    (b'{"a": ' * 600 + b"1" + b"}" * 600, "too_deep"),
    (b"[1e400]", "not_finite"),
    (b'{"n": -1e400}', "not_finite"),
    (b"[NaN]", "not_finite"),
    (b"Infinity", "not_finite"),
    (b'["a\\u0000b"]', "nul_character"),
    (b'{"\\u0000": 1}', "nul_character"),
    (b'["\\ud800"]', "invalid_unicode"),
    (b'["x\\udfff"]', "invalid_unicode"),
    (b'["\\ude00\\ud83d"]', "invalid_unicode"),
    (b'["\xff"]', "invalid_unicode"),
    (b'["\xed\xa0\x80"]', "invalid_unicode"),
], ids=["100000 deep", "513 deep", "600 deep objects", "1e400", "-1e400", "NaN", "Infinity",
        "NUL", "NUL key", "lone high", "lone low", "reversed pair", "not UTF-8",
        "encoded surrogate"])
def test_every_rule_has_its_code(raw: bytes, rule: str) -> None:
    """A JSON body breaking a rule is InvalidText (400) with the rule's code."""
    assert refusal(raw)[0] == rule


def test_what_the_rules_accept() -> None:
    """Nesting up to the limit, finite numbers, paired surrogates, any other
    Unicode; text that is no JSON at all is NotJSON (each parser words it)."""
    assert load_json(nested(MAX_JSON_DEPTH), "b") is not None
    assert load_json(b'["\\ud83d\\ude00", "\\u00e9", 1e308, -1e-400, 12345678901234567890]',
                     "b") == ["\U0001f600", "é", 1e308, -0.0, 12345678901234567890]
    with pytest.raises(NotJSON):
        load_json(b"{not json", "b")


def test_an_error_names_the_member_at_fault() -> None:
    """Inside a top-level object the field is the member; elsewhere the
    caller's field."""
    with pytest.raises(InvalidText) as caught:
        load_json(b'{"ok": "x", "Who": ["\\ud800"]}', "the lock body", "body")
    assert (caught.value.code, caught.value.details()) == ("invalid_unicode", {"field": "Who"})
    with pytest.raises(InvalidText) as caught:
        load_json(b'["\\u0000"]', "the body", "body")
    assert caught.value.details() == {"field": "body"}


def test_lengths_and_whole_numbers() -> None:
    """check_text bounds a length (too_long); whole numbers are ASCII digits
    up to what a database integer holds."""
    with pytest.raises(InvalidText) as caught:
        check_text("x" * 11, "the name", "name", max_length=10)
    assert (caught.value.code, caught.value.field) == ("too_long", "name")
    assert check_text("x" * 10, "the name", max_length=10) == "x" * 10
    assert [whole_number(text) for text in ("0", "42", str(MAX_WHOLE_NUMBER))] == [
        0, 42, MAX_WHOLE_NUMBER]
    for text in (str(MAX_WHOLE_NUMBER + 1), "-1", "1.0", "\u00b2", "\u0661", "", " 1", "9" * 400):
        assert whole_number(text) is None, text


# -- every parser that applies them --------------------------------------------------------

_LOCK_INFO = {"ID": "id-1", "Operation": "OperationTypeApply", "Info": "", "Who": "a@b",
              "Version": "1.15.5", "Created": "2026-11-29T23:05:20.206526015Z", "Path": ""}


@pytest.mark.parametrize("member", sorted(_LOCK_INFO))
@pytest.mark.parametrize(("value", "rule"), [
    ("\\u0000", "nul_character"), ("\\ud800", "invalid_unicode")])
def test_lock_info_members_follow_the_rules(member: str, value: str, rule: str) -> None:
    """A NUL or an unpaired surrogate in any LockInfo member is refused,
    naming the member."""
    text = json.dumps(_LOCK_INFO).replace(f'"{member}": "{_LOCK_INFO[member]}"',
                                          f'"{member}": "x{value}"')
    with pytest.raises(InvalidText) as caught:
        LockInfo.from_bytes(text.encode())
    assert (caught.value.code, caught.value.field) == (rule, member)


def test_lock_info_sizes_and_shapes() -> None:
    """The lock ID and the whole body are bounded; deep or non-finite bodies
    are refused by their rule; anything else malformed is invalid_lock_info."""
    long_id = json.dumps({**_LOCK_INFO, "ID": "i" * (MAX_LOCK_ID_LENGTH + 1)}).encode()
    with pytest.raises(InvalidText) as caught:
        LockInfo.from_bytes(long_id)
    assert (caught.value.code, caught.value.field) == ("too_long", "ID")
    big = json.dumps({**_LOCK_INFO, "Info": "x" * MAX_LOCK_INFO_BYTES}).encode()
    with pytest.raises(InvalidText, match="larger than"):
        LockInfo.from_bytes(big)
    for raw, rule in ((nested(100_000), "too_long"), (nested(20_000), "too_deep"),
                      (b'{"ID": "a", "x": 1e400}', "not_finite")):
        with pytest.raises(InvalidText) as caught:
            LockInfo.from_bytes(raw)
        assert caught.value.code == rule
    for raw in (b"", b"[]", b'{"ID": 5}', b"{x"):
        with pytest.raises(InvalidLockInfo):
            LockInfo.from_bytes(raw)
    assert LockInfo.from_bytes(json.dumps(_LOCK_INFO).encode()).who == "a@b"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_a_stored_lock_info_is_always_readable(raw: bytes) -> None:
    """LockInfo.stored (what a store reads back) never raises, whatever the
    bytes; what the request edge accepts it reads the same."""
    stored = LockInfo.stored(raw)
    assert stored.raw == raw
    try:
        accepted = LockInfo.from_bytes(raw)
    except BadRequest:
        return
    assert accepted == stored


@pytest.mark.parametrize(("body", "plain", "rule"), [
    (nested(100_000), False, "too_long"),
    (nested(20_000), False, "too_deep"),
    (b'"a\\u0000"', False, "nul_character"),
    (b'{"ID": "\\ud800"}', False, "invalid_unicode"),
    (json.dumps("i" * (MAX_LOCK_ID_LENGTH + 1)).encode(), False, "too_long"),
    (b"lock\x00id", True, "nul_character"),
    (b"lock\xffid", True, "invalid_unicode"),
    (b"i" * (MAX_LOCK_ID_LENGTH + 1), True, "too_long"),
    (b'{"ID": "x", "n": 1e400}', False, "not_finite"),
])
def test_unlock_bodies_follow_the_rules(body: bytes, plain: bool, rule: str) -> None:
    """Unlock bodies -- LockInfo, a JSON string, the plain lock ID of
    /v1/state-unlock -- are refused by the rule they break."""
    with pytest.raises(InvalidText) as caught:
        unlock_lock_id(body, None, plain)
    assert caught.value.code == rule


def test_unlock_bodies_that_follow_the_rules() -> None:
    """What Terraform and the aliases send still names its lock."""
    assert unlock_lock_id(json.dumps(_LOCK_INFO).encode(), None, False) == "id-1"
    assert unlock_lock_id(b'"id-2"', None, False) == "id-2"
    assert unlock_lock_id(b"id-3", None, True) == "id-3"
    assert unlock_lock_id(b"", "id-4", False) == "id-4"
    assert unlock_lock_id(b'{"ID": ""}', None, False) is None


# -- what the projection and the answers do with any text -----------------------------------


@given(st.lists(ANY_TEXT, max_size=5))
def test_clean_json_text_makes_any_json_storable(texts: list[str]) -> None:
    """After clean_json_text, JSON holds no NUL and no unpaired surrogate,
    escaped or raw; text without them is unchanged."""
    for text in (json.dumps(texts), json.dumps(texts, ensure_ascii=False)):
        cleaned = clean_json_text(text)
        for string in json.loads(cleaned):
            assert clean_text(string) == string
            string.encode("utf-8")
        if all(clean_text(t) == t for t in texts):
            assert cleaned == text


def test_clean_json_text_reads_escapes_as_units() -> None:
    """An escaped backslash before "u0000" is no NUL; a pair is kept."""
    assert clean_json_text(r'["\\u0000", "\u0000", "\ud83d\ude00", "\ud83d\u0041"]') == (
        r'["\\u0000", "\ufffd", "\ud83d\ude00", "\ufffd\u0041"]')


@settings(max_examples=200, deadline=None)
@given(DOCUMENTS)
def test_json_bytes_answers_any_document(document: Any) -> None:
    """Whatever a store hands back -- unpaired surrogates, NaN and infinity,
    any nesting -- an answer is valid UTF-8 JSON."""
    json.loads(json_bytes(document).decode("utf-8"))


def test_json_bytes_answers_deep_documents() -> None:
    """A document too deep for the indenting encoder is written compact."""
    deep: Any = float("inf")
    for _ in range(900):
        deep = [deep, "\ud800"]
    text = json_bytes(deep)
    assert text.startswith(b"[" * 900 + b'"Infinity"') and b"\n " not in text
    assert nesting_depth(json.loads(text), 1000) == 900


def _deep(depth: int, members: int) -> Any:
    """A value nesting C{depth} levels (objects and arrays in turn), with
    C{members} scalar siblings and brackets in strings at each."""
    value: Any = 1
    for level in range(depth):
        value = {"k": value, **{str(i): "[{" for i in range(members)}} if level % 2 else (
            [value] + [i for i in range(members)])
    return value


@settings(max_examples=200, deadline=None)
@given(st.integers(MAX_JSON_DEPTH - 8, MAX_JSON_DEPTH + 8), st.integers(0, 3),
       st.integers(0, 3), st.integers(0, 600))
def test_the_depth_rule_is_decided_alike_from_any_bound(depth: int, above: int, members: int,
                                                        extra: int) -> None:
    """Whether a value is too deep does not depend on the bound on its
    brackets it is checked with (its own text's count, or any larger one,
    e.g. a run of elements'): exactly when it nests deeper than the levels
    left."""
    value = _deep(depth, members)
    text = json.dumps(value)
    assert nesting_depth(value, 1000) == depth
    outcomes = []
    for check in (lambda: check_depth(text, 0, len(text), value, above, "v"),
                  lambda: check_depth_bounded(depth + extra, value, above, "v"),
                  lambda: check_depth_bounded(text.count("[") + text.count("{") + extra, value,
                                              above, "v")):
        try:
            check()
        except InvalidText as error:
            outcomes.append(error.code)
        else:
            outcomes.append(None)
    assert outcomes == [TOO_DEEP if depth > MAX_JSON_DEPTH - above else None] * 3


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=100) | st.sampled_from([nested(100_000), nested(600), b"[1e400]"]))
def test_stored_document_never_raises(raw: bytes) -> None:
    """stored_document shows what a store kept, or None: never an error;
    numbers beyond a double become their text."""
    document = stored_document(raw)
    json_bytes(document)
    assert stored_document(b'{"n": [1e400, 2]}') == {"n": ["1e400", 2]}
    assert stored_document(nested(MAX_JSON_DEPTH + 1)) is None


def _at_stack_depth(frames: int, call: Any) -> Any:
    """C{call()} from C{frames} frames deeper than here."""
    return call() if frames == 0 else _at_stack_depth(frames - 1, call)


#: A lock stored by an older Kilolock: its Info nests 900 levels, which
#: json.loads decodes from a shallow stack and not from a deep one.
DEEP_LOCK = (b'{"ID": "old-lock", "Who": "eve", "Info": ' + nested(900)
             + b', "Operation": "OperationTypeApply", "Deeper": {"a": ' + nested(5000, '"]}"')
             + b'}, "Version": "1.15.5"}')


@pytest.mark.parametrize("frames", [0, 50, 150, 400, 800])
def test_a_stored_lock_reads_alike_at_any_stack_depth(frames: int) -> None:
    """The fields of a stored LockInfo do not depend on how deep the stack
    is that reads it (they did: a deeply nested Info decoded or raised
    RecursionError depending on the caller, and a force-unlock lost the
    holder it had to compare with)."""
    lock = _at_stack_depth(frames, lambda: LockInfo.stored(DEEP_LOCK))
    assert (lock.id, lock.who, lock.operation, lock.version) == (
        "old-lock", "eve", "OperationTypeApply", "1.15.5")


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(ANY_TEXT, DOCUMENTS, max_size=5))
def test_stored_members_without_recursion_read_what_json_reads(document: dict[str, Any]
                                                               ) -> None:
    """Read member by member (the path a RecursionError takes), an object
    gives json.loads' scalar members and None for its nested ones."""
    from kilolock.core.text import _members_without_recursion

    text = json.dumps(document)
    assert stored_members(text.encode("utf-8", "surrogatepass")) == json.loads(text)
    expected = {key: None if isinstance(value, list | dict) else value
                for key, value in json.loads(text).items()}
    assert _members_without_recursion(text) == expected


@pytest.mark.parametrize("raw", [b"", b"[1]", b"nope", b'{"a": [1, 2}', b"\xff", b'"text"',
                                 b'{"ID": ' + nested(5000)])
def test_stored_members_of_what_is_not_an_object_are_empty(raw: bytes) -> None:
    assert _at_stack_depth(900, lambda: stored_members(raw)) == {}


# -- the database's own refusals ----------------------------------------------------------


@pytest.mark.parametrize(("error", "rule"), [
    (psycopg2.errors.ProgramLimitExceeded(), "too_long"),
    (psycopg2.errors.StringDataRightTruncation(), "too_long"),
    (psycopg2.errors.CharacterNotInRepertoire(), "invalid_unicode"),
    (psycopg2.errors.UntranslatableCharacter(), "invalid_unicode"),
    (psycopg2.errors.NumericValueOutOfRange(), "out_of_range"),
    (ValueError("A string literal cannot contain NUL (0x00) characters."), "nul_character"),
    ("\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")
     and UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"),
     "invalid_unicode"),
], ids=["54000", "22001", "22021", "22P05", "22003", "NUL parameter", "surrogate parameter"])
def test_a_value_the_database_refuses_is_a_400(error: BaseException, rule: str) -> None:
    """The data errors that reflect a value are 400s with the rule's code
    (never the 503 of an unreachable database)."""
    refused = input_refusal(error)
    assert refused is not None and (refused.status, refused.code) == (400, rule)


@pytest.mark.parametrize("error", [
    psycopg2.errors.DivisionByZero(), psycopg2.errors.UniqueViolation(),
    psycopg2.OperationalError("server closed the connection unexpectedly"),
    ValueError("expected bytea in hex format")])
def test_other_database_errors_are_not_refusals(error: BaseException) -> None:
    """Anything else keeps its meaning: an outage (503), or Kilolock's own bug (500)."""
    assert input_refusal(error) is None


#: Every JSON body of the native lane, by its parser: a valid body, and the
#: member the poison goes into.
_NATIVE_BODIES = [
    pytest.param(parse_operation, {"kind": "rm", "state": "mono", "addresses": ["a.b"]},
                 "addresses", id="operation"),
    pytest.param(parse_operation, {"kind": "import", "state": "mono", "stateFile": "{}"},
                 "stateFile", id="import"),
    pytest.param(rollback_version, {"version": 1}, "version", id="rollback"),
    pytest.param(policy_body, {"versions": 3, "days": None}, "days", id="retention"),
    pytest.param(purge_body, {"reason": "a leaked password"}, "reason", id="purge"),
]
#: A member's value breaking each rule (JSON text).
_POISONS = [
    pytest.param('["a\\u0000b"]', "nul_character", id="NUL"),
    pytest.param('"\\ud800"', "invalid_unicode", id="lone surrogate"),
    pytest.param("[1e400]", "not_finite", id="1e400"),
    pytest.param("[" * 600 + "]" * 600, "too_deep", id="600 deep"),
]


@pytest.mark.parametrize(("parse", "document", "member"), _NATIVE_BODIES)
@pytest.mark.parametrize(("poison", "rule"), _POISONS)
def test_every_native_body_follows_the_rules(parse: Any, document: dict[str, Any],
                                             member: str, poison: str, rule: str) -> None:
    """The text rules hold for every JSON body of the native lane, by one
    mechanism (load_json): a member breaking one is refused with the rule's
    code naming the member, before any member is read."""
    body = json.dumps(document).encode()
    parse(body)  # the body as it is passes
    poisoned = body.replace(json.dumps({member: document[member]})[1:-1].encode(),
                            f'"{member}": {poison}'.encode())
    assert poisoned != body
    with pytest.raises(InvalidText) as caught:
        parse(poisoned)
    assert (caught.value.status, caught.value.code, caught.value.field) == (400, rule, member)
