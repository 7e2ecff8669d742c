"""The services a Kilolock server is made of: the store's (started first,
stopped last), and the whole server's, which stops one step at a time
(stop accepting, let requests finish, close connections, close the store).
L{ListeningEndpoint} keeps the port a listener really got, and
L{announcement} says, once listening, where everything is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from attrs import frozen
from twisted.application.internet import StreamServerEndpointService
from twisted.application.service import IService, MultiService, Service
from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.endpoints import SSL4ServerEndpoint
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IListeningPort, IProtocolFactory, IStreamServerEndpoint
from twisted.logger import Logger
from zope.interface import implementer

from kilolock.store.interfaces.states import IStateStore
from kilolock.web.site import KilolockSite

__all__ = ["CLOSE_GRACE", "Announcement", "CannotListen", "KilolockService", "ListeningEndpoint",
           "StoreService", "announcement", "keeping_port"]

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

    @property
    def secure(self) -> bool:
        """Whether the listener speaks TLS (an C{ssl:} endpoint)."""
        return isinstance(self.endpoint, SSL4ServerEndpoint)


def keeping_port(service: StreamServerEndpointService) -> ListeningEndpoint:
    """Make C{service} listen through a L{ListeningEndpoint}, and return it."""
    listening = ListeningEndpoint(service.endpoint)
    service.endpoint = listening
    return listening


class CannotListen(Exception):
    """A listener's port could not be had (under a daemonizing twistd)."""


@frozen
class Announcement:
    """What the start-up lines say besides the listener's address: whether
    the dashboard is served, the auth mode, and the control API's listener
    (hosted mode)."""

    ui: bool = True
    auth_mode: str = "open"
    control: ListeningEndpoint | None = None


#: The addresses that mean "every interface".
_EVERY_INTERFACE = ("0.0.0.0", "::", "")  # noqa: S104 - compared, never bound


def _where(listening: ListeningEndpoint) -> tuple[str, str, bool] | None:
    """The bound address as text, the base URL a client on this machine
    uses, and whether every interface is bound; None before listening or
    for an address without a URL (a Unix socket)."""
    port = listening.port
    if port is None:
        return None
    address = port.getHost()
    if not isinstance(address, IPv4Address | IPv6Address):
        return None
    scheme = "https" if listening.secure else "http"
    everywhere = address.host in _EVERY_INTERFACE
    if isinstance(address, IPv6Address):
        bound = f"[{address.host}]:{address.port}"
        host = "localhost" if everywhere else f"[{address.host}]"
    else:
        bound = f"{address.host}:{address.port}"
        host = "localhost" if everywhere else address.host
    return bound, f"{scheme}://{host}:{address.port}", everywhere


def announcement(listening: ListeningEndpoint, about: Announcement) -> list[str]:
    """The lines the server logs once listening: the address it really
    bound (a port of 0 resolved, every interface or one), and the URLs a
    user needs -- the state lane of the C{backend "http"} block, the
    dashboard, the TFE lane's discovery for the C{cloud {}} block, C{kl}'s
    C{KL_URL} and, in hosted mode, the control API."""
    where = _where(listening)
    if where is None:
        port = listening.port
        host = port.getHost() if port is not None else None
        name = host.name if isinstance(host, UNIXAddress) else host
        return [f"listening on {name!r}"] if name else []
    bound, base, everywhere = where
    reach = ("every interface: other machines can reach it" if everywhere
             else "this interface only")
    lines = [f"listening on {bound} ({reach})"]
    if everywhere and about.auth_mode == "open":
        lines.append("authentication is off (KL_AUTH_MODE=open) and every interface is"
                     " bound: anyone who reaches this port can read and overwrite every"
                     " state; for a try-out add --listen tcp:PORT:interface=127.0.0.1")
    lines.append(f"Terraform http backend: address = \"{base}/v1/states/NAME\"")
    if about.ui:
        lines.append(f"dashboard: {base}/ui/")
    discovery = f"{base}/.well-known/terraform.json"
    if listening.secure:
        lines.append(f"cloud {{}} block: hostname = \"{base.split('://', 1)[1]}\""
                     f" (discovery {discovery})")
    else:
        lines.append(f"cloud {{}} block: plain HTTP, which Terraform's discovery does not"
                     f" use: a CLI host block naming {base}/api/v2/ (docs/tfe-lane.md,"
                     " the local quick start)")
    lines.append(f"kl: export KL_URL={base}")
    if about.control is not None:
        control = _where(about.control)
        if control is not None:
            lines.append(f"control API (hosted mode): {control[1]}/v1/api/"
                         f" (kl: export KL_CONTROL_URL={control[1]})")
    return lines


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
                 listening: ListeningEndpoint | None = None,
                 about: Announcement | None = None) -> None:
        super().__init__()
        self.store_service = store_service
        self.web_service = web_service
        self.site = site
        self.listening = listening
        self.about = about
        self.sites = tuple(sites) or (site,)
        self.grace = grace
        self.clock = clock
        store_service.setServiceParent(self)
        web_service.setServiceParent(self)

    @property
    def store(self) -> IStateStore:
        return self.store_service.store

    _bound = False
    #: Whether twistd runs the server as a daemon (set by the plugin).
    daemonized = False

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
            message = (f"kilolock: cannot listen on {error.interface or 'any'}:{error.port}:"
                       f" {reason}; stop what uses that port or choose another one"
                       " (--listen / KL_LISTEN, --control-listen / KL_CONTROL_LISTEN)")
            if self.daemonized:
                # twistd's waiting parent hears of an Exception only (it
                # would wait forever for a child gone with SystemExit), and
                # prints the first 100 bytes it is told: the whole line goes
                # to the log file.
                log.error("{message}", message=message)
                raise CannotListen(f"port {error.port} of {error.interface or 'any'}:"
                                   f" {reason}") from None
            # Exits with status 1, the message on stderr (twistd logs it):
            # logging is not set up yet under `twist`.
            raise SystemExit(message) from None

    def startService(self) -> None:
        if not self._bound:
            self.privilegedStartService()
        super().startService()
        if self.listening is not None and self.about is not None:
            for line in announcement(self.listening, self.about):
                log.info("{line}", line=line)

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
