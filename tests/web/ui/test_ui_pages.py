"""The dashboard in memory: routes, headers, sessions (timed by a
task.Clock), sign-in and sign-out, scope, force-unlock with its CSRF token,
masking and escaping, bad input.  The browser tests
(tests/web/ui/test_ui_browser.py) drive the same pages through Chromium."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilolock.core.events import LOCK_FORCE_RELEASE
from kilolock.core.model import DEFAULT_TENANT
from kilolock.web.ui.headers import CONTENT_SECURITY_POLICY
from tests.support.stub_client import lock_body, state_body
from tests.support.ui_support import STATIC, DashboardSite

SECRET = "hunter2-do-not-show"

SENSITIVE_STATE = json.dumps({
    "version": 4, "terraform_version": "1.15.5", "serial": 2,
    "lineage": "7b1d5c1e-0000-4000-8000-000000000001",
    "outputs": {"password": {"value": SECRET, "type": "string", "sensitive": True},
                "region": {"value": "eu-west-1", "type": "string"}},
    "resources": [{
        "mode": "managed", "type": "terraform_data", "name": "example",
        "provider": 'provider["terraform.io/builtin/terraform"]',
        "instances": [{"schema_version": 0,
                       "attributes": {"id": "db-1", "input": SECRET, "output": "plain"},
                       "sensitive_attributes": [[{"type": "get_attr", "value": "input"}]]}]}],
}).encode()


def csp_and_friends(headers: dict[bytes, list[bytes]]) -> None:
    assert headers[b"content-security-policy"] == [CONTENT_SECURITY_POLICY]
    assert b"frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
    assert b"unsafe-inline" not in CONTENT_SECURITY_POLICY
    assert headers[b"x-content-type-options"] == [b"nosniff"]
    assert headers[b"referrer-policy"] == [b"same-origin"]


def test_a_browser_asking_for_the_root_goes_to_the_dashboard() -> None:
    """GET / with Accept: text/html is a 303 to /ui/; an API client (no HTML
    in Accept, or another method) keeps the JSON 404, which names where the
    dashboard and the lanes are; /ui goes to /ui/."""
    site = DashboardSite()
    reply = site.site.request("GET", "/", headers={"Accept": "text/html,*/*"})
    assert (reply.status, reply.header(b"location")) == (303, b"/ui/")
    for method, accept in (("GET", "application/json"), ("GET", "*/*"), ("POST", "text/html")):
        reply = site.site.request(method, "/", headers={"Accept": accept})
        assert reply.status == 404, (method, accept)
        assert reply.json()["error"]["code"] == "not_found"
        assert "the dashboard is /ui/" in reply.json()["error"]["message"]
    assert site.site.request("GET", "/nothing", headers={"Accept": "text/html"}).status == 404
    reply = site.browser().get("/ui")
    assert (reply.status, reply.header(b"location")) == (303, b"/ui/")


def test_every_answer_carries_the_security_headers() -> None:
    """Pages, error pages, redirects and assets: the strict CSP (no inline
    script or style, no framing), nosniff, a referrer policy; pages are not
    cached, assets for a year under their content-hashed names."""
    site = DashboardSite()
    browser = site.browser()
    page = browser.get("/ui/")
    assert page.status == 200
    csp_and_friends(page.headers)
    assert page.header(b"cache-control") == b"no-store"
    assert page.header(b"content-type") == b"text/html; charset=utf-8"
    assert b"<script>" not in page.body and b"style=" not in page.body
    csp_and_friends(browser.get("/ui/states/nothing-here").headers)
    assets = re.findall(rb'(/ui/static/ui\.[0-9a-f]{12}\.(?:css|js))', page.body)
    assert len(assets) == 2  # and the icon
    for url in assets:
        asset = browser.get(url.decode())
        assert asset.status == 200
        csp_and_friends(asset.headers)
        assert asset.header(b"cache-control") == b"public, max-age=31536000, immutable"
    assert browser.get("/ui/static/ui.css").status == 404
    assert browser.get("/ui/static/ui.000000000000.css").status == 404


def test_open_mode_shows_everything_with_a_banner() -> None:
    """Without authentication every visitor sees the states, under a banner
    saying that auth is off."""
    site = DashboardSite("open")
    site.api("POST", "/v1/states/app", state_body(3))
    page = site.browser().get("/ui/")
    assert page.status == 200
    assert b"Authentication is off" in page.body
    assert b'href="/ui/states/app"' in page.body


def test_open_mode_sessions_live_in_the_cookie_only() -> None:
    """Open mode stores no session: a visitor without a cookie gets a new
    secret in an HttpOnly, SameSite=Strict cookie with every page (and no
    row: a client that keeps no cookie used to add one per page); a visitor
    with one keeps it."""
    site = DashboardSite("open")
    site.api("POST", "/v1/states/app", state_body(1))
    cookies = set()
    for _ in range(20):
        reply = site.browser().get("/ui/states/app")
        assert reply.status == 200
        (cookie,) = reply.headers[b"set-cookie"]
        assert b"HttpOnly" in cookie and b"SameSite=strict" in cookie
        cookies.add(cookie.split(b";")[0])
    assert len(cookies) == 20
    assert site.store._sessions == {}
    browser = site.browser()
    browser.get("/ui/")
    kept = browser.cookie
    assert kept is not None and b"set-cookie" not in browser.get("/ui/states/app").headers
    assert browser.cookie == kept and site.store._sessions == {}


def test_open_mode_force_unlock_needs_the_csrf_token_of_its_own_cookie() -> None:
    """Open mode's CSRF token is bound to the visitor's cookie: the form's
    token releases the lock for that visitor only; another visitor's
    token, or none, is a 403 and releases nothing."""
    site = DashboardSite("open")
    site.api("POST", "/v1/states/app", state_body(1))
    site.api("LOCK", "/v1/states/app", lock_body("L-1", who="ci@runner"))
    visitor, other = site.browser(), site.browser()
    csrf = visitor.csrf("/ui/states/app/-/unlock")
    others = other.csrf("/ui/states/app/-/unlock")
    assert csrf != others
    assert visitor.post("/ui/states/app/-/unlock", {"lock_id": "L-1"}).status == 403
    assert visitor.post("/ui/states/app/-/unlock",
                        {"csrf": others, "lock_id": "L-1"}).status == 403
    assert site.browser().post("/ui/states/app/-/unlock",
                               {"csrf": csrf, "lock_id": "L-1"}).status == 403
    assert b"L-1" in visitor.get("/ui/states/app").body
    done = visitor.post("/ui/states/app/-/unlock", {"csrf": csrf, "lock_id": "L-1"})
    assert (done.status, done.header(b"location")) == (303, b"/ui/states/app")
    assert site.store._events[DEFAULT_TENANT][-1].kind == LOCK_FORCE_RELEASE
    assert site.store._sessions == {}


def test_static_sign_in_session_cookie_and_sign_out() -> None:
    """Static mode: pages send the browser to sign in; a wrong token is a
    401 page and no session; the static token starts a session in an
    HttpOnly, SameSite=Strict cookie (not Secure over plain HTTP); sign-out
    needs the CSRF token and ends the session."""
    site = DashboardSite("static")
    browser = site.browser()
    reply = browser.get("/ui/states/app?x=1")
    assert (reply.status, reply.header(b"location")) == (
        303, b"/ui/sign-in?next=/ui/states/app%3Fx%3D1")
    assert browser.get("/ui/sign-in").status == 200
    wrong = browser.sign_in("kl_wrong")
    assert wrong.status == 401
    assert b"That token was not accepted" in wrong.body
    assert browser.cookie is None
    right = browser.sign_in(STATIC)
    assert (right.status, right.header(b"location")) == (303, b"/ui/")
    cookie = right.header(b"set-cookie") or b""
    assert cookie.startswith(b"kl_ui=")
    for attribute in (b"HttpOnly", b"SameSite=strict", b"Path=/ui", b"Max-Age=3600"):
        assert attribute in cookie
    assert b"Secure" not in cookie
    assert STATIC.encode() not in cookie
    page = browser.get("/ui/")
    assert page.status == 200
    assert b"Signed in as" in page.body and b"static-token" in page.body
    kept = browser.cookie
    refused = browser.post("/ui/sign-out", {"csrf": "forged"})
    assert refused.status == 403
    assert browser.get("/ui/").status == 200
    assert browser.post("/ui/sign-out", {"csrf": browser.csrf()}).status == 303
    browser.cookie = kept
    assert browser.get("/ui/").status == 303


def test_sessions_expire_on_the_clock() -> None:
    """A session lasts its configured seconds from sign-in, then the
    browser is sent to sign in again."""
    site = DashboardSite("static", session_seconds=600)
    browser = site.browser()
    browser.sign_in(STATIC)
    site.clock.advance(599)
    assert browser.get("/ui/").status == 200
    site.clock.advance(1)
    reply = browser.get("/ui/")
    assert reply.status == 303
    assert (reply.header(b"location") or b"").startswith(b"/ui/sign-in")


def test_sign_in_refuses_foreign_origins_and_odd_forms() -> None:
    """A sign-in posted from another origin is refused; an oversize form is a
    400; a next= that leaves the dashboard is ignored."""
    site = DashboardSite("static")
    browser = site.browser()
    foreign = browser.post("/ui/sign-in", {"token": STATIC},
                           headers={"Origin": "http://evil.test"})
    assert foreign.status == 403 and browser.cookie is None
    assert browser.post("/ui/sign-in", {"token": "x" * 20000}).status == 400
    away = browser.post("/ui/sign-in", {"token": STATIC, "next": "//evil.test/"})
    assert away.header(b"location") == b"/ui/"


def hosted() -> tuple[DashboardSite, object, object]:
    site = DashboardSite("database")
    first, second = site.control.tenant("acme"), site.control.tenant("globex")
    return site, first, second


def test_scope_a_tenant_cannot_open_another_tenants_state() -> None:
    """Hosted mode: a tenant's session lists only its states; another
    tenant's state by URL is the very page of a missing state; a revoked
    token ends the session."""
    site, acme, globex = hosted()
    for tenant in (acme, globex):
        path = f"/v1/states/{tenant.prefix}/app"  # type: ignore[attr-defined]
        assert site.api("POST", path, state_body(1),
                        tenant.auth(tenant.write)).status == 200  # type: ignore[attr-defined]
    browser = site.browser()
    assert browser.sign_in(acme.write).status == 303  # type: ignore[attr-defined]
    listing = browser.get("/ui/")
    assert acme.prefix.encode() in listing.body  # type: ignore[attr-defined]
    assert globex.prefix.encode() not in listing.body  # type: ignore[attr-defined]
    assert b"default" in listing.body  # the workspace and environment names
    foreign = browser.get(f"/ui/states/{globex.prefix}/app")  # type: ignore[attr-defined]
    missing = browser.get(f"/ui/states/{acme.prefix}/nothing")  # type: ignore[attr-defined]
    assert foreign.status == missing.status == 404
    assert foreign.body == missing.body
    for below in ("-/history", "-/diff", "-/versions/1", "-/unlock"):
        other = browser.get(f"/ui/states/{globex.prefix}/app/{below}")  # type: ignore[attr-defined]
        assert other.status == 404, below
    audit = browser.get("/ui/audit")
    assert globex.prefix.encode() not in audit.body  # type: ignore[attr-defined]
    site.control.ok("DELETE", f"/tenants/acme/tokens/{acme.write_token_id}")  # type: ignore[attr-defined]
    assert browser.get("/ui/").status == 303


def test_read_only_tokens_see_but_cannot_force_unlock() -> None:
    """A read-only token's session shows the lock without the button, and
    the unlock page and post are 403 pages; the lock stays."""
    site, acme, _ = hosted()
    path = f"/v1/states/{acme.prefix}/app"  # type: ignore[attr-defined]
    auth = acme.auth(acme.write)  # type: ignore[attr-defined]
    site.api("POST", path, state_body(1), auth)
    site.api("LOCK", path, lock_body("L-1"), auth)
    browser = site.browser()
    browser.sign_in(acme.read)  # type: ignore[attr-defined]
    page = browser.get(f"/ui/states/{acme.prefix}/app")  # type: ignore[attr-defined]
    assert b"Locked by" in page.body and b"Force-unlock" not in page.body
    unlock = f"/ui/states/{acme.prefix}/app/-/unlock"  # type: ignore[attr-defined]
    assert browser.get(unlock).status == 403
    assert browser.post(unlock, {"csrf": browser.csrf(), "lock_id": "L-1"}).status == 403
    assert site.api("LOCK", path, lock_body("L-2"), auth).status == 423


def test_force_unlock_needs_confirmation_and_csrf_and_is_audited() -> None:
    """The confirmation page shows the lock; a post without the CSRF token
    or for another lock ID releases nothing; the confirmed post releases it
    as a force release marked as the dashboard's, in the viewer's name."""
    site = DashboardSite("static")
    site.api("POST", "/v1/states/app", state_body(1), {"Authorization": f"Bearer {STATIC}"})
    site.api("LOCK", "/v1/states/app", lock_body("L-1", who="ci@runner"),
             {"Authorization": f"Bearer {STATIC}"})
    browser = site.browser()
    browser.sign_in(STATIC)
    confirm = browser.get("/ui/states/app/-/unlock")
    assert confirm.status == 200
    assert b"ci@runner" in confirm.body and b"L-1" in confirm.body
    csrf = browser.csrf("/ui/states/app/-/unlock")
    assert browser.post("/ui/states/app/-/unlock", {"lock_id": "L-1"}).status == 403
    assert browser.post("/ui/states/app/-/unlock",
                        {"csrf": csrf, "lock_id": "L-other"}).status == 409
    done = browser.post("/ui/states/app/-/unlock", {"csrf": csrf, "lock_id": "L-1"})
    assert (done.status, done.header(b"location")) == (303, b"/ui/states/app")
    events = site.store._events[DEFAULT_TENANT]
    assert events[-1].kind == LOCK_FORCE_RELEASE
    assert json.loads(events[-1].detail)["via"] == "dashboard"
    assert events[-1].principal == "static-token"
    assert b"Not locked." in browser.get("/ui/states/app").body


def test_sensitive_values_never_reach_a_page() -> None:
    """A sensitive output and a sensitive attribute are masked on every page
    that shows the state (state, history, diff, search, audit)."""
    site = DashboardSite()
    site.api("POST", "/v1/states/db", state_body(1))
    site.api("POST", "/v1/states/db", SENSITIVE_STATE)
    browser = site.browser()
    pages = ["/ui/", "/ui/states/db", "/ui/states/db/-/history", "/ui/states/db/-/diff",
             "/ui/states/db/-/diff?from=1&to=2", "/ui/search?type=terraform_data",
             "/ui/audit"]
    for path in pages:
        reply = browser.get(path)
        assert reply.status == 200, path
        assert SECRET.encode() not in reply.body, path
    guessed = browser.get("/ui/search?attribute=input%3D" + SECRET).body
    assert b"Nothing found." in guessed  # a secret cannot be found by guessing it
    state = browser.get("/ui/states/db").body
    assert b"(sensitive)" in state and b"eu-west-1" in state
    diff = browser.get("/ui/states/db/-/diff?from=1&to=2").body
    assert b"replaced" in diff  # the id changed: a replacement


def test_dynamic_values_are_escaped() -> None:
    """A lock holder's name with markup is shown as text."""
    site = DashboardSite()
    site.api("POST", "/v1/states/app", state_body(1))
    site.api("LOCK", "/v1/states/app", lock_body("L-<b>", who="<img src=x onerror=alert(1)>"))
    for path in ("/ui/", "/ui/states/app", "/ui/states/app/-/unlock", "/ui/audit"):
        body = site.browser().get(path).body
        assert b"<img src=x" not in body, path
        assert b"&lt;img src=x onerror=alert(1)&gt;" in body, path


