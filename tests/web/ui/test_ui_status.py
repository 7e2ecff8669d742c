"""Calm, truthful status: a held lock is work going on (said in the lock
column, not an alarm); a stale lock stands out; "not locked" is said once;
tags on the states page; filters by tag, lock and last change; counts with
their plural forms right; the graph's nodes lead to the resources' pages."""

from __future__ import annotations

import json
import re

import pytest

from kilolock.rules.stale import STALE_LOCK_AFTER
from tests.support.stub_client import lock_body, state_body
from tests.support.ui_support import DashboardSite
from tests.web.ui.test_ui_resource_pages import state, text_of


def tag_workspace(site: DashboardSite, name: str, *tags: str) -> None:
    """A TFE workspace (a state to be) with tags (key or key=value)."""
    document = {"data": {"type": "workspaces", "attributes": {"name": name},
                         "relationships": {"tag-bindings": {"data": [
                             {"type": "tag-bindings", "attributes": {
                                 "key": tag.partition("=")[0],
                                 "value": tag.partition("=")[2]}} for tag in tags]}}}}
    reply = site.api("POST", "/api/v2/organizations/default/workspaces",
                     json.dumps(document).encode(),
                     {"Content-Type": "application/vnd.api+json",
                      "Authorization": "Bearer open"})
    assert reply.status == 201, reply


def rows(body: bytes) -> dict[str, str]:
    """Each row of the states table by the state's name, as text."""
    found = re.findall(rb'<tr( class="[^"]*")?><th scope="row" data-label="State">(.*?)</tr>',
                       body, flags=re.DOTALL)
    table = {}
    for _, row in found:
        text = text_of(b"<x>" + row)
        table[text.split()[0]] = text
    return table


def seeded() -> DashboardSite:
    """Four states: network (tagged network and team=ops, locked now),
    billing (team=finance, locked two hours ago), dns (written 40 days
    ago), app (untagged)."""
    site = DashboardSite()
    site.api("POST", "/v1/states/dns", state_body(1))
    site.clock.advance(40 * 86400)
    tag_workspace(site, "network", "network", "team=ops")
    tag_workspace(site, "billing", "team=finance")
    for name in ("network", "billing", "app"):
        site.api("POST", f"/v1/states/{name}", state_body(1))
    site.api("LOCK", "/v1/states/billing", lock_body("L-old", who="ci@crashed"))
    site.clock.advance(STALE_LOCK_AFTER.total_seconds() + 3600)
    site.api("LOCK", "/v1/states/network", lock_body("L-new", who="ci@runner-7"))
    site.clock.advance(60)
    return site


def test_a_held_lock_is_calm_and_a_stale_one_stands_out() -> None:
    """The lock column says "not locked" once for a free state (no "ready",
    no condition list); a fresh lock is a neutral badge with its age and
    holder; a lock older than the stale threshold is a stale badge on a
    marked row."""
    site = seeded()
    page = site.browser().get("/ui/")
    assert page.status == 200
    table = rows(page.body)
    assert table["app"].count("not locked") == 1
    assert "ready" not in page.body.decode().lower().replace("already", "")
    assert "Locked:" not in text_of(page.body)
    assert "locked · 1 min ci@runner-7" in table["network"]
    assert "stale lock · 2 h 1 min ci@crashed" in table["billing"]
    assert page.body.count(b'<tr class="stale">') == 1
    assert b'class="badge stale"' in page.body and b'class="badge locked"' in page.body


def test_a_state_page_says_a_lock_is_work_or_stale() -> None:
    """A state's page: a fresh lock is a status ("a run is working on
    it"); a stale one an alert with its age."""
    site = seeded()
    fresh = text_of(site.browser().get("/ui/states/network").body)
    assert "a run is working on it" in fresh and "Stale" not in fresh
    stale = site.browser().get("/ui/states/billing").body
    assert b'role="alert"' in stale
    assert "Stale lock: held for 2 h 1 min by ci@crashed" in text_of(stale)
    free = text_of(site.browser().get("/ui/states/app").body)
    assert free.count("Not locked.") == 1


