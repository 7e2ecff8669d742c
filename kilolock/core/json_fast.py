"""A faster JSON decode that answers only when it answers exactly as the
standard library's would.  Pure functions, no Twisted, no I/O.

Every JSON body Kilolock reads is decoded by C{json.JSONDecoder} in the end:
its answers (what it accepts, the values it builds, the error it raises)
define the text rules of L{kilolock.core.text} and the state parse of
L{kilolock.tfstate.parse}.  msgspec's decoder builds the same values about twice
as fast, so it is tried first, and its result is used only where it cannot
differ:

  - it is given bytes already checked to be UTF-8 (the callers decode them
    first), so its own UTF-8 handling decides nothing;
  - every number with a fraction or an exponent is built by C{float} from
    its text (the C{float_hook}), as C{json} builds it: the same double,
    C{inf} for C{1e400};
  - integers are exact at any size (beyond 64 bits too), and refused past
    C{sys.get_int_max_str_digits()} digits, as C{json} refuses them;
  - duplicate keys: the last value wins, at the first key's place, as in
    C{json};
  - anything it refuses -- invalid JSON, C{NaN} and C{Infinity}, escapes of
    unpaired surrogates (which C{json} accepts), nesting beyond its
    recursion limit -- is L{UNDECIDED}: the caller decodes with C{json}
    and answers what it answers, error and message included.

msgspec is never more lenient than C{json} (control characters in strings,
leading zeros, trailing commas, whitespace other than JSON's four, a byte
order mark: both refuse them); C{tests/tfstate/test_json_fast.py} pins the
agreement on generated and hostile documents.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

__all__ = ["REFUSALS", "UNDECIDED", "fast_decode"]


class _Undecided:
    """The type of L{UNDECIDED}."""

    def __repr__(self) -> str:
        return "UNDECIDED"


#: What L{fast_decode} returns when the standard decoder must decide.
UNDECIDED: Final = _Undecided()

_DECODER = msgspec.json.Decoder(float_hook=float)

#: What msgspec raises where only C{json} can say what the text is (a
#: C{UnicodeEncodeError} among them: a str holding a lone surrogate, which
#: only a caller's text can).
REFUSALS: Final = (msgspec.MsgspecError, RecursionError, ValueError)


def fast_decode(utf8: bytes) -> Any:
    """The document C{json.loads(utf8.decode())} returns, or L{UNDECIDED}
    when only C{json} can say what it returns or raises.

    @param utf8: bytes known to be valid UTF-8.
    """
    try:
        return _DECODER.decode(utf8)
    except REFUSALS:
        return UNDECIDED
