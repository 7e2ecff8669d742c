"""Helpers for tests of the dashboard in memory: a Kilolock site with the
dashboard over a L{MemoryStateStore}, its sessions timed by a
L{task.Clock}, and a browser-like client that keeps the session cookie."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from twisted.internet.task import Clock

from kilolock.auth.portal import (
    DatabaseTokenChecker,
    OpenChecker,
    StaticTokenChecker,
    build_portal,
)
from kilolock.store.memory.store import MemoryStateStore
from kilolock.web.control.api import ControlAPI
from kilolock.web.control.tree import build_control_root
from kilolock.web.site import build_root
from kilolock.web.ui.throttle import DEFAULT_SIGN_IN_FAILURES
from kilolock.web.ui.tree import UiOptions
from tests.support.hosted_support import CONTROL_TOKEN, ControlClient, _TreeClient
from tests.support.stub_client import Reply, SiteClient, content_md5

STATIC = "kl_static-ui-test-token-0123456789"
#: When the tests' clock starts (2026-01-01T00:00:00Z).
START = 1767225600.0

_CSRF = re.compile(rb'name="csrf" value="([^"]+)"')


class Browser:
    """Requests to one site with a cookie jar of one cookie (the session)."""

    def __init__(self, site: SiteClient) -> None:
        self.site = site
        self.cookie: str | None = None

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> Reply:
        sent = {"Accept": "text/html", **(headers or {})}
        if self.cookie:
            sent["Cookie"] = self.cookie
        reply = self.site.request(method, path, body, sent)
        for value in reply.headers.get(b"set-cookie", []):
            pair = value.split(b";")[0].decode()
            self.cookie = None if pair.endswith("=") else pair
        return reply

    def get(self, path: str) -> Reply:
        return self.request("GET", path)

    def post(self, path: str, fields: Mapping[str, str],
             headers: Mapping[str, str] | None = None) -> Reply:
        return self.request("POST", path, urlencode(fields).encode(),
                            {"Content-Type": "application/x-www-form-urlencoded",
                             **(headers or {})})

    def csrf(self, path: str = "/ui/") -> str:
        found = _CSRF.search(self.get(path).body)
        assert found, "no CSRF token on the page"
        return found.group(1).decode()

    def sign_in(self, token: str) -> Reply:
        return self.post("/ui/sign-in", {"token": token, "next": "/ui/"})


class DashboardSite:
    """One store, the state lane with the dashboard in memory, a control API
    over the same store (hosted mode), and a clock."""

    def __init__(self, auth_mode: str = "open", session_seconds: float = 3600,
                 sign_in_failures: int = DEFAULT_SIGN_IN_FAILURES) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        # The store keeps the same time as the sessions (lock ages, "ago").
        self.store = MemoryStateStore(
            clock=lambda: datetime.fromtimestamp(self.clock.seconds(), UTC))
        checker: Any = {"open": OpenChecker(), "static": StaticTokenChecker(STATIC),
                        "database": DatabaseTokenChecker(self.store)}[auth_mode]
        self.site = SiteClient(build_root(
            self.store, build_portal(checker), None, auth_mode=auth_mode,
            ui=UiOptions(static_token=STATIC, session_seconds=session_seconds,
                         clock=self.clock, sign_in_failures=sign_in_failures)))
        api = ControlAPI(self.store, CONTROL_TOKEN, None, lambda request: "http://x.test")
        self.control = ControlClient(_TreeClient(build_control_root(api)).request)

    def browser(self) -> Browser:
        return Browser(self.site)

    def api(self, method: str, path: str, body: bytes | None = None,
            headers: Mapping[str, str] | None = None) -> Reply:
        sent = dict(headers or {})
        if body is not None:
            sent.update({"Content-Type": "application/json", "Content-MD5": content_md5(body)})
        return self.site.request(method, path, body, sent)
