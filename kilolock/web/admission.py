"""Admission of large request bodies: two byte budgets that bound the memory
concurrent large uploads take.

A request body of at least C{large_body_bytes} is I{large}.  Its bytes
spool to a temporary file while they arrive (twisted.web's own doing), so
receiving it costs disk, not memory; processing it does not: the body is
read into memory, parsed, projected and stored, at a peak of about three
times its size.  So:

  - the B{body budget} bounds the bytes of large bodies admitted at once
    (arriving, waiting or being processed).  A large request past it is
    refused before any of its body is read: 503 with C{Retry-After} (see
    L{UploadBudget.refuse}), which Terraform honours and retries.  Decided
    from C{Content-Length}, or for a chunked body when its running count
    reaches C{large_body_bytes} (and again as it grows);
  - the B{parse budget} bounds the bytes of large bodies being processed
    at once.  An admitted request whose body is complete waits its turn,
    first come first served, until it fits.

A budget of 0 is no budget.  Whatever the budgets, one large request is
admitted and processed when no other is: a body larger than a budget (but
within C{KL_MAX_BODY_BYTES}) can still be uploaded.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from collections import deque
from collections.abc import Callable
from typing import Any

from attrs import define, field
from twisted.internet.defer import Deferred, succeed

#: The processing speed assumed before a large upload has been measured
#: (about half of what two cores do when idle: a wait too long costs less
#: than one too short, which Terraform's three attempts may not survive).
INITIAL_BYTES_PER_SECOND = 16e6
#: The longest C{Retry-After} answered, in seconds.
MAX_RETRY_AFTER = 60


@define(eq=False)
class Admission:
    """One admitted large request's place in the budgets."""

    size: int
    processing_since: float | None = None


@define
class UploadBudget:
    """The body and parse budgets of one listener (see the module).

    C{on_idle} is called whenever the last large request being processed is
    released (the listener gives memory back to the system then)."""

    #: Bodies at least this large are large.
    large_body_bytes: int
    body_budget: int
    parse_budget: int
    clock: Any
    on_idle: Callable[[], None] | None = None
    #: Called with (bytes admitted, bytes processing, requests waiting)
    #: whenever one of them changes.
    on_change: Callable[[int, int, int], None] | None = None
    admitted: list[Admission] = field(factory=list)
    waiting: deque[tuple[Admission, Deferred[None]]] = field(factory=deque)
    #: Refused bodies' sizes, and when they are due back (L{refuse}).
    promised: list[tuple[int, float]] = field(factory=list)
    #: The processing speed: the last upload's, averaged with the estimate
    #: before it (L{INITIAL_BYTES_PER_SECOND} until one is measured).
    seconds_per_byte: float = 1 / INITIAL_BYTES_PER_SECOND
    measured: bool = False

    @property
    def admitted_bytes(self) -> int:
        return sum(admission.size for admission in self.admitted)

    @property
    def processing_bytes(self) -> int:
        return sum(admission.size for admission in self.admitted
                   if admission.processing_since is not None)

    def _fits(self, budget: int, in_use: int, in_use_count: int, size: int) -> bool:
        return budget == 0 or in_use_count == 0 or in_use + size <= budget

    def admit(self, size: int) -> Admission | None:
        """Admit a large body of C{size} bytes, or None when it is past the
        body budget (then L{refuse} it)."""
        if not self._fits(self.body_budget, self.admitted_bytes, len(self.admitted), size):
            return None
        admission = Admission(size)
        self.admitted.append(admission)
        self._changed()
        return admission

    def grow(self, admission: Admission, size: int) -> bool:
        """A chunked body grew to C{size} bytes: whether it still fits the
        body budget (it keeps its place either way; release it if not)."""
        others = self.admitted_bytes - admission.size
        admission.size = size
        self._changed()
        return self.body_budget == 0 or len(self.admitted) == 1 or others + size <= self.body_budget

    def process(self, admission: Admission) -> Deferred[None]:
        """Fires when C{admission}'s body may be processed: at once when it
        fits the parse budget and nobody waits before it, else in turn."""
        if not self.waiting and self._may_process(admission):
            self._start(admission)
            return succeed(None)
        turn: Deferred[None] = Deferred()
        self.waiting.append((admission, turn))
        self._changed()
        return turn

    def _may_process(self, admission: Admission) -> bool:
        processing = [other for other in self.admitted if other.processing_since is not None]
        return self._fits(self.parse_budget, sum(other.size for other in processing),
                          len(processing), admission.size)

    def _start(self, admission: Admission) -> None:
        admission.processing_since = self.clock.seconds()
        self._changed()

    def release(self, admission: Admission) -> None:
        """C{admission}'s request is over (answered, refused or gone); its
        bytes leave both budgets and the next waiting requests start.
        Releasing twice is harmless."""
        if admission not in self.admitted:
            return
        self.admitted.remove(admission)
        for index, (waiting, _) in enumerate(self.waiting):
            if waiting is admission:
                del self.waiting[index]
                break
        if admission.processing_since is not None and admission.size:
            spent = (self.clock.seconds() - admission.processing_since) / admission.size
            self.seconds_per_byte = (self.seconds_per_byte + spent) / 2 if self.measured \
                else spent
            self.measured = True
        started = self._start_waiting()
        self._changed()
        if admission.processing_since is not None and not started and \
                self.processing_bytes == 0 and self.on_idle is not None:
            self.on_idle()

    def _start_waiting(self) -> bool:
        started = False
        while self.waiting and self._may_process(self.waiting[0][0]):
            admission, turn = self.waiting.popleft()
            self._start(admission)
            turn.callback(None)
            started = True
        return started

    def refuse(self, size: int) -> int:
        """A body of C{size} bytes is refused now: the seconds after which
        it may fit (its C{Retry-After}), between 1 and L{MAX_RETRY_AFTER}.

        That is the time the bodies ahead of it need to leave, at the
        processing speed measured so far (or the speed of an upload being
        processed now, when that is slower): the admitted ones, oldest
        first, then the ones refused before it and not yet due back (each
        refused client is promised its turn, so that clients refused
        together do not all come back at once to the room for one)."""
        now: float = self.clock.seconds()
        seconds_per_byte: float = max([self.seconds_per_byte] + [
            (now - admission.processing_since) / admission.size
            for admission in self.admitted
            if admission.processing_since is not None and admission.size])
        self.promised = [(ahead, due) for ahead, due in self.promised if due > now]
        line = [admission.size for admission in self.admitted]
        line += [ahead for ahead, _ in self.promised]
        in_line, leaving = sum(line), 0
        for ahead in line:
            if in_line - leaving + size <= self.body_budget:
                break
            leaving += ahead
        seconds = max(1, min(MAX_RETRY_AFTER, math.ceil(leaving * seconds_per_byte)))
        self.promised.append((size, now + seconds))
        return seconds

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self.admitted_bytes, self.processing_bytes, len(self.waiting))


_malloc_trim: Callable[[int], int] | None = None


def trim_malloc() -> None:
    """Hand the heap's free memory back to the system (glibc's
    C{malloc_trim}; nothing elsewhere).  Freed memory of a large parse
    otherwise stays in the threads' malloc arenas: after six concurrent
    150 MB uploads the process kept ~800 MB resident.  Thread-safe; run it
    in a thread (it walks the whole heap)."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            _malloc_trim = ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
        except (OSError, AttributeError, TypeError):
            _malloc_trim = lambda pad: 0  # noqa: E731 - not glibc: nothing to trim
    _malloc_trim(0)
