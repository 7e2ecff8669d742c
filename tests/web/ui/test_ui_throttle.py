"""The dashboard's sign-in throttle (L{kilolock.web.ui.throttle}): failed
sign-ins per client address over a window timed by a task.Clock; the page
answering 429 with Retry-After; and, on a real server behind a trusted
proxy, the address taken from X-Forwarded-For and the refusals counted in
/metrics."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from prometheus_client import CollectorRegistry, Counter
from twisted.internet.task import Clock

from kilolock.web.ui.throttle import SignInThrottle
from tests.support.fixtures_server import ServerFactory
from tests.support.ui_support import STATIC, DashboardSite


def counter() -> tuple[CollectorRegistry, Counter]:
    registry = CollectorRegistry()
    return registry, Counter("refusals", "test", ["reason"], registry=registry)


def test_an_address_waits_after_the_limit_until_its_oldest_failure_leaves_the_window() -> None:
    """Three failures at 0, 10 and 20 s (limit 3, window 300 s): the address
    must wait until 300 s (280 s from 20 s), then one failure has left the
    window and it may try again; another address is not affected; failures
    and refusals are counted by reason."""
    clock = Clock()
    registry, refusals = counter()
    throttle = SignInThrottle(clock, limit=3, window=300.0, counter=refusals)
    for _ in range(3):
        assert throttle.retry_after("198.51.100.7") is None
        throttle.failed("198.51.100.7")
        clock.advance(10)
    assert throttle.retry_after("198.51.100.7") == 270
    assert throttle.retry_after("198.51.100.8") is None
    clock.advance(269.5)
    assert throttle.retry_after("198.51.100.7") == 1
    clock.advance(0.5)
    assert throttle.retry_after("198.51.100.7") is None
    assert registry.get_sample_value("refusals_total", {"reason": "bad_token"}) == 3
    assert registry.get_sample_value("refusals_total", {"reason": "throttled"}) == 2


def test_the_window_slides_and_old_failures_are_forgotten() -> None:
    """Failures spread wider than the window never add up to the limit; an
    address whose failures all left the window is forgotten."""
    clock = Clock()
    throttle = SignInThrottle(clock, limit=2, window=60.0)
    for _ in range(5):
        assert throttle.retry_after("2001:db8::1") is None
        throttle.failed("2001:db8::1")
        clock.advance(61)
    assert throttle.retry_after("2001:db8::1") is None
    assert throttle.addresses() == 0


def test_memory_is_bounded_by_forgetting_the_longest_quiet_address() -> None:
    """Past max_addresses the address that failed longest ago is dropped."""
    clock = Clock()
    throttle = SignInThrottle(clock, limit=1, window=60.0, max_addresses=3)
    for index in range(5):
        throttle.failed(f"192.0.2.{index}")
        clock.advance(1)
    assert throttle.addresses() == 3
    assert throttle.retry_after("192.0.2.0") is None
    assert throttle.retry_after("192.0.2.4") is not None


def test_the_sign_in_page_answers_429_with_retry_after_then_lets_in() -> None:
    """With a limit of 3: three bad tokens are 401s; the fourth attempt, the
    right token included, is a 429 with Retry-After and a message saying
    when to try again, and no session; once the window has passed (the
    dashboard's clock), the right token signs in.  A form without a token
    is not a failure."""
    site = DashboardSite("static", sign_in_failures=3)
    browser = site.browser()
    for _ in range(5):
        assert browser.post("/ui/sign-in", {"token": ""}).status == 400
    for guess in ("kl_guess-1", "kl_guess-2", "kl_guess-3"):
        assert browser.sign_in(guess).status == 401
    site.clock.advance(100)
    refused = browser.sign_in(STATIC)
    assert refused.status == 429
    assert refused.header(b"retry-after") == b"200"
    assert b"Too many failed sign-ins from your address (127.0.0.1)." in refused.body
    assert b"Try again in 200 seconds." in refused.body
    assert b'role="alert"' in refused.body
    assert browser.cookie is None
    site.clock.advance(200)
    assert browser.sign_in(STATIC).status == 303
    assert browser.cookie is not None
    assert browser.get("/ui/").status == 200


@pytest.mark.parametrize("server_store", ["memory"], indirect=True)
def test_behind_a_trusted_proxy_the_forwarded_client_is_throttled_and_counted(
        kilolock_server_factory: ServerFactory) -> None:
    """A real server trusting 127.0.0.1 as its proxy, --ui-sign-in-failures
    2: the client named by X-Forwarded-For is throttled after two bad tokens
    (429, Retry-After up to 300 s), while another forwarded client still gets its
    401; /metrics counts both kinds of refusal."""
    server = kilolock_server_factory(
        env={"KL_AUTH_MODE": "static", "KL_AUTH_TOKEN": STATIC},
        args=("--trusted-proxy", "127.0.0.1/32", "--ui-sign-in-failures", "2"))

    def sign_in(token: str, client: str) -> tuple[int, int | None]:
        reply = server.request("POST", "/ui/sign-in", body=urlencode(
            {"token": token, "next": "/ui/"}).encode(), headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Forwarded-For": client})
        retry = reply.header(b"retry-after")
        return reply.status, None if retry is None else int(retry)

    assert sign_in("kl_wrong-1", "203.0.113.9") == (401, None)
    assert sign_in("kl_wrong-2", "203.0.113.9") == (401, None)
    status, retry_after = sign_in(STATIC, "203.0.113.9")
    # The real reactor's clock: the wait is the window less the time since
    # the second failure, in whole seconds.
    assert status == 429 and retry_after is not None and 1 <= retry_after <= 300
    assert sign_in("kl_wrong-3", "203.0.113.10") == (401, None)
    assert sign_in(STATIC, "203.0.113.11")[0] == 303
    metrics = server.request("GET", "/metrics").body.decode()
    assert 'kilolock_ui_sign_in_refusals_total{reason="bad_token"} 3.0' in metrics
    assert 'kilolock_ui_sign_in_refusals_total{reason="throttled"} 1.0' in metrics
