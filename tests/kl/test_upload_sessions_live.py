"""Upload sessions on live servers (both stores), through `kl`: a state
larger than an edge's body limit goes through nginx with a 10 MB
client_max_body_size in chunks, where one POST of it is refused; and a
push survives chunks whose answers are lost (a proxy answering 500 after,
or instead of, forwarding them).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kilolock.kl.uploads import DEFAULT_CHUNK_BYTES
from tests.support.fixtures_server import Exchange, Fault, FaultProxy, KilolockServer
from tests.support.kl_runner import KlResult, kl_environment, run_kl
from tests.support.nginx import NginxFactory, big_state

#: Bytes of the state sent through the 10 MB edge.
LARGE = 25 << 20


def kl_at(url: str, tmp_path: Path) -> Callable[..., KlResult]:
    env = kl_environment(url, home=tmp_path / "home")
    return lambda *argv: run_kl(*argv, env=env)


def test_a_large_state_through_an_edge_with_a_10_mb_limit(
        kilolock_server: KilolockServer, nginx_factory: NginxFactory,
        tmp_path: Path) -> None:
    """nginx with client_max_body_size 10m refuses one POST of a 25 MB state
    (413); `kl state push` sends it in chunks through an upload session and
    `kl state import` imports it: both stored byte for byte, read back
    through nginx."""
    edge = nginx_factory(kilolock_server.port, body_limit="10m")
    raw = big_state(LARGE)
    assert len(raw) >= LARGE
    refused = edge.request("POST", "/v1/states/big", raw,
                           {"Content-Type": "application/json"}, timeout=120)
    assert refused.status == 413
    file = tmp_path / "big.tfstate"
    file.write_bytes(raw)
    kl = kl_at(edge.base_url, tmp_path)
    pushed = kl("--json", "state", "push", "big", str(file)).check().json()
    assert pushed["pushed"] is True and pushed["sha256"] == hashlib.sha256(raw).hexdigest()
    assert edge.request("GET", "/v1/states/big", timeout=120).body == raw
    puts = [entry for entry in edge.accessed() if entry[0] == "PUT"]
    assert len(puts) == -(-len(raw) // DEFAULT_CHUNK_BYTES)
    assert all(status == 200 for _, _, status in puts)
    imported = kl("--json", "state", "import", "copy", str(file)).check().json()
    assert imported["status"] == "succeeded"
    assert kilolock_server.request("GET", "/v1/states/copy", timeout=120).body == raw


@pytest.mark.parametrize("fault", [Fault.ANSWER_500_AFTER_FORWARDING,
                                   Fault.ANSWER_500_WITHOUT_FORWARDING])
def test_a_push_resumes_after_a_lost_chunk(kilolock_server: KilolockServer,
                                           fault_proxy_factory: Callable[[int], FaultProxy],
                                           tmp_path: Path, fault: Fault) -> None:
    """The second chunk's answer is lost (the chunk stored, or not): kl asks
    the session what it has and sends only what is missing; the state is
    stored byte for byte, under kl's lock, which is released."""
    proxy = fault_proxy_factory(kilolock_server.port)

    def second_chunk(exchange: Exchange) -> bool:
        return exchange.method == "PUT" and f"offset={DEFAULT_CHUNK_BYTES}" in exchange.query

    proxy.add_fault(second_chunk, fault)
    raw = big_state(3 * DEFAULT_CHUNK_BYTES - 1000)
    file = tmp_path / "state.tfstate"
    file.write_bytes(raw)
    result = kl_at(proxy.base_url, tmp_path)("--json", "state", "push", "resumed", str(file),
                                             "--chunked").check()
    assert result.json()["pushed"] is True
    assert kilolock_server.request("GET", "/v1/states/resumed").body == raw
    puts = [e.query for e in proxy.seen("PUT")]
    resent = fault is Fault.ANSWER_500_WITHOUT_FORWARDING
    assert len(puts) == 3 + resent
    assert puts.count(f"offset={DEFAULT_CHUNK_BYTES}") == 1 + resent
    sessions = [e for e in proxy.seen("GET") if "/v1/native/uploads/" in e.path]
    assert len(sessions) == 1
    lock = json.loads(kilolock_server.request("GET", "/v1/native/states/resumed/-/lock").body)
    assert lock["locked"] is False