@pytest.mark.parametrize("query", ["sort=colour", "page=0", "per=7", "dir=up", "page=x"])
def test_bad_parameters_are_a_400_page(query: str) -> None:
    """A parameter out of its range is an HTML 400 page naming it."""
    reply = DashboardSite().browser().get(f"/ui/?{query}")
    assert reply.status == 400
    assert reply.header(b"content-type") == b"text/html; charset=utf-8"
    assert query.split("=")[0].encode() in reply.body


def test_state_listing_filters_sorts_and_pages() -> None:
    """The page lists, filters by name and pages 25 states at a time."""
    site = DashboardSite()
    for number in range(30):
        site.api("POST", f"/v1/states/app-{number:02d}", state_body(number + 1))
    browser = site.browser()
    first = browser.get("/ui/?per=25")
    assert b"30 states" in first.body and b"Page 1 of 2" in first.body
    assert b"app-24" in first.body and b"app-25" not in first.body
    second = browser.get("/ui/?per=25&page=2")
    assert b"app-25" in second.body and b"app-24" not in second.body
    filtered = browser.get("/ui/?q=APP-1")
    assert b"10 states" in filtered.body
    newest = browser.get("/ui/?sort=serial&dir=desc&per=25")
    assert newest.body.index(b"app-29") < newest.body.index(b"app-28")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=4))
