"""A real, complete in-memory L{IStateStore}: dicts in one process.

Used by tests and by C{--store memory} (integration tests of Terraform
modules).  Each public method runs synchronously and returns an already-fired
Deferred, so every operation is atomic exactly as a database transaction is.
L{kilolock.rules.locks} decides the lock matrix and the serial rule; the
hosted half (L{ITenantStore}) is L{kilolock.store.memory.tenants.MemoryTenants}.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from attrs import define, evolve, field, frozen
from twisted.internet.defer import Deferred, fail, maybeDeferred, succeed
from twisted.python.components import proxyForInterface
from zope.interface import implementer

from kilolock.core.audit import (
    GENESIS,
    GENESIS_HEAD,
    ChainHead,
    delete_detail,
    event_hash,
    lock_detail,
    release_detail,
    unchained_event,
    write_detail,
)
from kilolock.core.errors import StateNotFound
from kilolock.core.events import LOCK_ACQUIRE, STATE_DELETE, STATE_WRITE, AuditEvent
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
    UiSession,
    WriteOutcome,
    utcnow,
)
from kilolock.retention.policy import pruned_error
from kilolock.rules import locks
from kilolock.rules.event_pages import EventPageQuery, event_matches, in_window
from kilolock.rules.listing import (
    StateListing,
    StateListQuery,
    StatePage,
    check_listing,
    listed,
    passes_filters,
    sort_and_page,
    writer_of,
)
from kilolock.rules.locks import Replay, holder_of
from kilolock.rules.resources import (
    ResourceMatch,
    ResourceQuery,
    check_query,
    row_matches,
    state_matches,
)
from kilolock.stateops.model import StateWrite, version_appeared
from kilolock.store.interfaces.oidc import IOidcPolicyStore
from kilolock.store.interfaces.retention import IRetentionStore
from kilolock.store.interfaces.sessions import ISessionStore
from kilolock.store.interfaces.stateops import IStateOperationsStore
from kilolock.store.interfaces.states import IStateStore
from kilolock.store.interfaces.tenants import ITenantStore
from kilolock.store.interfaces.tfe import ITFEStore
from kilolock.store.memory.oidc import MemoryOidcPolicies
from kilolock.store.memory.retention import MemoryRetention
from kilolock.store.memory.stateops import MemoryStateOps
from kilolock.store.memory.states import StoredState, StoredVersion
from kilolock.store.memory.tenants import MemoryTenants
from kilolock.store.memory.tfe import MemoryTFE


@frozen
class _StagedWrite:
    """A checked write not stored yet: its version (None: a replay of C{meta})."""

    key: StateKey
    lock_id: str | None
    meta: StateVersion
    version: StoredVersion | None


@implementer(IStateStore, ITenantStore, ISessionStore, IOidcPolicyStore, ITFEStore,
             IRetentionStore, IStateOperationsStore)
@define
class MemoryStateStore(proxyForInterface(ITenantStore, "tenants"),  # type: ignore[misc]
                       proxyForInterface(IOidcPolicyStore, "oidc_policies"),  # type: ignore[misc]
                       proxyForInterface(ITFEStore, "tfe"),  # type: ignore[misc]
                       proxyForInterface(IRetentionStore, "retention"),  # type: ignore[misc]
                       proxyForInterface(IStateOperationsStore, "stateops")):  # type: ignore[misc]
    """Every state, version, lock and event of every tenant, in dicts.

    L{ITenantStore} is forwarded to L{tenants}, L{IOidcPolicyStore} to
    L{oidc_policies}, L{ITFEStore} to L{tfe}, L{IRetentionStore} to
    L{retention} and L{IStateOperationsStore} to L{stateops} but for
    L{write_states} (Twisted's C{proxyForInterface}: mypy cannot follow a
    base class made at run time), which share the states and the audit
    chain.
    Versions are kept as raw bytes, unencrypted.
    """

    clock: Callable[[], datetime] = utcnow
    _states: dict[StateKey, StoredState] = field(factory=dict, init=False)
    _events: dict[str, list[AuditEvent]] = field(factory=dict, init=False)
    #: Each tenant's chain head, kept apart from its events (a test that
    #: drops the newest events from the chain leaves it behind).
    _heads: dict[str, ChainHead] = field(factory=dict, init=False)
    _sessions: dict[str, UiSession] = field(factory=dict, init=False)
    tenants: MemoryTenants = field(init=False)
    oidc_policies: MemoryOidcPolicies = field(init=False)
    tfe: MemoryTFE = field(init=False)
    retention: MemoryRetention = field(init=False)
    stateops: MemoryStateOps = field(init=False)

    @tenants.default
    def _tenants_sharing_this_store(self) -> MemoryTenants:
        return MemoryTenants(self._states, self._append_event, self.clock)

    @oidc_policies.default
    def _policies_of_the_tenants(self) -> MemoryOidcPolicies:
        return MemoryOidcPolicies(self.tenants, self._append_event, self.clock)

    @tfe.default
    def _tfe_sharing_this_store(self) -> MemoryTFE:
        return MemoryTFE(self._states, self._append_event, self.clock)

    @retention.default
    def _retention_sharing_this_store(self) -> MemoryRetention:
        return MemoryRetention(self._states, self._append_event, self.clock,
                               self.tfe.held_versions)
    @stateops.default
    def _stateops_sharing_this_store(self) -> MemoryStateOps:
        return MemoryStateOps(self._states, self.clock)

    def start(self) -> Deferred[None]:
        return succeed(None)

    def stop(self) -> Deferred[None]:
        return succeed(None)

    def probe(self) -> Deferred[StoreProbe]:
        return succeed(StoreProbe(reachable=True, message="in-memory store"))

    def reset(self) -> None:
        """Forget everything (used between tests of Terraform modules)."""
        self._states.clear()
        self._events.clear()
        self._heads.clear()
        self._sessions.clear()
        self.tenants.forget()
        self.oidc_policies.forget()
        self.tfe.forget()
        self.retention.forget()
        self.stateops.forget()

    # -- the state lane -------------------------------------------------

    def read_current(self, key: StateKey) -> Deferred[bytes | None]:
        def read() -> bytes | None:
            state = self._states.get(key)
            current = state.current if state else None
            return current.raw if current else None

        return maybeDeferred(read)

    def write_state(self, key: StateKey, upload: StateUpload, lock_id: str | None,
                    principal: Principal, event_kind: str = STATE_WRITE,
                    event_detail: Mapping[str, Any] | None = None) -> Deferred[WriteOutcome]:
        def write() -> WriteOutcome:
            staged = self._stage_write(key, upload, lock_id, principal)
            return self._commit_write(staged, principal, event_kind, event_detail)

        return maybeDeferred(write)

    def write_states(self, writes: Sequence[StateWrite], principal: Principal,
                     event_kind: str = STATE_WRITE) -> Deferred[list[WriteOutcome]]:
        """Every write is checked and its version prepared before any is
        stored: a refusal (or any failure) of one stores none."""
        def write() -> list[WriteOutcome]:
            if len({w.key for w in writes}) != len(writes):
                raise ValueError("each state may be written once in a write of several")
            staged = [self._stage_write(w.key, w.upload, w.lock_id, principal,
                                        first_version=w.first_version)
                      for w in writes]
            return [self._commit_write(one, principal, event_kind, w.event_detail)
                    for one, w in zip(staged, writes, strict=True)]

        return maybeDeferred(write)

    def _stage_write(self, key: StateKey, upload: StateUpload, lock_id: str | None,
                     principal: Principal, first_version: bool = False) -> _StagedWrite:
        """Check a write against the lock matrix and the serial rule (and,
        with C{first_version}, the state having no version), and prepare its
        version; nothing is changed yet."""
        state = self._states.get(key)
        locks.check_write(lock_id, holder_of(state.lock if state else None))
        if first_version and state is not None and state.current is not None:
            raise version_appeared(key)
        if state is None:
            self.tenants.check_state_owner(key)
        replayed = state.written.get((upload.parsed.serial, upload.sha256)) if state else None
        current = state.current if state else None
        decision = locks.decide_upload(
            upload.parsed.serial, upload.sha256, () if replayed is None else (replayed,),
            None if current is None else current.meta)
        if isinstance(decision, Replay):
            return _StagedWrite(key, lock_id, decision.version, None)
        meta = StateVersion.of_upload(upload, decision.number, self.clock(), principal.name)
        return _StagedWrite(key, lock_id, meta,
                            self._prepare_version(meta, upload))

    def _prepare_version(self, meta: StateVersion, upload: StateUpload) -> StoredVersion:
        return StoredVersion(meta, upload.raw, upload.parsed.projection)

    def _commit_write(self, staged: _StagedWrite, principal: Principal, event_kind: str,
                      event_detail: Mapping[str, Any] | None) -> WriteOutcome:
        """Store a staged version (nothing for a replay) and its event."""
        meta, stored = staged.meta, staged.version
        if stored is None:
            return WriteOutcome(version=meta, created=False)
        key, now = staged.key, meta.created_at
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = StoredState(created_at=now, updated_at=now)
        current = state.current
        if current is not None:
            # Only the current version's projection is ever read: drop
            # the older one (thousands of row objects per state would
            # otherwise make every full garbage collection slower).
            current.projection = None
        state.versions.append(stored)
        state.written[(meta.serial, meta.sha256)] = meta
        state.updated_at = now
        self._append_event(key.tenant, event_kind, principal.name, key.path, now,
                           lock_id=staged.lock_id, serial=meta.serial, sha256=meta.sha256,
                           detail={**write_detail(meta.number, meta.size, principal),
                                   **(event_detail or {})})
        return WriteOutcome(version=meta, created=True)

    def delete_state(self, key: StateKey, lock_id: str | None,
                     principal: Principal) -> Deferred[None]:
        def delete() -> None:
            state = self._states.get(key)
            if state is None:
                raise StateNotFound("no such state")
            locks.check_write(lock_id, holder_of(state.lock))
            del self._states[key]
            self._append_event(key.tenant, STATE_DELETE, principal.name, key.path,
                               self.clock(), lock_id=lock_id,
                               detail=delete_detail(len(state.versions), principal))

        return maybeDeferred(delete)

    def acquire_lock(self, key: StateKey, info: LockInfo,
                     principal: Principal) -> Deferred[bool]:
        def acquire() -> bool:
            return bool(self._acquire(key, info, principal, create=True))

        return maybeDeferred(acquire)

    def acquire_lock_if_exists(self, key: StateKey, info: LockInfo,
                               principal: Principal) -> Deferred[bool | None]:
        return maybeDeferred(self._acquire, key, info, principal, create=False)

    def _acquire(self, key: StateKey, info: LockInfo, principal: Principal,
                 create: bool) -> bool | None:
        """Lock C{key} (see L{acquire_lock}); a missing state is created
        first when C{create}, else nothing changes (None)."""
        now = self.clock()
        state = self._states.get(key)
        if state is None:
            if not create:
                return None
            self.tenants.check_state_owner(key)
            state = self._states[key] = StoredState(created_at=now, updated_at=now)
        if not locks.decide_lock(info.id, holder_of(state.lock)):
            return False
        state.lock = HeldLock(info=info, acquired_at=now, principal=principal.name,
                              token_digest=principal.oidc_token_digest)
        self._append_event(key.tenant, LOCK_ACQUIRE, principal.name, key.path, now,
                           lock_id=info.id, detail=lock_detail(info, principal))
        return True

    def release_lock(self, key: StateKey, lock_id: str | None, principal: Principal,
                     event_detail: Mapping[str, Any] | None = None,
                     ) -> Deferred[HeldLock | None]:
        def release() -> HeldLock | None:
            state = self._states.get(key)
            held = state.lock if state else None
            decision = locks.decide_unlock(lock_id, holder_of(held))
            if decision is locks.Release.NOTHING:
                return None
            assert state is not None and held is not None
            state.lock = None
            self._append_event(key.tenant, decision.event_kind, principal.name, key.path,
                               self.clock(), lock_id=held.info.id,
                               detail={**release_detail(decision.event_kind, held.info,
                                                        principal),
                                       **(event_detail or {})})
            return held

        return maybeDeferred(release)

    def get_lock(self, key: StateKey) -> Deferred[HeldLock | None]:
        state = self._states.get(key)
        return succeed(state.lock if state else None)

    # -- inspection -----------------------------------------------------

    def get_summary(self, key: StateKey) -> Deferred[StateSummary | None]:
        state = self._states.get(key)
        return succeed(self._summary(key, state) if state else None)

    def list_states(self, tenant: str) -> Deferred[list[StateSummary]]:
        return succeed([
            self._summary(key, state)
            for key, state in sorted(self._states.items(), key=lambda item: item[0].path)
            if key.tenant == tenant
        ])

    def list_states_page(self, tenant: str, query: StateListQuery) -> Deferred[StatePage]:
        def select() -> StatePage:
            check_listing(query)
            summaries = (self._summary(key, state) for key, state in self._states.items()
                         if key.tenant == tenant and listed(key.path, query))
            page, total = sort_and_page(
                (summary for summary in summaries
                 if passes_filters(summary, self.tfe.tags_of(summary.key), query)), query)
            paths = {summary.key.path for summary in page}
            events: dict[str | None, list[AuditEvent]] = {}
            for event in self._events.get(tenant, []):
                if event.state_path in paths and event.sha256 is not None:
                    events.setdefault(event.state_path, []).append(event)
            return StatePage(tuple(
                StateListing(summary, writer_of(summary, events.get(summary.key.path, ())),
                             self.tfe.tags_of(summary.key))
                for summary in page), total)

        return maybeDeferred(select)

    def list_versions(self, key: StateKey) -> Deferred[list[StateVersion]]:
        state = self._states.get(key)
        return succeed([stored.meta for stored in state.versions] if state else [])

    def read_version(self, key: StateKey, number: int) -> Deferred[bytes | None]:
        state = self._states.get(key)
        for stored in state.versions if state else ():
            if stored.meta.number == number:
                if stored.raw is None:
                    meta = stored.meta
                    return fail(pruned_error(number, meta.pruned_at, meta.prune_reason))
                return succeed(stored.raw)
        return succeed(None)

    def get_projection(self, key: StateKey) -> Deferred[Projection | None]:
        state = self._states.get(key)
        current = state.current if state else None
        return succeed(current.projection if current else None)

    def query_resources(self, tenant: str,
                        query: ResourceQuery) -> Deferred[list[ResourceMatch]]:
        def select() -> list[ResourceMatch]:
            check_query(query)
            found: list[ResourceMatch] = []
            for key, state in sorted(self._states.items(), key=lambda item: item[0].path):
                current = state.current
                if (key.tenant != tenant or current is None or current.projection is None
                        or not state_matches(key.path, query)):
                    continue
                for row in current.projection.resources:
                    if row_matches(row, query):
                        found.append(ResourceMatch(key.path, current.meta.number, row))
                        if len(found) >= query.limit:
                            return found
            return found

        return maybeDeferred(select)

    def list_events(self, tenant: str, state_path: str | None = None,
                    kinds: Iterable[str] | None = None, since: datetime | None = None,
                    until: datetime | None = None) -> Deferred[list[AuditEvent]]:
        wanted = set(kinds) if kinds is not None else None
        return succeed([
            event for event in self._events.get(tenant, [])
            if (state_path is None or event.state_path == state_path)
            and (wanted is None or event.kind in wanted)
            and (since is None or event.at >= since)
            and (until is None or event.at < until)
        ])

    def list_events_page(self, tenant: str,
                         query: EventPageQuery) -> Deferred[list[AuditEvent]]:
        chain = self._events.get(tenant, [])
        if query.ascending:
            start = bisect_right(chain, query.after or 0, key=_seq)
            candidates: Iterable[AuditEvent] = (chain[index] for index in
                                                range(start, len(chain)))
        else:
            end = len(chain) if query.before is None else bisect_left(
                chain, query.before, key=_seq)
            candidates = (chain[index] for index in range(end - 1, -1, -1))
        found = []
        for event in candidates:
            if not in_window(query, event.seq):
                break
            if event_matches(query, event):
                found.append(event)
                if len(found) == query.limit:
                    break
        return succeed(found)

    def record_event(self, tenant: str, kind: str, principal: str,
                     state_path: str | None = None,
                     detail: dict[str, Any] | None = None) -> Deferred[AuditEvent]:
        return succeed(self._append_event(tenant, kind, principal, state_path, self.clock(),
                                          detail=detail or {}))

    def chain_head(self, tenant: str) -> Deferred[ChainHead]:
        return succeed(self._heads.get(tenant, GENESIS_HEAD))

    # -- the dashboard's sessions ----------------------------------------

    def create_session(self, session: UiSession) -> Deferred[None]:
        for id_hash, kept in list(self._sessions.items()):
            if kept.expires_at <= session.created_at:
                del self._sessions[id_hash]
        self._sessions[session.id_hash] = session
        return succeed(None)

    def find_session(self, id_hash: str, now: datetime) -> Deferred[UiSession | None]:
        session = self._sessions.get(id_hash)
        if session is not None and session.expires_at <= now:
            del self._sessions[id_hash]
            session = None
        return succeed(session)

    def delete_session(self, id_hash: str) -> Deferred[None]:
        self._sessions.pop(id_hash, None)
        return succeed(None)

    # -- private --------------------------------------------------------

    def _summary(self, key: StateKey, state: StoredState) -> StateSummary:
        current = state.current
        resources = current.projection.resources if current and current.projection else ()
        return StateSummary(
            key=key,
            current=current.meta if current else None,
            version_count=len(state.versions),
            resource_count=len(resources),
            lock=state.lock,
            updated_at=state.updated_at,
        )

    def _append_event(self, tenant: str, kind: str, principal: str, state_path: str | None,
                      at: datetime, *, lock_id: str | None = None, serial: int | None = None,
                      sha256: str | None = None,
                      detail: dict[str, Any] | None = None) -> AuditEvent:
        chain = self._events.setdefault(tenant, [])
        event = evolve(
            unchained_event(tenant, kind, principal, state_path, at, lock_id=lock_id,
                            serial=serial, sha256=sha256, detail=detail),
            seq=len(chain) + 1,
            prev_hash=chain[-1].hash if chain else GENESIS,
        )
        event = evolve(event, hash=event_hash(event))
        chain.append(event)
        self._heads[tenant] = ChainHead(event.seq, event.hash)
        return event


def _seq(event: AuditEvent) -> int:
    return event.seq
