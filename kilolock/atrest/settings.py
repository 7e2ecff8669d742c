"""The server's settings of state at rest: the key file that encrypts stored
versions (C{--encryption-keys}, C{KL_ENCRYPTION_KEYS}) and the server's
retention policy (C{--retention-versions}, C{--retention-days},
C{--retention-interval}), options of L{kilolock.server.settings.Settings};
what L{kilolock.server.tap} builds from them.

Both are off by default, for reasons C{docs/at-rest.md} gives: a key that
Kilolock made up by itself would sit next to the data it protects (or be
lost with a container), and pruning must never start on its own after an
upgrade of a server whose operators count on every version being kept.
"""

from __future__ import annotations

from typing import Any

from twisted.application.service import IService
from twisted.logger import Logger

from kilolock.atrest.interfaces import IKeyProvider
from kilolock.atrest.keyfile import load_key_file
from kilolock.atrest.keyring import LocalKeyProvider
from kilolock.retention.policy import RetentionPolicy
from kilolock.retention.service import RetentionService
from kilolock.server.metrics import Metrics
from kilolock.store.interfaces.retention import IRetentionStore

__all__ = ["DEFAULT_RETENTION_INTERVAL", "key_provider", "retention_limit",
           "retention_service"]

log = Logger()

#: Seconds between two pruning passes.
DEFAULT_RETENTION_INTERVAL = 600.0


def retention_limit(value: Any) -> int | None:
    """A retention limit as given: C{off} or C{none} is no limit, anything
    else a whole number (its range is the option's rule).

    @raise ValueError: not a whole number."""
    text = str(value).strip()
    if text.lower() in ("off", "none"):
        return None
    return int(text)


def key_provider(store: str, path: str | None) -> IKeyProvider | None:
    """The key provider of the key file at C{path} for a C{store} store:
    None without a key file, and for the memory store (which keeps versions
    in memory, unencrypted).  Logs which it is."""
    if store == "memory":
        if path is not None:
            log.info("the memory store keeps versions in memory, unencrypted:"
                     " --encryption-keys applies to the PostgreSQL store")
        return None
    if path is None:
        log.info("stored versions are not encrypted (no --encryption-keys; see"
                 " docs/at-rest.md)")
        return None
    provider = LocalKeyProvider(load_key_file(path))
    log.info("stored versions are encrypted; new ones under key {key_id}",
             key_id=provider.active_key_id())
    return provider


def retention_service(store: Any, versions: int | None, days: int | None, interval: float,
                      reactor: Any, metrics: Metrics | None) -> IService | None:
    """The pruning service of C{store} (None when it has no retention)."""
    if not IRetentionStore.providedBy(store):
        return None
    return RetentionService(store, RetentionPolicy(versions, days), reactor, interval, metrics)