def test_no_path_under_the_dashboard_is_a_server_error(segments: list[str]) -> None:
    """Any path below /ui/ answers something other than a 500."""
    from urllib.parse import quote

    site = _SHARED_SITE
    path = "/ui/" + "/".join(quote(segment, safe="") for segment in segments)
    reply = site.browser().get(path)
    assert reply.status < 500, path


_SHARED_SITE = DashboardSite()


def copied_secret_state(serial: int, secret: str) -> bytes:
    """terraform_data as Terraform writes it: a sensitive input, and its
    output copy that sensitive_attributes does not list."""
    return json.dumps({
        "version": 4, "terraform_version": "1.15.5", "serial": serial,
        "lineage": "7b1d5c1e-0000-4000-8000-000000000001", "outputs": {},
        "resources": [{
            "mode": "managed", "type": "terraform_data", "name": "secretive",
            "provider": 'provider["terraform.io/builtin/terraform"]',
            "instances": [{"schema_version": 0, "attributes": {
                "id": "same", "input": {"value": secret, "type": "string"},
                "output": {"value": secret, "type": "string"}, "triggers_replace": None},
                "sensitive_attributes": [[{"type": "get_attr", "value": "input"}]]}]}],
    }).encode()


def test_the_diff_masks_unmarked_copies_of_sensitive_values() -> None:
    """A diff whose unmarked attribute holds a value the state marks
    sensitive elsewhere shows neither the old nor the new value."""
    from kilolock.web.ui.secrets import sensitive_values

    assert sensitive_values(copied_secret_state(1, "first-secret")) == {"first-secret"}
    site = DashboardSite()
    site.api("POST", "/v1/states/s", copied_secret_state(1, "first-secret"))
    site.api("POST", "/v1/states/s", copied_secret_state(2, "second-secret"))
    diff = site.browser().get("/ui/states/s/-/diff?from=1&to=2")
    assert diff.status == 200
    assert b"first-secret" not in diff.body and b"second-secret" not in diff.body
    assert diff.body.count(b"(sensitive") >= 2