def test_tags_are_shown_and_filter_the_states() -> None:
    """The tags column shows key and key=value chips, each a link to the
    states with that tag; ?tag= filters by a key or by key=value; the state
    page lists its tags too."""
    site = seeded()
    table = rows(site.browser().get("/ui/").body)
    assert "network team=ops" in table["network"] and "team=finance" in table["billing"]
    body = site.browser().get("/ui/").body.decode()
    assert 'href="/ui/?tag=team%3Dops"' in body
    assert list(rows(site.browser().get("/ui/?tag=team").body)) == ["billing", "network"]
    assert list(rows(site.browser().get("/ui/?tag=team%3Dops").body)) == ["network"]
    assert "1 state (tagged team=ops)." in text_of(site.browser().get("/ui/?tag=team=ops").body)
    assert "Tags network team=ops" in text_of(site.browser().get("/ui/states/network").body)


@pytest.mark.parametrize(("query", "states"), [
    ("lock=locked", ["billing", "network"]),
    ("lock=unlocked", ["app", "dns"]),
    ("lock=stale", ["billing"]),
    ("unchanged=30", ["dns"]),
    ("unchanged=30&lock=locked", []),
    ("lock=locked&tag=network", ["network"]),
])
def test_filters_by_lock_and_last_change(query: str, states: list[str]) -> None:
    """Lock: locked, not locked, stale; last change: not written for the
    chosen time; filters combine."""
    site = seeded()
    assert list(rows(site.browser().get(f"/ui/?{query}").body)) == states


def test_counts_have_their_plural_forms() -> None:
    """"1 state", "2 states", "1 resource instance"."""
    site = seeded()
    assert "1 state (stale lock)." in text_of(site.browser().get("/ui/?lock=stale").body)
    assert "2 states (locked)." in text_of(site.browser().get("/ui/?lock=locked").body)
    assert "4 states." in text_of(site.browser().get("/ui/").body)
    site.api("POST", "/v1/states/one", state_body(1, resources=[{
        "mode": "managed", "type": "terraform_data", "name": "only",
        "provider": 'provider["terraform.io/builtin/terraform"]',
        "instances": [{"schema_version": 0, "attributes": {"id": "1"}}]}]))
    assert "1 of 1 resource instance." in text_of(site.browser().get("/ui/states/one").body)


@pytest.mark.parametrize(("query", "says"), [
    ("lock=jammed", "lock must be one of"),
    ("unchanged=3", "unchanged must be one of"),
    ("tag=%3Dops", "tag must be KEY or KEY=VALUE"),
    ("tag=" + "t" * 600, "tag must be KEY or KEY=VALUE"),
    ("q=" + "q" * 2000, "q is longer than 1024"),
    ("per=7", "per must be one of"),
    ("page=0", "page must be a whole number"),
    ("sort=colour", "sort must be one of"),
])
def test_bad_filters_are_a_400_page_naming_them(query: str, says: str) -> None:
    site = seeded()
    reply = site.browser().get(f"/ui/?{query}")
    assert reply.status == 400, (query, reply.status)
    assert says in text_of(reply.body)


def test_hostile_tags_and_names_are_escaped() -> None:
    """A filter value with markup is shown back escaped."""
    site = seeded()
    reply = site.browser().get("/ui/?q=%3Cscript%3E&tag=%3Cb%3E")
    assert reply.status == 200
    assert b"<script>" not in reply.body and b"&lt;script&gt;" in reply.body


def test_outputs_show_their_types_as_terraform_writes_them() -> None:
    """tuple([string, string]), not JSON; the provider filter names
    providers as users do."""
    site = DashboardSite()
    site.api("POST", "/v1/states/app", state(1))
    page = site.browser().get("/ui/states/app")
    text = text_of(page.body)
    assert "zones tuple([string, string])" in text
    assert '["tuple"' not in page.body.decode()
    assert '<option value="provider[&quot;registry.terraform.io/hashicorp/aws&quot;]">' \
           'hashicorp/aws</option>' in page.body.decode()


def test_the_graph_leads_to_the_resources_pages() -> None:
    """Each box is a link to its resource's page; the graph is described
    by its text alternative, which lists every node."""
    site = DashboardSite()
    site.api("POST", "/v1/states/app", state(1))
    body = site.browser().get("/ui/states/app").body.decode()
    svg = body[body.index("<svg"):body.index("</svg>")]
    assert 'aria-describedby="graph-text"' in svg
    assert '<a href="/ui/states/app/-/resource?address=aws_instance.web" class="node"' in svg
    text = body[body.index('id="graph-text"'):]
    for node in ("module.net.aws_vpc.main", "module.net.aws_subnet.private",
                 "aws_instance.web", "aws_db_instance.main", "terraform_data.copy"):
        assert f"<code>{node}</code>" in text
