"""The services a Kilolock server is made of: the store's (started first,
stopped last), and the whole server's, which stops one step at a time
(stop accepting, let requests finish, close connections, close the store).
L{ListeningEndpoint} keeps the port a listener really got.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from twisted.application.internet import StreamServerEndpointService
from twisted.application.service import IService, MultiService, Service
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IListeningPort, IProtocolFactory, IStreamServerEndpoint
from twisted.logger import Logger
from zope.interface import implementer

from kilolock.store.interfaces.states import IStateStore
from kilolock.web.site import KilolockSite

__all__ = ["CLOSE_GRACE", "KilolockService", "ListeningEndpoint", "StoreService",
           "keeping_port"]

log = Logger()

#: Seconds closing connections may take once no request is in flight.
CLOSE_GRACE = 5.0


class StoreService(Service):
    """Starts the store with the application and stops it last; C{background}
    (work on the store: pruning, the sweep of abandoned operations) starts
    after it and stops before it."""

    def __init__(self, store: IStateStore, background: IService | None = None) -> None:
        self.store = store
        self.background = background
        self.started: Deferred[None] | None = None

    def startService(self) -> None:
        super().startService()
        self.started = self.store.start()
        self.started.addErrback(
            lambda failure: log.error("the state store failed to start: {kind}",
                                      kind=failure.type.__name__ if failure.type else "?"))
        if self.background is not None:
            self.background.startService()

    def stopService(self) -> Deferred[None]:
        super().stopService()
        stopping: Deferred[Any] = maybeDeferred(
            lambda: None if self.background is None else self.background.stopService())
        return stopping.addCallback(lambda _: self.store.stop())


@implementer(IStreamServerEndpoint)
class ListeningEndpoint:
    """An endpoint that keeps the port it listens on, so that the port a
    C{tcp:0} listener really got can be asked for (C{port.getHost()})."""

    def __init__(self, endpoint: IStreamServerEndpoint) -> None:
        self.endpoint = endpoint
        #: The listening port, once listening.
        self.port: IListeningPort | None = None

    def listen(self, protocolFactory: IProtocolFactory) -> Deferred[IListeningPort]:
        def keep(port: IListeningPort) -> IListeningPort:
            self.port = port
            return port

        return self.endpoint.listen(protocolFactory).addCallback(keep)


def keeping_port(service: StreamServerEndpointService) -> ListeningEndpoint:
    """Make C{service} listen through a L{ListeningEndpoint}, and return it."""
    listening = ListeningEndpoint(service.endpoint)
    service.endpoint = listening
    return listening


class KilolockService(MultiService):
    """The store, then the listeners; stopped in the opposite order, one step
    at a time: stop accepting connections, let in-flight requests finish
    (at most C{grace} seconds), close the connections, then close the store.

    C{site} is the state lanes' site, listening on C{listening}; C{sites}
    every site whose requests are drained (the control API's too, in hosted
    mode)."""

    def __init__(self, store_service: StoreService, web_service: IService,
                 site: KilolockSite, grace: float, clock: Any,
                 sites: Sequence[KilolockSite] = (),
                 listening: ListeningEndpoint | None = None) -> None:
        super().__init__()
        self.store_service = store_service
        self.web_service = web_service
        self.site = site
        self.listening = listening
        self.sites = tuple(sites) or (site,)
        self.grace = grace
        self.clock = clock
        store_service.setServiceParent(self)
        web_service.setServiceParent(self)

    @property
    def store(self) -> IStateStore:
        return self.store_service.store

    _bound = False

    def privilegedStartService(self) -> None:
        """Bind the listeners, before the store starts (twistd calls this
        first; under C{twist}, L{startService} does).  A port that cannot be
        had -- another process on it, a privileged port -- stops the server
        with one log line that says so and exit status 1, not a traceback."""
        try:
            super().privilegedStartService()
            self._bound = True
        except CannotListenError as error:
            reason = getattr(error.socketError, "strerror", None) or str(error.socketError)
            # Exits with status 1, the message on stderr (twistd logs it):
            # logging is not set up yet under `twist`.
            raise SystemExit(
                f"kilolock: cannot listen on {error.interface or 'any'}:{error.port}: {reason};"
                " stop what uses that port or choose another one (--listen / KL_LISTEN,"
                " --control-listen / KL_CONTROL_LISTEN)") from None

    def startService(self) -> None:
        if not self._bound:
            self.privilegedStartService()
        super().startService()

    def stopService(self) -> Deferred[None]:
        Service.stopService(self)
        stopping: Deferred[Any] = maybeDeferred(self.web_service.stopService)
        stopping.addCallback(lambda _: self._wait_until(
            lambda: all(site.receiving + site.in_flight == 0 for site in self.sites),
            self.grace, "stopping with requests still in flight"))
        stopping.addCallback(lambda _: self._close_connections())
        stopping.addCallback(lambda _: self.store_service.stopService())
        return stopping

    def _close_connections(self) -> Deferred[None]:
        """Close every connection gently (answers already written are flushed
        first), so the last acknowledgements reach their clients."""
        for site in self.sites:
            for channel in list(site.connections):
                channel.loseConnection()
        return self._wait_until(lambda: not any(site.connections for site in self.sites),
                                CLOSE_GRACE, "connections did not close in time")

    def _wait_until(self, done: Callable[[], bool], seconds: float,
                    warning: str) -> Deferred[None]:
        """Fires when C{done()} is true, or after C{seconds} (logging C{warning})."""
        deadline = self.clock.seconds() + seconds
        finished: Deferred[None] = Deferred()

        def check() -> None:
            if done():
                finished.callback(None)
            elif self.clock.seconds() >= deadline:
                log.warn(warning)
                finished.callback(None)
            else:
                self.clock.callLater(0.05, check)

        check()
        return finished