def test_a_version_downloads_as_a_file() -> None:
    """A version's exact bytes, as an attachment, never cached, below its
    page; an unknown version is a 404 page."""
    site = DashboardSite()
    site.api("POST", "/v1/states/app", state_body(7))
    reply = site.browser().get("/ui/states/app/-/versions/1/download")
    assert reply.status == 200
    assert reply.body == state_body(7)
    assert reply.header(b"content-disposition") == b'attachment; filename="app-v1.tfstate"'
    assert reply.header(b"cache-control") == b"no-store"
    page = site.browser().get("/ui/states/app/-/versions/1")
    assert page.status == 200 and page.header(b"content-type").startswith(b"text/html")
    assert b"/ui/states/app/-/versions/1/download" in page.body
    for missing in ("/ui/states/app/-/versions/2", "/ui/states/app/-/versions/2/download",
                    "/ui/states/app/-/versions/2/json", "/ui/states/app/-/versions/1/other"):
        assert site.browser().get(missing).status == 404, missing


def test_the_cookie_is_secure_behind_a_trusted_tls_proxy() -> None:
    """Through a trusted proxy that says the browser used HTTPS, the session
    cookie is Secure, and the backend block says https://."""
    from kilolock.web.forwarded import parse_networks

    site = DashboardSite()
    site.site.site.trusted_proxies = tuple(parse_networks(["127.0.0.1/32"]))
    site.api("POST", "/v1/states/app", state_body(1))
    browser = site.browser()
    reply = browser.request("GET", "/ui/states/app", headers={
        "X-Forwarded-Proto": "https", "Host": "kilolock.example.com"})
    assert b"Secure" in (reply.header(b"set-cookie") or b"")
    assert b'"https://kilolock.example.com/v1/states/app"' in reply.body


