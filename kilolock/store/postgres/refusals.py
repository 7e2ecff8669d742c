"""Database errors that are about a value, not about the database.

A 503 means the database cannot be reached.  PostgreSQL also fails a
statement for what it was given: a value too large for an index entry
(SQLSTATE class 54, e.g. 54000 "index row size exceeds maximum"), a
character it cannot hold (22021, 22P05: NUL and unpaired surrogates in
jsonb), a number out of range (22003), a string too long for its column
(22001); and psycopg2 itself refuses to send a NUL or an unpaired
surrogate in a text parameter.  Such a failure answers the request 400
with the code of the text rule the value broke (L{kilolock.core.text}),
never 503, and never marks the database unreachable.  Each is a gap in
the validation at the edge, which should have refused the input first,
so each is logged.  Any other error of a statement (a division by zero, a
violated constraint) is Kilolock's own bug: an opaque 500.
"""

from __future__ import annotations

import psycopg2
import psycopg2.errors
from twisted.logger import Logger

from kilolock.core.errors import InvalidText
from kilolock.core.text import INVALID_UNICODE, NUL_CHARACTER, OUT_OF_RANGE, TOO_LONG

__all__ = ["INPUT_ERRORS", "input_refusal"]

log = Logger()

#: What L{input_refusal} may map (it answers None for the rest).
INPUT_ERRORS: tuple[type[BaseException], ...] = (
    psycopg2.errors.ProgramLimitExceeded,
    psycopg2.errors.StringDataRightTruncation,
    psycopg2.errors.CharacterNotInRepertoire,
    psycopg2.errors.UntranslatableCharacter,
    psycopg2.errors.NumericValueOutOfRange,
    UnicodeEncodeError,
    ValueError,
)

#: (error class, rule, message) in the order they are tried.
_RULES: tuple[tuple[type[BaseException], str, str], ...] = (
    (psycopg2.errors.ProgramLimitExceeded, TOO_LONG,
     "a value is too large for the database (longer than an index entry can be)"),
    (psycopg2.errors.StringDataRightTruncation, TOO_LONG,
     "a value is longer than the database column holds"),
    (psycopg2.errors.CharacterNotInRepertoire, INVALID_UNICODE,
     "a value holds a character the database cannot store"),
    (psycopg2.errors.UntranslatableCharacter, INVALID_UNICODE,
     "a value holds a character the database cannot store (NUL or an unpaired surrogate)"),
    (psycopg2.errors.NumericValueOutOfRange, OUT_OF_RANGE,
     "a number is out of the range the database holds"),
    (UnicodeEncodeError, INVALID_UNICODE,
     "a value is not valid Unicode (an unpaired surrogate such as \\ud800)"),
)


def input_refusal(error: BaseException) -> InvalidText | None:
    """The 400 a failed statement's C{error} stands for when the database (or
    psycopg2) refused a value of the request, logged as a validation gap;
    None when C{error} is about something else.  Never quotes the value."""
    rule: str | None = None
    message = ""
    for kind, code, wording in _RULES:
        if isinstance(error, kind):
            rule, message = code, wording
            break
    else:
        # psycopg2 refuses a text parameter holding NUL before sending it.
        if type(error) is ValueError and "NUL (0x00)" in str(error):
            rule, message = NUL_CHARACTER, "a value contains a NUL character"
    if rule is None:
        return None
    sqlstate = getattr(error, "pgcode", None) or "-"
    log.warn("the database refused a value of a request ({kind}, SQLSTATE {sqlstate}):"
             " answered 400 {rule}; the input rules should have refused it first",
             kind=type(error).__name__, sqlstate=sqlstate, rule=rule)
    return InvalidText(rule, message)
