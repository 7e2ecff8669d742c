"""What every part of L{kilolock.store.postgres.store.PostgresStateStore}
is made with: the L{TransactionRunner} its transactions run on and the clock
that times them; and, for the parts that write payloads, the codec and the
cache of each state's newest version (L{ChainCache})."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from kilolock.atrest.versions import VersionCodec
from kilolock.store.postgres.payloads import ChainCache
from kilolock.store.postgres.runner import TransactionRunner

__all__ = ["PayloadPart", "StorePart"]


class StorePart:
    """A part of the store: each public method is one transaction run by
    C{runner}; C{clock} is the time the rows and events it writes record."""

    def __init__(self, runner: TransactionRunner, clock: Callable[[], datetime]) -> None:
        self._runner = runner
        self._clock = clock


class PayloadPart(StorePart):
    """A part that writes version payloads, encoded by C{codec} (full
    newest versions noted in C{chains})."""

    def __init__(self, runner: TransactionRunner, clock: Callable[[], datetime],
                 codec: VersionCodec, chains: ChainCache) -> None:
        super().__init__(runner, clock)
        self._codec = codec
        self._chains = chains