def test_the_dashboard_can_be_turned_off() -> None:
    """--ui off: /ui/ is the JSON 404 of any unknown path and GET / stays a
    JSON 404 for browsers too; a bad --ui value is a usage error."""
    from twisted.python.usage import UsageError

    from kilolock.auth.portal import OpenChecker, build_portal
    from kilolock.server.tap import Settings
    from kilolock.store.memory.store import MemoryStateStore
    from kilolock.web.site import build_root
    from tests.support.stub_client import SiteClient

    assert Settings.from_sources({"ui": "off", "store": "memory"}, {}).ui == "off"
    assert Settings.from_sources({"store": "memory"}, {"KL_UI": "off"}).ui == "off"
    assert Settings.from_sources({"store": "memory"}, {}).ui == "on"
    with pytest.raises(UsageError, match="--ui must be on or off"):
        Settings.from_sources({"ui": "maybe", "store": "memory"}, {})
    with pytest.raises(UsageError, match="KL_UI_SESSION_SECONDS"):
        Settings.from_sources({"store": "memory"}, {"KL_UI_SESSION_SECONDS": "0"})
    site = SiteClient(build_root(MemoryStateStore(), build_portal(OpenChecker()), None))
    for path in ("/", "/ui/", "/ui"):
        reply = site.request("GET", path, headers={"Accept": "text/html"})
        assert reply.status == 404, path
        assert reply.json()["error"]["code"] == "not_found"


