"""C{twistd kilolock}: options and the service tree (also used by kilolock.tac).

Every option has an environment variable; a command-line option wins over
the environment, which wins over the default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from attrs import frozen
from twisted.application.service import IService, MultiService, Service
from twisted.application.strports import service as endpoint_service
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import serverFromString
from twisted.logger import Logger
from twisted.python import usage

from kilolock.auth import AUTH_MODES, OpenChecker, StaticTokenChecker, build_portal
from kilolock.interfaces import IStateStore
from kilolock.store.memory import MemoryStateStore
from kilolock.web.body import DEFAULT_MAX_BODY_BYTES
from kilolock.web.site import KilolockSite, build_root

log = Logger()

STORES = ("memory", "postgres")


@frozen
class Settings:
    """Everything that configures one Kilolock process."""

    listen: str = "tcp:8080"
    store: str = "postgres"
    database_url: str | None = None
    data_dir: str = "./kilolock-data"
    auth_mode: str = "open"
    auth_token: str = ""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    @classmethod
    def from_sources(cls, options: Mapping[str, Any],
                     environ: Mapping[str, str] = os.environ) -> Settings:
        """Options first, then C{KL_*} environment variables, then defaults."""

        def pick(option: str, env: str, default: Any) -> Any:
            value = options.get(option)
            if value is None:
                value = environ.get(env) or None
            return default if value is None else value

        database_url = pick("database", "KL_DATABASE_URL", None)
        store = pick("store", "KL_STORE", "postgres")
        settings = cls(
            listen=pick("listen", "KL_LISTEN", "tcp:8080"),
            store=store,
            database_url=database_url,
            data_dir=pick("data-dir", "KL_DATA_DIR", "./kilolock-data"),
            auth_mode=pick("auth-mode", "KL_AUTH_MODE", "open"),
            auth_token=environ.get("KL_AUTH_TOKEN", ""),
            max_body_bytes=int(pick("max-body-bytes", "KL_MAX_BODY_BYTES",
                                    DEFAULT_MAX_BODY_BYTES)),
        )
        settings.check()
        return settings

    def check(self) -> None:
        if self.store not in STORES:
            raise usage.UsageError(f"--store must be one of {', '.join(STORES)}")
        if self.auth_mode not in AUTH_MODES:
            raise usage.UsageError(f"KL_AUTH_MODE must be one of {', '.join(AUTH_MODES)}")
        if self.auth_mode == "static" and not self.auth_token:
            raise usage.UsageError("KL_AUTH_MODE=static needs KL_AUTH_TOKEN")
        if self.max_body_bytes <= 0:
            raise usage.UsageError("KL_MAX_BODY_BYTES must be a positive number of bytes")
        try:
            # Parse only (no reactor is touched): a bad endpoint string is a
            # usage error, not a traceback out of makeService.
            serverFromString(None, self.listen)
        except (ValueError, TypeError, KeyError, OSError) as error:
            raise usage.UsageError(
                f"--listen {self.listen!r} is not a usable Twisted endpoint string: {error}"
            ) from None


class Options(usage.Options):
    synopsis = "[options]"
    longdesc = ("Kilolock: a Terraform/OpenTofu remote state server (http backend). "
                "Every option also reads a KL_* environment variable.")
    optParameters = [
        ["listen", "l", None, "Twisted endpoint to serve on [KL_LISTEN, default tcp:8080]"],
        ["store", "s", None, "state store: memory or postgres [KL_STORE, default postgres]"],
        ["database", "d", None,
         "PostgreSQL URL; without one an embedded PostgreSQL is started [KL_DATABASE_URL]"],
        ["data-dir", None, None,
         "data directory of the embedded PostgreSQL [KL_DATA_DIR, default ./kilolock-data]"],
        ["auth-mode", None, None, "open, static or database [KL_AUTH_MODE, default open]"],
        ["max-body-bytes", None, None,
         "largest request body accepted [KL_MAX_BODY_BYTES, default 268435456]"],
    ]

    def postOptions(self) -> None:
        # Check every setting now, so twistd reports a bad value as a usage
        # error (exit 1, the message, no traceback) before it builds anything.
        Settings.from_sources(self)


class StoreService(Service):
    """Starts the store with the application and stops it last."""

    def __init__(self, store: IStateStore) -> None:
        self.store = store
        self.started: Deferred[None] | None = None

    def startService(self) -> None:
        super().startService()
        self.started = self.store.start()
        self.started.addErrback(
            lambda failure: log.error("the state store failed to start: {kind}",
                                      kind=failure.type.__name__ if failure.type else "?"))

    def stopService(self) -> Deferred[None]:
        super().stopService()
        return self.store.stop()


def build_store(settings: Settings, reactor: Any) -> IStateStore:
    if settings.store == "memory":
        return MemoryStateStore()
    from kilolock.store.postgres import postgres_store_from_settings

    return postgres_store_from_settings(settings, reactor)


def build_portal_for(settings: Settings, store: IStateStore) -> Any:
    if settings.auth_mode == "static":
        return build_portal(StaticTokenChecker(settings.auth_token))
    if settings.auth_mode == "database":
        raise usage.UsageError("KL_AUTH_MODE=database is not available yet")
    return build_portal(OpenChecker())


def make_service_from_settings(settings: Settings, reactor: Any = None,
                               store: IStateStore | None = None) -> MultiService:
    """The whole server: the store service, then the HTTP listener."""
    if reactor is None:
        from twisted.internet import reactor as default_reactor

        reactor = default_reactor
    if store is None:
        store = build_store(settings, reactor)
    portal = build_portal_for(settings, store)
    site = KilolockSite(build_root(store, portal, reactor),
                        max_body_bytes=settings.max_body_bytes)
    top = MultiService()
    StoreService(store).setServiceParent(top)
    web: IService = endpoint_service(settings.listen, site)
    web.setServiceParent(top)
    top.store = store  # type: ignore[attr-defined]
    top.site = site  # type: ignore[attr-defined]
    return top


def makeService(options: Mapping[str, Any], reactor: Any = None) -> MultiService:
    """Entry point of the twistd plugin."""
    return make_service_from_settings(Settings.from_sources(options), reactor)
