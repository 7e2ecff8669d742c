"""The rules of a paged state listing (L{kilolock.core.model.StateListQuery}),
for every store.

Pure functions: the memory store filters, sorts and pages with them; the
PostgreSQL store says the same in SQL (L{ASCII_UPPER}/L{ASCII_LOWER} for
the name filter, the C{NULLS FIRST}/C{LAST} rule of L{sort_value}), and the
contract tests pin that both agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from attrs import frozen

from kilolock.core.errors import BadRequest
from kilolock.core.events import AuditEvent
from kilolock.core.model import StateSummary

#: What a state listing can be sorted by (L{StateListQuery.sort}).
STATE_SORTS = ("name", "updated", "serial", "resources", "size", "locked")
#: What a listing can keep by its lock (L{StateListQuery.lock}): states
#: locked, not locked, or whose lock is stale (L{kilolock.rules.stale}).
LOCK_FILTERS = ("locked", "unlocked", "stale")


@frozen
class StateListQuery:
    """One page of a tenant's states: those whose path contains
    C{name_contains} (case-insensitive) and starts with C{path_prefix} (a
    scoped token's C{ws/env/}), sorted by C{sort} (one of L{STATE_SORTS};
    ties by path), C{limit} of them from C{offset}."""

    name_contains: str | None = None
    path_prefix: str | None = None
    sort: str = "name"
    descending: bool = False
    offset: int = 0
    limit: int = 50
    #: Only states whose TFE workspace has this tag: C{KEY} (any value) or
    #: C{KEY=VALUE}.
    tag: str | None = None
    #: Only states locked, not locked, or with a stale lock (L{LOCK_FILTERS}).
    lock: str | None = None
    #: With C{lock="stale"}: a lock taken before this moment is stale.
    stale_before: datetime | None = None
    #: Only states not written since this moment.
    unchanged_before: datetime | None = None


@frozen
class StateListing:
    """A state of a listing page, with the event that wrote its current
    version (None when no version, or the event is gone with the chain's
    earlier states)."""

    summary: StateSummary
    last_write: AuditEvent | None = None
    #: Its TFE workspace's tags, (key, value) pairs (value empty for a
    #: plain tag), in the workspace's order.
    tags: tuple[tuple[str, str], ...] = ()


@frozen
class StatePage:
    """A page of states and how many match the query in all."""

    listings: tuple[StateListing, ...]
    total: int


#: The largest page a listing may ask for.
MAX_PAGE = 1000

#: The name filter ignores the case of ASCII letters only (the same in every
#: store, whatever the database's collation).
ASCII_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
ASCII_LOWER = ASCII_UPPER.lower()
_FOLD = str.maketrans(ASCII_UPPER, ASCII_LOWER)


def fold(text: str) -> str:
    """C{text} with its ASCII letters in lower case."""
    return text.translate(_FOLD)


def check_listing(query: StateListQuery) -> None:
    """@raise BadRequest: an unknown sort, a negative offset or a page size
    outside 1..L{MAX_PAGE}."""
    if query.sort not in STATE_SORTS:
        raise BadRequest(f"sort must be one of {', '.join(STATE_SORTS)}")
    if query.offset < 0:
        raise BadRequest("offset must not be negative")
    if not 1 <= query.limit <= MAX_PAGE:
        raise BadRequest(f"limit must be between 1 and {MAX_PAGE}")
    if query.lock is not None and query.lock not in LOCK_FILTERS:
        raise BadRequest(f"lock must be one of {', '.join(LOCK_FILTERS)}")
    if query.lock == "stale" and query.stale_before is None:
        raise BadRequest("a stale-lock filter needs the moment locks turn stale")
    if query.tag is not None and not query.tag.partition("=")[0]:
        raise BadRequest("a tag filter is KEY or KEY=VALUE")


def tag_parts(tag: str) -> tuple[str, str | None]:
    """A tag filter's key, and its value (None: any value)."""
    key, separator, value = tag.partition("=")
    return key, value if separator else None


def passes_filters(summary: StateSummary, tags: Iterable[tuple[str, str]],
         query: StateListQuery) -> bool:
    """Whether a listed state passes C{query}'s tag, lock and change filters."""
    lock = summary.lock
    if query.lock == "locked" and lock is None:
        return False
    if query.lock == "unlocked" and lock is not None:
        return False
    if query.lock == "stale" and (lock is None or query.stale_before is None
                                  or not lock.acquired_at < query.stale_before):
        return False
    if query.unchanged_before is not None and not summary.updated_at < query.unchanged_before:
        return False
    if query.tag is not None:
        key, value = tag_parts(query.tag)
        return any(name == key and (value is None or found == value) for name, found in tags)
    return True


def listed(path: str, query: StateListQuery) -> bool:
    """Whether the state at C{path} is in the listing C{query} asks for."""
    if query.path_prefix is not None and not path.startswith(query.path_prefix):
        return False
    return not query.name_contains or fold(query.name_contains) in fold(path)


def sort_value(summary: StateSummary, sort: str) -> Any:
    """What C{summary} sorts by.  A state without the value (no version, no
    lock) sorts before every state with it: first ascending, last
    descending."""
    current = summary.current
    value: Any
    if sort == "updated":
        value = summary.updated_at
    elif sort == "serial":
        value = None if current is None else current.serial
    elif sort == "resources":
        value = None if current is None else summary.resource_count
    elif sort == "size":
        value = None if current is None else current.size
    elif sort == "locked":
        value = None if summary.lock is None else summary.lock.acquired_at
    else:
        return summary.key.path.encode("utf-8")  # code point order, as SQL's "C"
    return (0,) if value is None else (1, value)


def sort_and_page(summaries: Iterable[StateSummary],
                  query: StateListQuery) -> tuple[list[StateSummary], int]:
    """The page C{query} asks for out of the listed C{summaries}, and how
    many there are in all.  Ties sort by path, ascending either way."""
    by_path = sorted(summaries, key=lambda summary: summary.key.path.encode("utf-8"))
    if query.sort == "name":
        ordered = by_path[::-1] if query.descending else by_path
    else:
        ordered = sorted(by_path, key=lambda summary: sort_value(summary, query.sort),
                         reverse=query.descending)
    return ordered[query.offset:query.offset + query.limit], len(ordered)


def writer_of(summary: StateSummary, events: Iterable[AuditEvent]) -> AuditEvent | None:
    """The event that wrote C{summary}'s current version: the latest of
    C{events} (the state's, in chain order) with the version's SHA-256."""
    current = summary.current
    if current is None:
        return None
    found = None
    for event in events:
        if event.sha256 == current.sha256:
            found = event
    return found