def test_a_state_page_offers_the_cloud_block_of_the_same_state() -> None:
    """The state page shows, next to the http block, the cloud {} block whose
    workspace is this very state (the TFE lane's mapping); a name no TFE
    workspace can have gets no cloud block."""
    site = DashboardSite("open")
    site.api("POST", "/v1/states/app", state_body(1))
    site.api("POST", "/v1/states/default", state_body(1))
    page = site.browser().get("/ui/states/app")
    assert page.status == 200
    assert b"cloud {" in page.body and b'name = "app"' in page.body
    other = site.browser().get("/ui/states/default")
    assert other.status == 200 and b"cloud {" not in other.body


@pytest.mark.parametrize(("base", "auth_mode", "key", "expected"), [
    ("https://kilolock.example.com", "static", ("default", "app"),
     'terraform {\n  cloud {\n    hostname     = "kilolock.example.com"\n'
     '    organization = "default"\n    workspaces {\n      name = "app"\n    }\n  }\n}\n'),
    ("http://localhost:8080", "open", ("default", "net"),
     'terraform {\n  cloud {\n    hostname     = "localhost:8080"\n'
     '    organization = "default"\n    workspaces {\n      name = "net"\n    }\n  }\n}\n'),
    ("https://state.my-corp.io:8443", "database", ("tn_0123456789ab", "ws_1/env_2/db"),
     'terraform {\n  cloud {\n    hostname     = "state.my-corp.io:8443"\n'
     '    organization = "tn_0123456789ab"\n    workspaces {\n      name = "db"\n    }\n'
     '  }\n}\n'),
])
def test_the_cloud_block_names_host_organization_and_workspace(
        base: str, auth_mode: str, key: tuple[str, str], expected: str) -> None:
    """The organization is the tenant (``default`` outside the database
    mode), the workspace the state's own name; no token is in the block."""
    from kilolock.core.model import Principal, StateKey
    from kilolock.web.ui.backend_blocks import cloud_block

    principal = Principal(tenant=key[0], name="someone")
    assert cloud_block(base, StateKey(*key), principal, auth_mode) == expected
    assert cloud_block(base, StateKey(key[0], "default"), principal, auth_mode) is None


@pytest.mark.parametrize(("base", "auth_mode", "expected"), [
    ("http://127.0.0.1:8080", "open",
     "# save as kilolock.tfrc, then: export TF_CLI_CONFIG_FILE=$PWD/kilolock.tfrc\n"
     "# plain HTTP: name the TFE lane here (discovery is HTTPS only)\n"
     'host "127.0.0.1:8080" {\n  services = {\n'
     '    "tfe.v2" = "http://127.0.0.1:8080/api/v2/"\n  }\n}\n'
     'credentials "127.0.0.1:8080" {\n'
     '  token = "open"  # authentication is off: any value does, but Terraform needs one\n'
     "}\n"),
    ("https://kilolock.example.com", "static",
     "# save as kilolock.tfrc, then: export TF_CLI_CONFIG_FILE=$PWD/kilolock.tfrc\n"
     'credentials "kilolock.example.com" {\n'
     '  token = "REPLACE-WITH-YOUR-KILOLOCK-TOKEN"\n}\n'
     "# (or no credentials block: export TF_TOKEN_kilolock_example_com=<your token>)\n"),
    ("https://state.my-corp.io:8443", "database",
     "# save as kilolock.tfrc, then: export TF_CLI_CONFIG_FILE=$PWD/kilolock.tfrc\n"
     'credentials "state.my-corp.io:8443" {\n'
     '  token = "REPLACE-WITH-YOUR-KILOLOCK-TOKEN"\n}\n'),
])
def test_the_cli_configuration_holds_the_token_and_over_http_the_host(
        base: str, auth_mode: str, expected: str) -> None:
    """The cloud block's companion: a credentials block always (Terraform
    needs a token even when the server does not), a host block naming the
    TFE lane over plain HTTP (discovery is HTTPS only); never a real token."""
    from kilolock.web.ui.backend_blocks import cli_config_block

    assert cli_config_block(base, auth_mode) == expected
