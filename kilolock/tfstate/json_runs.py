"""Runs of a large JSON array's elements, decoded by msgspec in one call each
with the values C{json} gives element by element.  Pure functions, no
Twisted, no I/O.

L{kilolock.tfstate.parse} decodes a large state's C{resources} array piece by
piece, so that a parse in a thread gives the GIL back between pieces.  One
C{json} call per element, and one count of each element's brackets for the
depth rule, were most of that parse.  L{ElementRuns} decodes instead a run
of consecutive elements -- tens of kilobytes of text, so still a short hold
of the GIL -- and counts its brackets once:

  - where a run ends is a guess: the next place, some way on, where the
    text between two elements seen before recurs (a closing bracket, the
    comma, the whitespace, an opening bracket: Terraform writes
    C{"},\\n    {"} between resources).  The guess is used only when msgspec
    decodes C{"[" + run + "]"} as an array.  A JSON parser reads a text the
    same way whatever follows, so a parser at an element's start that reads
    the run and is then content with one C{]} was between two elements of
    the array, and the run is whole elements (it ends with a closing
    bracket, so no number was cut short);
  - the values are the ones C{json} builds, by the rules of
    L{kilolock.core.json_fast}: floats built by C{float} from their text,
    integers of any size, the last of duplicate keys.  Anything msgspec
    refuses -- a guess that is not whole elements, an element that is not
    JSON, C{NaN}, an escaped lone surrogate, nesting beyond its recursion
    limit, an integer too long -- is no run: the caller decodes the
    elements up to the guess's end with C{json}, which answers what it
    always answered (the element, or its error);
  - each element comes with whether it held a float (a number with a
    fraction or an exponent), as C{json}'s C{parse_float} tells it;
  - a run has at most L{Run.opens} opening brackets: a bound on each
    element's depth (L{kilolock.core.text.check_depth_bounded}).  Runs are
    sized to hold about half as many as the depth rule allows, so that
    their elements need no walk;
  - runs are of ASCII text only (Terraform writes other text unescaped):
    msgspec reads UTF-8, and would have to encode a str that is not ASCII
    first, which costs more than C{json}'s own decode.

Where guesses keep failing (elements whose insides repeat the text between
them, or text full of what msgspec refuses) the runs stop, and C{json}
decodes the rest.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from kilolock.core.json_fast import REFUSALS
from kilolock.core.text import MAX_JSON_DEPTH

__all__ = ["ElementRuns", "FloatWatch", "Run"]

#: How many opening brackets a run aims at: half of what the depth rule
#: allows, so that a run needs no walk even when its elements vary.
_OPENS_PER_RUN = MAX_JSON_DEPTH // 2
#: The shortest and the longest stretch of text a run aims at (characters),
#: before its end is looked for.
_SHORTEST = 4 * 1024
_LONGEST = 256 * 1024
#: How far past that stretch the run's end is looked for: with it, a bound
#: on how long one msgspec call holds the GIL (512 KB: about 2 ms).
_SEARCH = 256 * 1024
#: How many refused guesses runs stop after (more if more were decided).
_REFUSALS_TOLERATED = 2
#: The longest text between two elements a separator is learnt from.
_LONGEST_SEPARATOR = 64

_CLOSING = "]}"
_OPENING = "[{"
#: JSON's whitespace, for guessing where elements end (msgspec, which
#: decides, takes JSON's own).
_WHITESPACE = " \t\n\r"


class FloatWatch:
    """A decoder's float hook (C{json}'s C{parse_float}, msgspec's
    C{float_hook}) that notes whether it was called -- a number with a
    fraction or an exponent was decoded -- since L{take}."""

    def __init__(self) -> None:
        self.seen = False

    def parse(self, text: str) -> float:
        """C{float(text)}, noted."""
        self.seen = True
        return float(text)

    def take(self) -> bool:
        """Whether a float was decoded since the last call."""
        seen, self.seen = self.seen, False
        return seen


class Run:
    """Consecutive elements of an array, decoded.

    @ivar opens: how many opening brackets their text holds (at least as
        many as any of them nests deep).
    @ivar end: the position after the last element.
    """

    def __init__(self, elements: list[Any], floats: list[bool] | None, opens: int,
                 end: int) -> None:
        self._elements = elements
        self._floats = floats
        self.opens = opens
        self.end = end

    def __iter__(self) -> Iterator[tuple[Any, bool]]:
        """Each element, with whether it held a float."""
        if self._floats is None:
            return ((element, False) for element in self._elements)
        return zip(self._elements, self._floats, strict=True)


class ElementRuns:
    """The runs of the elements of the arrays in one text (one per thread:
    it keeps what it learnt of the text)."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._separator: str | None = None
        self._length = _SHORTEST
        #: No run is tried before this position.
        self._resume = 0
        self._decided = 0
        self._refused = 0
        #: Whether the last run held a float (the next is decoded element by
        #: element straight away).
        self._floats = False
        self._watch = FloatWatch()
        self._all = msgspec.json.Decoder(list, float_hook=self._watch.parse)
        self._each = msgspec.json.Decoder(float_hook=self._watch.parse)
        self._split = msgspec.json.Decoder(list[msgspec.Raw])

    def take(self, position: int) -> Run | None:
        """The run of whole elements that starts at C{position}, an
        element's first character; None where C{json} must decode that
        element (and the ones after it, up to where runs are tried again)."""
        if position < self._resume or not self._knows_separator(position):
            return None
        assert self._separator is not None
        found = self._text.find(self._separator, position + self._length,
                                position + self._length + _SEARCH)
        if found < 0:
            self._resume = position + self._length + _SEARCH
            return None
        run = self._decode(position, found + 1)
        if run is None:
            self._refuse(found + 1)
        else:
            self._decided += 1
            self._length = min(_LONGEST, max(
                _SHORTEST, (run.end - position) * _OPENS_PER_RUN // max(run.opens, 1)))
        return run

    def _knows_separator(self, position: int) -> bool:
        """Whether a separator is known, learning it at C{position} if not."""
        if self._separator is None:
            self._separator = self._separator_before(position)
        return self._separator is not None

    def _separator_before(self, position: int) -> str | None:
        """The text from the closing bracket of the element before
        C{position} to the opening bracket of the element at it, or None
        when there is no such pair (the array's first element, or elements
        that are not arrays or objects).  A guess: nothing is decided by it."""
        text = self._text
        opening = text[position:position + 1]
        if not opening or opening not in _OPENING:
            return None
        before = text[max(0, position - _LONGEST_SEPARATOR):position]
        comma = before.rstrip(_WHITESPACE)
        closing = comma[:-1].rstrip(_WHITESPACE)
        if not comma.endswith(",") or not closing or closing[-1] not in _CLOSING:
            return None
        return before[len(closing) - 1:] + opening

    def _decode(self, start: int, end: int) -> Run | None:
        """The elements of C{text[start:end]}, or None if it is not whole
        elements of ASCII text msgspec decodes."""
        chunk = f"[{self._text[start:end]}]"
        if not chunk.isascii():
            return None
        try:
            if self._floats:
                elements, floats = self._decode_each(chunk)
            else:
                elements, floats = self._decode_all(chunk)
        except REFUSALS:
            return None
        self._floats = floats is not None
        return Run(elements, floats, chunk.count("[") + chunk.count("{") - 1, end)

    def _decode_all(self, chunk: str) -> tuple[list[Any], list[bool] | None]:
        """The elements of C{chunk} in one call, and which held a float
        (decoded again element by element if any did)."""
        self._watch.take()
        elements = self._all.decode(chunk)
        if not self._watch.take():
            return elements, None
        return self._decode_each(chunk)

    def _decode_each(self, chunk: str) -> tuple[list[Any], list[bool] | None]:
        """The elements of C{chunk} split in one call and decoded one by
        one, each with whether it held a float (None: none did)."""
        elements = []
        floats = []
        self._watch.take()
        for raw in self._split.decode(chunk):
            elements.append(self._each.decode(raw))
            floats.append(self._watch.take())
        return elements, floats if any(floats) else None

    def _refuse(self, end: int) -> None:
        """A guess msgspec refused: C{json} decodes up to its end; runs stop
        when guesses fail more often than not."""
        self._refused += 1
        stop = self._refused > max(_REFUSALS_TOLERATED, self._decided)
        self._resume = len(self._text) if stop else end
