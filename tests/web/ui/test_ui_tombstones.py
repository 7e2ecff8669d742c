"""The dashboard's history page with tombstones, in memory: a pruned or
purged version stays on the timeline with when and why its bytes went, no
download or diff of it is offered, diffs go to the stored version before,
and its own pages answer 410 (not a server error).  The browser test
(test_ui_browser.py) and kl (test_at_rest_server.py) see the same."""

from __future__ import annotations

import json

from kilolock.core.model import DEFAULT_TENANT, StateKey, utcnow
from kilolock.retention.policy import RetentionPolicy
from tests.support.stub_client import state_body
from tests.support.ui_support import DashboardSite


def body(serial: int) -> bytes:
    return state_body(serial, resources=[{
        "mode": "managed", "type": "null_resource", "name": f"n{index}",
        "provider": 'provider["registry.terraform.io/hashicorp/null"]',
        "instances": [{"schema_version": 0, "sensitive_attributes": [],
                       "attributes": {"id": f"id-{index}-{serial}"}}]}
        for index in range(serial)])


def with_history(site: DashboardSite) -> None:
    for serial in (1, 2, 3, 4):
        assert site.api("POST", "/v1/states/app", body(serial)).status == 200
    reply = site.api("POST", "/v1/native/states/app/-/versions/3/purge",
                     json.dumps({"reason": "leaked <db> password"}).encode())
    assert reply.status == 200, reply.body
    outcome = site.store.prune_state(StateKey(DEFAULT_TENANT, "app"),
                                     RetentionPolicy(versions=2), utcnow(), 500).result
    assert outcome.pruned == (1,)


def test_tombstones_show_on_the_timeline() -> None:
    """Versions 1 (pruned) and 3 (purged) stay listed with why (escaped);
    version 4's diff compares with version 2, the stored one before."""
    site = DashboardSite()
    with_history(site)
    page = site.browser().get("/ui/states/app/-/history")
    assert page.status == 200
    text = page.body.decode()
    assert text.count("Bytes pruned") == 2
    assert "leaked &lt;db&gt; password" in text and "<db>" not in text
    assert "retention: keep the newest 2 versions" in text
    assert "versions/3" not in text and "versions/1" not in text
    assert "from=2&amp;to=4" in text
    assert "+2 added" in text  # version 4 against version 2 (against 3 it would be +1)
    assert '<option value="3"' not in text and '<option value="2"' in text


def test_the_diff_defaults_to_the_stored_version_before() -> None:
    """Without from=, the diff of the current version compares with the
    newest stored version before it."""
    site = DashboardSite()
    with_history(site)
    page = site.browser().get("/ui/states/app/-/diff")
    assert page.status == 200
    assert "version 2 → 4" in page.body.decode()


def test_a_tombstones_pages_are_410_not_errors() -> None:
    """Its page, its JSON, its download, its resources and a diff naming
    it are a 410 page."""
    site = DashboardSite()
    with_history(site)
    for path in ("/ui/states/app/-/versions/3", "/ui/states/app/-/versions/3/download",
                 "/ui/states/app/-/versions/3/json", "/ui/states/app/-/diff?from=3&to=4",
                 "/ui/states/app/-/resource?address=terraform_data.a&version=3"):
        reply = site.browser().get(path)
        assert reply.status == 410, (path, reply.status)
        assert b"only its tombstone is left" in reply.body
