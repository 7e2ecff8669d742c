"""The dashboard's audit trail with a long chain (memory store, task.Clock):
pages of 100 chosen by the store around a cursor (the page never reads the
whole chain), links that keep the filters, the verification as its own
page (verified, or the first broken link), bad cursors, and the scope of a
CI identity checked page by page."""

from __future__ import annotations

import re
from typing import Any

import pytest
import pytest_twisted
from attrs import evolve

from kilolock.core.model import DEFAULT_TENANT, Principal
from kilolock.store.memory.store import MemoryStateStore
from kilolock.web.ui.audit_page import EVENT_PAGE, MAX_WINDOWS, event_window
from tests.support.ui_support import DashboardSite

EVENTS = 2_500
_SEQ_CELL = re.compile(rb'<td class="num"[^>]*>(\d+)</td>')
_LINK = re.compile(rb'<a (?:rel="(?:prev|next)" )?href="([^"]+)"[^>]*>([A-Za-z ]+ events)</a>')


def seqs(body: bytes) -> list[int]:
    return [int(seq) for seq in _SEQ_CELL.findall(body)]


def links(body: bytes) -> dict[str, str]:
    """The pager's links by their text."""
    found = {}
    for href, label in _LINK.findall(body):
        found[label.decode()] = href.decode().replace("&amp;", "&")
    return found


def seeded(count: int = EVENTS) -> DashboardSite:
    """The open dashboard over a store holding C{count} events, every tenth
    a force release by alice, the others writes by ci."""
    site = DashboardSite()
    for index in range(count):
        if index % 10 == 9:
            site.store.record_event(DEFAULT_TENANT, "lock_force_release", "token:alice",
                                    f"s{index % 7}", {"via": "dashboard"})
        else:
            site.store.record_event(DEFAULT_TENANT, "state_write", "token:ci",
                                    f"s{index % 7}", {"client": "10.0.0.7"})
    return site


def never_the_whole_chain(store: MemoryStateStore) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the audit page read the whole chain")
    store.list_events = refuse  # type: ignore[method-assign]


def test_pages_of_a_long_chain_come_from_the_store_around_a_cursor() -> None:
    """The newest 100 first, with the chain head and a link to verify;
    "Older events" goes below the last row, "Newer events" back above the
    first; the oldest page has no older link; the whole chain is never read."""
    site = seeded()
    never_the_whole_chain(site.store)
    browser = site.browser()
    first = browser.get("/ui/audit")
    assert first.status == 200
    assert seqs(first.body) == list(range(EVENTS, EVENTS - EVENT_PAGE, -1))
    assert b"the tenant's chain has 2500 events" in first.body
    assert b'href="/ui/audit/verify"' in first.body
    assert links(first.body) == {"Older events": "/ui/audit?before=2401"}
    second = browser.get(links(first.body)["Older events"])
    assert seqs(second.body) == list(range(2400, 2300, -1))
    assert links(second.body) == {"Newest events": "/ui/audit",
                                  "Newer events": "/ui/audit?after=2400",
                                  "Older events": "/ui/audit?before=2301"}
    back = browser.get(links(second.body)["Newer events"])
    assert seqs(back.body) == seqs(first.body)
    last = browser.get("/ui/audit?before=101")
    assert seqs(last.body) == list(range(100, 0, -1))
    assert "Older events" not in links(last.body)


def test_filters_are_applied_by_the_store_and_kept_in_the_links() -> None:
    """Kind, state and author filter the page; the pager's links keep them."""
    site = seeded()
    never_the_whole_chain(site.store)
    browser = site.browser()
    page = browser.get("/ui/audit?kind=lock_force_release&by=alice")
    shown = seqs(page.body)
    # Every tenth event is alice's force release, of the state s{index % 7}.
    everything = [index + 1 for index in range(EVENTS) if index % 10 == 9][::-1]
    assert shown == everything[:EVENT_PAGE] and len(everything) > EVENT_PAGE
    older = links(page.body)["Older events"]
    assert older == f"/ui/audit?kind=lock_force_release&by=alice&before={shown[-1]}"
    assert seqs(browser.get(older).body) == everything[EVENT_PAGE:2 * EVENT_PAGE]
    of_s3 = browser.get("/ui/audit?kind=lock_force_release&state=s3")
    assert seqs(of_s3.body) == [seq for seq in everything if (seq - 1) % 7 == 3]
    assert links(of_s3.body) == {}
    assert seqs(browser.get("/ui/audit?by=nobody").body) == []


def test_verification_is_its_own_page_and_names_the_first_broken_link() -> None:
    """/ui/audit/verify checks every event against the recorded head:
    verified; after an event is altered in the store, broken at its seq."""
    site = seeded(300)
    browser = site.browser()
    verified = browser.get("/ui/audit/verify")
    assert verified.status == 200
    assert b"Chain verified: " in verified.body
    assert b"all 300 events of the tenant link up" in verified.body
    chain = site.store._events[DEFAULT_TENANT]
    chain[141] = evolve(chain[141], principal="token:mallory")
    broken = browser.get("/ui/audit/verify")
    assert b"Chain broken: " in broken.body
    assert b"the first broken link is event seq 142" in broken.body
    assert b'role="alert"' in broken.body


@pytest.mark.parametrize("query", ["before=0", "before=x", "after=-1",
                                   "before=5&after=2", "before=99999999999"])
def test_a_bad_cursor_is_a_400_page(query: str) -> None:
    reply = seeded(5).browser().get(f"/ui/audit?{query}")
    assert reply.status == 400
    assert b"<html" in reply.body


class Grants:
    """A CI identity's grants that let it read the states in C{paths}."""

    def __init__(self, paths: set[str]) -> None:
        self.paths = paths

    def allows(self, path: str, need: Any) -> bool:
        return path in self.paths


@pytest_twisted.ensureDeferred
async def test_a_ci_identitys_scope_is_checked_window_by_window() -> None:
    """The store cannot filter by a CI identity's grants: the page reads
    windows until it has a page; past MAX_WINDOWS windows it shows what it
    found and the older link goes on from the last event read."""
    store = MemoryStateStore()
    for index in range(3_000):
        store.record_event(DEFAULT_TENANT, "state_write", "token:ci",
                           "granted" if index % 50 == 0 else "other", {})
    principal = Principal(DEFAULT_TENANT, "oidc:ci", oidc=Grants({"granted"}))  # type: ignore[arg-type]
    filters = {"kind": "", "state": "", "by": ""}
    window = await event_window(store, principal, filters, None, None)
    read = MAX_WINDOWS * (EVENT_PAGE + 1)
    assert [event.seq for event in window.events] == [
        seq for seq in range(3_000, 3_000 - read, -1) if (seq - 1) % 50 == 0]
    assert window.older == 3_000 - read + 1 and window.newer is None
    granted: list[int] = [event.seq for event in window.events]
    while window.older is not None:
        window = await event_window(store, principal, filters, window.older, None)
        granted += [event.seq for event in window.events]
    assert granted == [seq for seq in range(3_000, 0, -1) if (seq - 1) % 50 == 0]
