"""Hooks for Kilolock's own tests of a live server, never for production:
the server of L{kilolock.testing.twist} (C{python -m kilolock.testing.twist
... kilolock [options] [hook options]}) takes these two options besides
every option of C{twistd kilolock}:

  - C{--token-clock-file PATH}: CI tokens are verified at the time written
    in C{PATH} (seconds since the epoch), so a test can move a server's
    token clock past a token's expiry between two requests of one
    Terraform run;
  - C{--operation-pause-file PATH}: while C{PATH} exists, every state
    operation waits before its write, holding its locks.

They reach the server through the seams L{make_service_from_settings}
offers every caller (the clock CI tokens are verified at, the pause before
an operation's steps); production modules know nothing of them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar

from twisted.application.service import ServiceMaker
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger
from zope.interface import implementer

from kilolock.server import tap
from kilolock.server.services import KilolockService
from kilolock.server.settings import Settings
from kilolock.stateops.runner import Pause

__all__ = ["MAKER", "FileClock", "Options", "makeService", "pause_while_file_exists"]

log = Logger(namespace="kilolock.testing.hooks")


@implementer(IReactorTime)
class FileClock:
    """The time read from a file holding seconds since the epoch (the
    reactor's time while the file is missing or unreadable); timers are the
    reactor's."""

    def __init__(self, reactor: IReactorTime, path: str) -> None:
        self.reactor = reactor
        self.path = path

    def seconds(self) -> float:
        try:
            with open(self.path, encoding="ascii") as stream:
                return float(stream.read().strip())
        except (OSError, ValueError):
            return self.reactor.seconds()

    def callLater(self, delay: float, callable: Any, *args: Any, **kwargs: Any) -> IDelayedCall:
        return self.reactor.callLater(delay, callable, *args, **kwargs)

    def getDelayedCalls(self) -> list[IDelayedCall]:
        return list(self.reactor.getDelayedCalls())


def pause_while_file_exists(path: str, reactor: IReactorTime) -> Pause:
    """Hold every operation before its write while the file C{path} exists
    (its locks held)."""

    async def pause(operation_id: str, step: str) -> None:
        while step == "writing" and os.path.exists(path):
            await deferLater(reactor, 0.05, lambda: None)

    return pause


class Options(tap.Options):
    """C{twistd kilolock}'s options and the hooks'."""

    optParameters: ClassVar[list[list[Any]]] = [
        ["token-clock-file", None, None,
         "verify CI tokens at the time in this file (seconds since the epoch)"],
        ["operation-pause-file", None, None,
         "while this file exists, state operations wait before their write"],
    ]


def makeService(options: Mapping[str, Any], reactor: Any = None) -> KilolockService:
    """The server of C{options}, with the hooks they name."""
    if reactor is None:
        from twisted.internet import reactor as default_reactor

        reactor = default_reactor
    clock_file = options.get("token-clock-file")
    pause_file = options.get("operation-pause-file")
    if clock_file is not None:
        log.warn("CI tokens are verified at the time in {path} (a test hook)", path=clock_file)
    return tap.make_service_from_settings(
        Settings.from_sources(options), reactor,
        token_clock=None if clock_file is None else FileClock(reactor, clock_file),
        operation_pause=None if pause_file is None else pause_while_file_exists(pause_file,
                                                                                reactor))


#: The C{kilolock} plugin of L{kilolock.testing.twist}.
MAKER = ServiceMaker("Kilolock (with test hooks)", __name__,
                     "A Kilolock server with the hooks of Kilolock's own tests", "kilolock")
