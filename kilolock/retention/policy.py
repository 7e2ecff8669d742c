"""Retention: which stored versions of a state a policy lets go.  Pure: no
Twisted, no I/O; both stores call L{prunable}, the web layer
L{effective_policy} and L{parse_policy}.

A policy keeps the newest C{versions} stored versions and every version
younger than C{days} days (a version exactly C{days} days old is not
younger).  With both limits set, a version is kept when either keeps it;
with one set, that one decides; with none, every version is kept (the
default: see C{docs/at-rest.md} for why).  Whatever the policy, a state
never loses:

  - its current version (the newest);
  - any version while the state is locked (an operation is in progress: it
    may read, roll back to or diff any version);
  - a version an operation in progress holds
    (L{kilolock.store.interfaces.retention.IRetentionStore.hold_version}:
    a rollback while it runs, a TFE lane's finalised upload, the pending
    operations of the native write side);

A kept version that is a delta against a version the policy lets go is
first re-encoded by the store as a full snapshot (L{rebased} names them):
what a policy lets go is gone, whatever chains of deltas ran through it.

Tombstones (versions already pruned or purged) count for nothing: the
newest C{versions} are counted among versions whose bytes are stored.

The policy of a state is its own override, else its tenant's, else the
server's (C{--retention-versions}, C{--retention-days}).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from attrs import frozen

from kilolock.core.errors import InvalidField, VersionPruned
from kilolock.core.model import rfc3339

__all__ = [
    "KEEP_EVERYTHING",
    "MAX_DAYS",
    "MAX_VERSIONS",
    "Effective",
    "RetentionPolicy",
    "RetentionSetting",
    "VersionFacts",
    "effective_policy",
    "parse_policy",
    "policy_document",
    "prunable",
    "pruned_error",
    "rebased",
]

#: The largest limits a policy may set.
MAX_VERSIONS = 1_000_000
MAX_DAYS = 36_500

#: Where an effective policy comes from.
FROM_STATE = "state"
FROM_TENANT = "tenant"
FROM_SERVER = "server"


@frozen
class RetentionPolicy:
    """Keep the newest C{versions} stored versions and every version younger
    than C{days} days; None is no limit of that kind."""

    versions: int | None = None
    days: int | None = None

    @property
    def keeps_everything(self) -> bool:
        return self.versions is None and self.days is None

    def describe(self) -> str:
        """What the policy keeps, in words (a tombstone's reason quotes it)."""
        parts = []
        if self.versions is not None:
            parts.append(f"the newest {self.versions} version{'s' * (self.versions != 1)}")
        if self.days is not None:
            parts.append(f"versions younger than {self.days} day{'s' * (self.days != 1)}")
        return "keep " + (" and ".join(parts) if parts else "every version")

    def prune_reason(self) -> str:
        """The reason a tombstone left by this policy gives."""
        return f"retention: {self.describe()}"


#: The server's default when no limit is configured.
KEEP_EVERYTHING = RetentionPolicy()


@frozen
class RetentionSetting:
    """An override as it is stored: a tenant's default (C{path} None) or one
    state's, and when it was last set."""

    tenant: str
    path: str | None
    policy: RetentionPolicy
    updated_at: datetime


@frozen
class Effective:
    """A state's policy and where it comes from (L{FROM_STATE},
    L{FROM_TENANT} or L{FROM_SERVER})."""

    policy: RetentionPolicy
    source: str


def effective_policy(server: RetentionPolicy, tenant: RetentionPolicy | None,
                     state: RetentionPolicy | None) -> Effective:
    """The policy that applies: the state's override, else the tenant's,
    else the server's."""
    if state is not None:
        return Effective(state, FROM_STATE)
    if tenant is not None:
        return Effective(tenant, FROM_TENANT)
    return Effective(server, FROM_SERVER)


@frozen
class VersionFacts:
    """What the rule reads of one stored version (never a tombstone):
    C{base} is the number of the version a delta is decoded against (None
    for a full payload)."""

    number: int
    created_at: datetime
    base: int | None = None


def prunable(versions: Sequence[VersionFacts], policy: RetentionPolicy, now: datetime, *,
             locked: bool = False, held: Collection[int] = ()) -> list[int]:
    """The numbers of the stored C{versions} (of one state) that C{policy}
    lets go at C{now}, oldest first.

    @param locked: the state is locked: nothing goes.
    @param held: numbers an operation in progress holds: they stay.
    """
    if policy.keeps_everything or locked or not versions:
        return []
    newest_first = sorted(versions, key=lambda version: version.number, reverse=True)
    keep = {newest_first[0].number, *held}
    for rank, version in enumerate(newest_first):
        if policy.versions is not None and rank < policy.versions:
            keep.add(version.number)
        if policy.days is not None and now - version.created_at < timedelta(days=policy.days):
            keep.add(version.number)
    return sorted(version.number for version in versions if version.number not in keep)


def rebased(versions: Sequence[VersionFacts], pruned: Collection[int]) -> list[int]:
    """The numbers of the C{versions} that stay but are deltas against a
    version in C{pruned}: each must become a full snapshot before its base
    goes.  Oldest first."""
    gone = set(pruned)
    return sorted(version.number for version in versions
                  if version.number not in gone and version.base in gone)


def pruned_error(number: int, pruned_at: datetime | None, reason: str | None) -> VersionPruned:
    """What reading the bytes of a tombstone answers (410)."""
    when = "" if pruned_at is None else f" on {rfc3339(pruned_at)}"
    return VersionPruned(f"version {number} was pruned{when} ({reason or 'no reason given'}):"
                         " only its tombstone is left")


def _limit(document: Mapping[str, Any], name: str, maximum: int) -> int | None:
    if name not in document:
        raise InvalidField(name, f"the field {name!r} is required (a whole number, or null"
                                 " for no limit)")
    value = document[name]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise InvalidField(name, f"{name} must be a whole number from 1 to {maximum}, or null"
                                 " for no limit")
    return value


def parse_policy(document: Any) -> RetentionPolicy:
    """A policy from a JSON request body: C{{"versions": N | null, "days": D |
    null}}, both members required (null: no limit of that kind).

    @raise InvalidField: naming the member at fault.
    """
    if not isinstance(document, dict):
        raise InvalidField("body", "the body must be a JSON object: {\"versions\": N or null,"
                                   " \"days\": D or null}")
    unknown = sorted(set(document) - {"versions", "days"})
    if unknown:
        raise InvalidField(unknown[0], f"unknown field {unknown[0]!r}; expected: days, versions")
    return RetentionPolicy(versions=_limit(document, "versions", MAX_VERSIONS),
                           days=_limit(document, "days", MAX_DAYS))


def policy_document(policy: RetentionPolicy) -> dict[str, Any]:
    """A policy as the APIs show it."""
    return {"versions": policy.versions, "days": policy.days,
            "keepsEverything": policy.keeps_everything, "description": policy.describe()}
