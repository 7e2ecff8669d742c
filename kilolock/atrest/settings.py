"""The server's settings of state at rest: the key file that encrypts stored
versions (C{--encryption-keys}, C{KL_ENCRYPTION_KEYS}) and the server's
retention policy (C{--retention-versions}, C{--retention-days},
C{--retention-interval}); what L{kilolock.server.tap} builds from them.

Both are off by default, for reasons C{docs/at-rest.md} gives: a key that
Kilolock made up by itself would sit next to the data it protects (or be
lost with a container), and pruning must never start on its own after an
upgrade of a server whose operators count on every version being kept.
"""

from __future__ import annotations

from typing import Any

from twisted.application.service import IService
from twisted.logger import Logger
from twisted.python import usage

from kilolock.atrest.errors import KeyFileError
from kilolock.atrest.interfaces import IKeyProvider
from kilolock.atrest.keyfile import load_key_file
from kilolock.atrest.keyring import LocalKeyProvider
from kilolock.retention.policy import RetentionPolicy
from kilolock.retention.service import RetentionService
from kilolock.server.metrics import Metrics
from kilolock.store.interfaces.retention import IRetentionStore

__all__ = ["AT_REST_OPTIONS", "DEFAULT_RETENTION_INTERVAL", "check_key_file", "key_provider",
           "retention_limit", "retention_service"]

log = Logger()

#: Seconds between two pruning passes.
DEFAULT_RETENTION_INTERVAL = 600.0

#: The options of C{twistd kilolock} these settings add.
AT_REST_OPTIONS: list[list[Any]] = [
    ["encryption-keys", None, None,
     "TOML key file of key-encryption keys (one active): stored versions are encrypted"
     " (PostgreSQL store; see docs/at-rest.md) [KL_ENCRYPTION_KEYS, default: not"
     " encrypted]"],
    ["retention-versions", None, None,
     "keep the newest N versions of each state; older ones are pruned unless"
     " --retention-days keeps them [KL_RETENTION_VERSIONS, default off: no limit]"],
    ["retention-days", None, None,
     "keep every version younger than D days [KL_RETENTION_DAYS, default off: no limit]"],
    ["retention-interval", None, None,
     "seconds between two pruning passes"
     f" [KL_RETENTION_INTERVAL, default {DEFAULT_RETENTION_INTERVAL:g}]"],
]


def retention_limit(name: str, value: Any, maximum: int) -> int | None:
    """A retention limit: absent, C{off} or C{none} is no limit; else a whole
    number from 1 to C{maximum}.

    @raise usage.UsageError: for anything else.
    """
    if value is None or str(value).strip().lower() in ("off", "none"):
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        number = 0
    if not 1 <= number <= maximum:
        raise usage.UsageError(f"{name} must be a whole number from 1 to {maximum}, or off")
    return number


def check_key_file(path: str | None) -> None:
    """Read and check the key file at C{path} (None: none).

    @raise usage.UsageError: naming the file and the rule it breaks.
    """
    if path is None:
        return
    try:
        load_key_file(path)
    except KeyFileError as error:
        raise usage.UsageError(f"--encryption-keys: {error}") from None


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
