"""A large state's upload while its parse is still running.

A store that writes a large state in one transaction on a blocking
connection (PostgreSQL's) can start that transaction before the parse ends
and stream the projection's resource rows into the database as the parse
produces them: the parse (Python, one core) and the database's ingestion of
the rows (the other core) then overlap.  An L{UploadFeed} is the hand-off
between the three parties:

  - the parse, in a thread of its own (L{UploadFeed.parse_with}), fills
    L{UploadFeed.streamed} one resource at a time;
  - the store's transaction, in another thread, reads the rows as they come
    (L{UploadFeed.stream}), then waits for the parse's end
    (L{UploadFeed.wait_parsed});
  - the reactor waits for the parse (L{UploadFeed.parsed}) and answers its
    error if it fails -- before anything the transaction found, so the
    answers keep their order; it may give up (L{UploadFeed.abandon}), which
    makes the transaction roll back.

Nothing here knows of databases or HTTP.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from kilolock.core.model import ResourceRow, StateUpload
from kilolock.tfstate.projection import StreamedResources

__all__ = ["FeedAbandoned", "RowStream", "UploadFeed"]

#: How long a reader of rows sleeps when the parse has produced none since.
_POLL_SECONDS = 0.005


class FeedAbandoned(Exception):
    """The upload will not be written: its parse failed, or the reactor gave
    up (the transaction waiting on it must roll back)."""


class RowStream:
    """The resource rows of a parse in progress, in order, until it ends.

    @ivar sent: how many rows were yielded.
    @ivar restarted: the parse started its rows over (a repeated
        C{resources} key), so the rows yielded are not the projection's.
    """

    def __init__(self, feed: UploadFeed) -> None:
        self._feed = feed
        self._rows = feed.streamed.rows
        self._last: ResourceRow | None = None
        self.sent = 0
        self.restarted = False

    def __iter__(self) -> Iterator[ResourceRow]:
        rows, feed = self._rows, self._feed
        while True:
            ended = feed.wait_for_rows(rows, self.sent)
            if feed.abandoned:
                return  # ends the COPY as such: the transaction then rolls back
            if feed.streamed.rows is not rows:
                self.restarted = True
                return
            count = len(rows)
            for row in rows[self.sent:count]:
                self._last = row
                yield row
                self.sent += 1
            if ended and len(rows) == self.sent:
                return

    def is_prefix_of(self, resources: Sequence[ResourceRow]) -> bool:
        """Whether the rows yielded are the first rows of C{resources} (the
        projection the parse ended with)."""
        if self.restarted:
            return False
        return self.sent == 0 or (len(resources) >= self.sent
                                  and resources[self.sent - 1] is self._last)


class UploadFeed:
    """A large upload of C{size} bytes whose parse is running (see the module
    docstring).  The reactor's side: L{parsed}, L{abandon}; the
    transaction's side (a thread): L{stream}, L{wait_parsed}."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.streamed = StreamedResources()
        self._condition = threading.Condition()
        self._ended = False
        self._upload: StateUpload | None = None
        self._abandoned = False
        self._outcome: StateUpload | Failure | None = None
        self._waiters: list[Deferred[StateUpload]] = []

    # -- the parse's side ---------------------------------------------------

    def parse_with(self, parse: Callable[[StreamedResources], StateUpload]) -> StateUpload:
        """Run C{parse(self.streamed)} (in a thread) and note its end.
        @return: its upload (or raise its error)."""
        upload: StateUpload | None = None
        try:
            upload = parse(self.streamed)
            return upload
        finally:
            with self._condition:
                self._ended = True
                self._upload = upload
                self._condition.notify_all()

    def watch(self, parsing: Deferred[StateUpload]) -> None:
        """Take the parse's Deferred (fired on the reactor): L{parsed} fires
        with its result."""
        parsing.addBoth(self._settle)

    def _settle(self, result: StateUpload | Failure) -> None:
        self._outcome = result
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            self._fire(waiter)

    def _fire(self, waiter: Deferred[StateUpload]) -> None:
        if isinstance(self._outcome, Failure):
            waiter.errback(self._outcome)
        else:
            assert self._outcome is not None
            waiter.callback(self._outcome)

    # -- the reactor's side -------------------------------------------------

    def parsed(self) -> Deferred[StateUpload]:
        """@return: a Deferred firing with the parsed L{StateUpload}, or
        failing with the parse's error (each call a new Deferred)."""
        waiter: Deferred[StateUpload] = Deferred()
        if self._outcome is None:
            self._waiters.append(waiter)
        else:
            self._fire(waiter)
        return waiter

    def abandon(self) -> None:
        """Give up: a transaction waiting on this feed raises
        L{FeedAbandoned} (and so rolls back)."""
        with self._condition:
            self._abandoned = True
            self._condition.notify_all()

    # -- the transaction's side (a thread) ------------------------------------

    def stream(self) -> RowStream:
        """The resource rows from the first, as the parse produces them."""
        return RowStream(self)

    @property
    def abandoned(self) -> bool:
        """Whether L{abandon} was called."""
        return self._abandoned

    def wait_for_rows(self, rows: list[ResourceRow], seen: int) -> bool:
        """Wait until C{rows} has more than C{seen} rows, the parse ended,
        the rows started over or the feed was abandoned (the stream then
        ends without an error: failing the C{COPY} would look like a
        database failure; the wait that follows raises L{FeedAbandoned}).
        @return: whether the parse ended."""
        with self._condition:
            while (len(rows) == seen and not self._ended and not self._abandoned
                   and self.streamed.rows is rows):
                self._condition.wait(_POLL_SECONDS)
            return self._ended

    def wait_parsed(self) -> StateUpload:
        """The parsed upload, once the parse ends.
        @raise FeedAbandoned: the parse failed, or the feed was abandoned."""
        with self._condition:
            while not self._ended and not self._abandoned:
                self._condition.wait()
            if self._abandoned or self._upload is None:
                raise FeedAbandoned("the upload will not be written")
            return self._upload
