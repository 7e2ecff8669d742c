"""The PostgreSQL L{IStateStore} and L{ITenantStore}: its parts, put together.

The store is a composition, each part made with what it needs:

  - a L{TransactionRunner} (the pool, deadlines, retries, the 503),
  - L{PostgresStates} (writes, deletes, LOCK, UNLOCK) and L{PostgresReads},
  - L{PostgresEvents} (the audit chain's calls),
  - L{PostgresTenants} (hosted mode), to which L{ITenantStore} is forwarded
    whole, and L{PostgresOidcPolicies}, to which L{IOidcPolicyStore} is;
  - L{PostgresDashboard} (the dashboard's listing; L{ISessionStore} whole);
  - L{PostgresTFE} (the TFE lane), to which L{ITFEStore} is forwarded whole;
  - L{PostgresRetention} (retention, purges, holds), to which
    L{IRetentionStore} is forwarded whole.

Below this module, every public method is one transaction run by the
runner; nothing blocks the reactor thread; nothing logs state bytes, query
parameters or the connection string.  The behaviour is exactly
L{kilolock.store.memory.store.MemoryStateStore}'s (one contract suite runs on
both); what PostgreSQL adds is durability and correctness across processes
sharing one database (see L{kilolock.store.postgres.states}).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from twisted.internet.defer import Deferred
from twisted.python.components import proxyForInterface
from zope.interface import implementer

from kilolock.atrest.chunks import ChunkCodec
from kilolock.atrest.interfaces import IKeyProvider
from kilolock.atrest.versions import VersionCodec
from kilolock.core.audit import ChainHead
from kilolock.core.events import STATE_WRITE, AuditEvent
from kilolock.core.model import (
    HeldLock,
    LockInfo,
    Principal,
    Projection,
    StateKey,
    StateSummary,
    StateUpload,
    StateVersion,
    StoreProbe,
    WriteOutcome,
    utcnow,
)
from kilolock.rules.event_pages import EventPageQuery
from kilolock.rules.listing import StateListQuery, StatePage
from kilolock.rules.resources import ResourceMatch, ResourceQuery
from kilolock.stateops.model import StateWrite
from kilolock.store.interfaces.oidc import IOidcPolicyStore
from kilolock.store.interfaces.retention import IRetentionStore
from kilolock.store.interfaces.sessions import ISessionStore
from kilolock.store.interfaces.stateops import IStateOperationsStore
from kilolock.store.interfaces.states import IHealthCheck, IOverlappedWrites, IStateStore
from kilolock.store.interfaces.tenants import ITenantStore
from kilolock.store.interfaces.tfe import ITFEStore
from kilolock.store.postgres.dashboard import PostgresDashboard
from kilolock.store.postgres.dsn import CONNECT_TIMEOUT, STATEMENT_TIMEOUT
from kilolock.store.postgres.embedded import EmbeddedPostgres
from kilolock.store.postgres.event_pages import PostgresEventPages
from kilolock.store.postgres.events import PostgresEvents
from kilolock.store.postgres.keys import check_keys_txn
from kilolock.store.postgres.large import LARGE_UPLOAD_BYTES
from kilolock.store.postgres.multi_write import PostgresMultiWrites
from kilolock.store.postgres.oidc_policies import PostgresOidcPolicies
from kilolock.store.postgres.payloads import ChainCache
from kilolock.store.postgres.purge import PostgresPurge
from kilolock.store.postgres.reads import PostgresReads
from kilolock.store.postgres.retention import PostgresRetention
from kilolock.store.postgres.runner import (
    DEFAULT_POOL_SIZE,
    OPERATION_TIMEOUT,
    RunnerSettings,
    TransactionRunner,
)
from kilolock.store.postgres.statements import PREPARE_STATEMENTS
from kilolock.store.postgres.stateops import PostgresStateOps
from kilolock.store.postgres.states import DetailOf, PostgresStates
from kilolock.store.postgres.tenants import PostgresTenants
from kilolock.store.postgres.tfe import PostgresTFE
from kilolock.store.upload_feed import UploadFeed

__all__ = ["PostgresStateStore", "postgres_store_from_settings"]


@implementer(IStateStore, ITenantStore, ISessionStore, IOidcPolicyStore, ITFEStore,
             IRetentionStore, IStateOperationsStore, IHealthCheck, IOverlappedWrites)
class PostgresStateStore(proxyForInterface(ITenantStore, "tenants"),  # type: ignore[misc]
                         proxyForInterface(IOidcPolicyStore,  # type: ignore[misc]
                                           "oidc_policies"),
                         proxyForInterface(ISessionStore, "_dashboard"),  # type: ignore[misc]
                         proxyForInterface(ITFEStore, "tfe"),  # type: ignore[misc]
                         proxyForInterface(IRetentionStore, "retention"),  # type: ignore[misc]
                         proxyForInterface(IStateOperationsStore,  # type: ignore[misc]
                                           "stateops")):
    """States, versions, locks, projection rows, audit events and tenants in
    PostgreSQL.  L{ITenantStore}, L{IOidcPolicyStore}, L{ISessionStore},
    L{ITFEStore}, L{IRetentionStore} and L{IStateOperationsStore} are each
    forwarded whole to the part that keeps them (Twisted's
    C{proxyForInterface}: mypy cannot follow a base class made at run time);
    each L{IStateStore} method to the part that runs it (the contracts are
    L{IStateStore}'s).

    With C{prepared_statements} (the default) every pooled session prepares
    the write cycle's statements (see L{kilolock.store.postgres.prepared});
    turn it off for a connection pooler that does not keep sessions (e.g.
    PgBouncer in transaction mode).

    @ivar runner: the L{TransactionRunner} every part runs its transactions on.
    @ivar tenants: the L{PostgresTenants}.
    @ivar oidc_policies: the L{PostgresOidcPolicies} (L{IOidcPolicyStore}).
    @ivar tfe: the L{PostgresTFE}.
    @ivar retention: the L{PostgresRetention} (L{IRetentionStore}: retention,
        purges, version holds).
    @ivar stateops: the L{PostgresStateOps} (L{IStateOperationsStore}, but
        for L{write_states}: L{PostgresMultiWrites}).
    """

    def __init__(self, database_url: str | None, reactor: Any, *,
                 pool_size: int = DEFAULT_POOL_SIZE,
                 connect_timeout: float = CONNECT_TIMEOUT,
                 statement_timeout: float = STATEMENT_TIMEOUT,
                 operation_timeout: float = OPERATION_TIMEOUT,
                 clock: Callable[[], datetime] = utcnow,
                 embedded: EmbeddedPostgres | None = None,
                 prepared_statements: bool = True,
                 key_provider: IKeyProvider | None = None) -> None:
        self._prepared_statements = prepared_statements
        self.runner = TransactionRunner(database_url, reactor, RunnerSettings(
            pool_size=pool_size, connect_timeout=connect_timeout,
            statement_timeout=statement_timeout, operation_timeout=operation_timeout,
            prepare_sql=PREPARE_STATEMENTS if prepared_statements else None), embedded=embedded,
            check=lambda cursor: check_keys_txn(cursor, key_provider))
        #: Compresses (then, with C{key_provider}, encrypts) and decodes
        #: version payloads.
        self.codec = VersionCodec(key_provider, run_large=self.runner.in_thread,
                                  large_size=LARGE_UPLOAD_BYTES)
        self.chains = ChainCache()
        self._states = PostgresStates(self.runner, clock, self.codec, self.chains)
        self._multi_writes = PostgresMultiWrites(self.runner, clock, self.codec, self.chains)
        self._reads = PostgresReads(self.runner, self.codec, self.chains)
        self._events = PostgresEvents(self.runner, clock)
        self._event_pages = PostgresEventPages(self.runner)
        self._dashboard = PostgresDashboard(self.runner)
        self.tenants = PostgresTenants(self.runner, clock)
        self.oidc_policies = PostgresOidcPolicies(self.runner, clock)
        self.tfe = PostgresTFE(self.runner, clock)
        self.retention = PostgresRetention(
            self.runner, clock, PostgresPurge(self.runner, clock, self.codec, self.chains))
        #: Seals (with C{key_provider}) and opens the chunks of upload sessions.
        self.chunk_codec = ChunkCodec(key_provider, run_large=self.runner.in_thread,
                                      large_size=LARGE_UPLOAD_BYTES)
        self.stateops = PostgresStateOps(self.runner, clock, self.chunk_codec)

    @classmethod
    def embedded(cls, server: EmbeddedPostgres, reactor: Any,
                 **options: Any) -> PostgresStateStore:
        """A store on an embedded PostgreSQL that it starts and stops itself."""
        return cls(None, reactor, embedded=server, **options)

    @property
    def reachable(self) -> bool:
        """True when the last contact with the database worked."""
        return self.runner.reachable

    @property
    def schema_upgrade(self) -> tuple[int, int] | None:
        """(version found, version now) of the last schema check, or None
        before the first."""
        return self.runner.schema_upgrade

    # -- lifecycle: the runner ------------------------------------------

    def start(self) -> Deferred[None]:
        """Connect (starting the embedded server first if there is one) and
        bring the schema up to date; see L{TransactionRunner.start}."""
        return self.runner.start()

    def stop(self) -> Deferred[None]:
        """Let running calls finish, close every connection, stop the
        embedded server if this store started it; see
        L{TransactionRunner.stop}."""
        return self.runner.stop()

    def probe(self) -> Deferred[StoreProbe]:
        """See L{TransactionRunner.probe}."""
        return self.runner.probe()

    # -- writes and locks: PostgresStates ---------------------------------

    def write_state(self, key: StateKey, upload: StateUpload, lock_id: str | None,
                    principal: Principal, event_kind: str = STATE_WRITE,
                    event_detail: Mapping[str, Any] | None = None) -> Deferred[WriteOutcome]:
        return self._states.write_state(key, upload, lock_id, principal, event_kind,
                                        event_detail)

    def write_state_overlapped(self, key: StateKey, feed: UploadFeed, lock_id: str | None,
                               principal: Principal, event_kind: str = STATE_WRITE,
                               detail_of: DetailOf | None = None) -> Deferred[WriteOutcome]:
        return self._states.write_state_overlapped(key, feed, lock_id, principal, event_kind,
                                                   detail_of)

    def write_states(self, writes: Sequence[StateWrite], principal: Principal,
                     event_kind: str = STATE_WRITE) -> Deferred[list[WriteOutcome]]:
        return self._multi_writes.write_states(writes, principal, event_kind)

    def delete_state(self, key: StateKey, lock_id: str | None,
                     principal: Principal) -> Deferred[None]:
        return self._states.delete_state(key, lock_id, principal)

    def acquire_lock(self, key: StateKey, info: LockInfo,
                     principal: Principal) -> Deferred[bool]:
        return self._states.acquire_lock(key, info, principal)

    def acquire_lock_if_exists(self, key: StateKey, info: LockInfo,
                               principal: Principal) -> Deferred[bool | None]:
        return self._states.acquire_lock_if_exists(key, info, principal)

    def release_lock(self, key: StateKey, lock_id: str | None, principal: Principal,
                     event_detail: Mapping[str, Any] | None = None,
                     ) -> Deferred[HeldLock | None]:
        return self._states.release_lock(key, lock_id, principal, event_detail)

    def get_lock(self, key: StateKey) -> Deferred[HeldLock | None]:
        return self._states.get_lock(key)

    # -- reads: PostgresReads ---------------------------------------------

    def read_current(self, key: StateKey) -> Deferred[bytes | None]:
        return self._reads.read_current(key)

    def read_version(self, key: StateKey, number: int) -> Deferred[bytes | None]:
        return self._reads.read_version(key, number)

    def get_summary(self, key: StateKey) -> Deferred[StateSummary | None]:
        return self._reads.get_summary(key)

    def list_states(self, tenant: str) -> Deferred[list[StateSummary]]:
        return self._reads.list_states(tenant)

    def list_versions(self, key: StateKey) -> Deferred[list[StateVersion]]:
        return self._reads.list_versions(key)

    def get_projection(self, key: StateKey) -> Deferred[Projection | None]:
        return self._reads.get_projection(key)

    def query_resources(self, tenant: str,
                        query: ResourceQuery) -> Deferred[list[ResourceMatch]]:
        return self._reads.query_resources(tenant, query)

    # -- the dashboard: PostgresDashboard ---------------------------------

    def list_states_page(self, tenant: str, query: StateListQuery) -> Deferred[StatePage]:
        return self._dashboard.list_states_page(tenant, query)

    # -- the audit chain: PostgresEvents ----------------------------------

    def list_events(self, tenant: str, state_path: str | None = None,
                    kinds: Iterable[str] | None = None, since: datetime | None = None,
                    until: datetime | None = None) -> Deferred[list[AuditEvent]]:
        return self._events.list_events(tenant, state_path, kinds, since, until)

    def list_events_page(self, tenant: str,
                         query: EventPageQuery) -> Deferred[list[AuditEvent]]:
        return self._event_pages.list_events_page(tenant, query)

    def record_event(self, tenant: str, kind: str, principal: str,
                     state_path: str | None = None,
                     detail: dict[str, Any] | None = None) -> Deferred[AuditEvent]:
        return self._events.record_event(tenant, kind, principal, state_path, detail)

    def chain_head(self, tenant: str) -> Deferred[ChainHead]:
        return self._events.chain_head(tenant)


def postgres_store_from_settings(settings: Any, reactor: Any,
                                 key_provider: IKeyProvider | None = None,
                                 ) -> PostgresStateStore:
    """The store C{twistd kilolock} uses: the database at C{settings.database_url},
    or the embedded PostgreSQL in C{settings.data_dir} when there is no URL;
    versions encrypted with C{key_provider}'s keys when there is one."""
    prepared = getattr(settings, "prepared_statements", "on") == "on"
    if settings.database_url:
        return PostgresStateStore(settings.database_url, reactor, prepared_statements=prepared,
                                  key_provider=key_provider)
    return PostgresStateStore.embedded(EmbeddedPostgres(settings.data_dir), reactor,
                                       prepared_statements=prepared, key_provider=key_provider)
