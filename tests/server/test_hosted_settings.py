"""Settings and the service tree of hosted mode: what KL_AUTH_MODE=database
needs, and the second listener (the control API) next to the state lane."""

from __future__ import annotations

import json
from typing import Any

import pytest
import pytest_twisted
import treq
from twisted.python import usage

from kilolock.server.tap import HostedListeners, Options, Settings, make_service_from_settings
from kilolock.store.memory.store import MemoryStateStore
from tests.support.hosted_support import CONTROL_HEADERS, CONTROL_TOKEN, basic

LOOPBACK = "tcp:0:interface=127.0.0.1"


def settings(environ: dict[str, str], **options: Any) -> Settings:
    return Settings.from_sources(options, environ)


@pytest.mark.parametrize(("environ", "options", "message"), [
    ({}, {}, "KL_AUTH_MODE=database needs KL_CONTROL_TOKEN"),
    ({"KL_CONTROL_TOKEN": "short"}, {}, "at least 16 characters"),
    ({"KL_CONTROL_TOKEN": CONTROL_TOKEN}, {"control-listen": "tcp:8080"},
     "--control-listen must differ from --listen"),
    ({"KL_CONTROL_TOKEN": CONTROL_TOKEN}, {"control-listen": "nonsense:1"},
     "--control-listen 'nonsense:1' is not a usable Twisted endpoint string"),
    ({"KL_CONTROL_TOKEN": CONTROL_TOKEN, "KL_PUBLIC_URL": "ftp://example.com"}, {},
     "--public-url must be an http:// or https:// URL"),
])
def test_database_mode_settings_are_checked(environ: dict[str, str], options: dict[str, Any],
                                            message: str) -> None:
    """Hosted mode refuses to start without a usable control token, control
    endpoint or public URL, with a usage error naming the setting."""
    with pytest.raises(usage.UsageError, match=message.replace("(", r"\(")):
        settings({"KL_AUTH_MODE": "database", **environ}, **options)


def test_control_options_and_environment() -> None:
    """--control-listen and --public-url are options with KL_* variables (the
    option wins); KL_CONTROL_TOKEN is read from the environment only."""
    chosen = settings({"KL_AUTH_MODE": "database", "KL_CONTROL_TOKEN": CONTROL_TOKEN,
                       "KL_CONTROL_LISTEN": "tcp:9999", "KL_PUBLIC_URL": "https://a.example"},
                      **{"control-listen": "tcp:9090"})
    assert (chosen.control_listen, chosen.control_token, chosen.public_url) == (
        "tcp:9090", CONTROL_TOKEN, "https://a.example")
    defaults = settings({"KL_AUTH_MODE": "database", "KL_CONTROL_TOKEN": CONTROL_TOKEN})
    assert (defaults.control_listen, defaults.public_url) == ("tcp:8090", None)
    parsed = Options()
    parsed.parseOptions(["--control-listen", "tcp:7000", "--public-url", "https://b.example"])
    assert (parsed["control-listen"], parsed["public-url"]) == ("tcp:7000", "https://b.example")
    assert "control-token" not in parsed


def test_open_and_static_modes_have_no_control_listener() -> None:
    """Only the database mode opens the control API's port."""
    service = make_service_from_settings(Settings(listen=LOOPBACK, store="memory"),
                                         store=MemoryStateStore())
    assert not isinstance(service.web_service, HostedListeners)


@pytest_twisted.ensureDeferred
async def test_hosted_service_serves_both_listeners() -> None:
    """In database mode the service listens twice: the control API creates a
    tenant and a token whose backend block names the state lane's real port,
    and that token works on the state lane."""
    from twisted.internet import reactor

    store = MemoryStateStore()
    service = make_service_from_settings(
        Settings(listen=LOOPBACK, store="memory", auth_mode="database",
                 control_token=CONTROL_TOKEN, control_listen=LOOPBACK),
        reactor, store=store)
    listeners = service.web_service
    assert isinstance(listeners, HostedListeners)
    service.startService()
    try:
        # A TCP endpoint listens as the service starts: both ports are known.
        assert listeners.state_listening is not None
        assert listeners.state_listening.port is not None
        assert listeners.control_listening.port is not None
        state_port = listeners.state_listening.port.getHost().port
        control_port = listeners.control_listening.port.getHost().port
        control = f"http://127.0.0.1:{control_port}/v1/api"
        created = await treq.post(f"{control}/tenants", json.dumps(
            {"slug": "acme", "name": "Acme"}).encode(), headers=CONTROL_HEADERS)
        assert created.code == 201
        await created.content()
        issued_reply = await treq.post(f"{control}/tenants/acme/tokens", json.dumps(
            {"name": "ci", "environment": "default"}).encode(), headers=CONTROL_HEADERS)
        issued = json.loads(await issued_reply.content())
        base = f"http://127.0.0.1:{state_port}"
        assert issued["state_address"].startswith(f"{base}/v1/states/{issued['workspace_id']}/")
        got = await treq.get(issued["state_address"],
                             headers=basic(issued["workspace_id"], issued["token_secret"]))
        assert got.code == 404
        await got.content()
        refused = await treq.get(f"{base}/v1/api/tenants", headers=CONTROL_HEADERS)
        assert refused.code == 404  # the control API is not on the state lane's port
        await refused.content()
    finally:
        await service.stopService()


def test_prepared_statements_setting() -> None:
    """--prepared-statements / KL_PREPARED_STATEMENTS: on by default, off on
    request (the option wins), anything else a usage error; the store built
    from the settings follows it."""
    from kilolock.store.postgres.store import postgres_store_from_settings

    assert settings({}).prepared_statements == "on"
    assert settings({"KL_PREPARED_STATEMENTS": "off"}).prepared_statements == "off"
    assert settings({"KL_PREPARED_STATEMENTS": "off"},
                    **{"prepared-statements": "on"}).prepared_statements == "on"
    with pytest.raises(usage.UsageError, match="--prepared-statements must be on or off"):
        settings({"KL_PREPARED_STATEMENTS": "yes"})
    for value, expected in (("on", True), ("off", False)):
        store = postgres_store_from_settings(
            settings({}, database="postgresql://kilolock@127.0.0.1/kilolock",
                     **{"prepared-statements": value}), reactor=None)
        assert store._prepared_statements is expected
