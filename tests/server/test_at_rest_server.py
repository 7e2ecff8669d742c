"""State at rest on live servers (twistd subprocesses), on both stores:
encryption configured by KL_ENCRYPTION_KEYS (the memory store keeps raw
bytes in memory: it ignores the key file), byte-exact GETs, sensitive
values nowhere in the database's tables (SQL scan: the projection and
every other table), the TFE lane's JSON outputs not stored, tampered rows
answered 502 (never 500), a wrong key refused at start, background
pruning visible in /metrics, and kl's purge, retention and history."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.at_rest_support import (
    every_text_in_database,
    execute,
    query,
    secret,
    state_with,
    write_key_file,
)
from tests.support.fixtures_server import KilolockServer, StoreLaunch, poll_until
from tests.support.kl_runner import kl_environment, run_kl
from tests.support.migrate_support import migrate
from tests.support.stub_client import state_body

KEYS = {"2026-12": secret()}
MARKER = "kl-plain-" + os.urandom(5).hex()
SENSITIVE = "kl-secret-" + os.urandom(5).hex()


#: A test of what PostgreSQL holds (the memory store keeps raw bytes in
#: memory: nothing at rest).
POSTGRES_ONLY = pytest.mark.parametrize(
    "server_store", [pytest.param("postgres", marks=pytest.mark.postgres, id="store=postgres")],
    indirect=True)


def dsn_of(launch: StoreLaunch) -> str | None:
    return launch.args[launch.args.index("--database") + 1] if "--database" in launch.args \
        else None


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    return write_key_file(tmp_path / "keys.toml", "2026-12", KEYS)


@pytest.fixture
def encrypted_server(kilolock_server_factory: Any, key_file: Path) -> KilolockServer:
    server: KilolockServer = kilolock_server_factory(env={"KL_ENCRYPTION_KEYS": str(key_file)})
    return server


def post(server: KilolockServer, name: str, raw: bytes) -> None:
    reply = server.with_body("POST", f"/v1/states/{name}", raw)
    assert reply.status == 200, reply.body


def test_encrypted_versions_round_trip_and_hide_their_secrets(
        encrypted_server: KilolockServer, server_store: StoreLaunch) -> None:
    """GET returns exactly the bytes written (Terraform's Accept-Encoding
    changes nothing); the native API shows sensitive values redacted; on
    PostgreSQL no table holds a sensitive value, and no payload a marker."""
    bodies = [state_with(serial, MARKER, SENSITIVE) for serial in (1, 2, 3)]
    for body in bodies:
        post(encrypted_server, "app", body)
    reply = encrypted_server.request("GET", "/v1/states/app",
                                     headers={"Accept-Encoding": "gzip"})
    assert reply.status == 200 and reply.body == bodies[-1]
    assert reply.header(b"content-encoding") is None
    assert encrypted_server.request("GET", "/v1/native/states/app/-/versions/1").body == bodies[0]
    outputs = encrypted_server.request("GET", "/v1/native/states/app/-/outputs").body
    resources = encrypted_server.request("GET", "/v1/native/states/app/-/resources").body
    assert SENSITIVE.encode() not in outputs and b'"value": null' in outputs
    assert SENSITIVE.encode() not in resources and b"(sensitive)" in resources
    assert MARKER.encode() in resources  # what is not sensitive is searchable
    dsn = dsn_of(server_store)
    if dsn is None:
        return
    everything = every_text_in_database(dsn)
    assert SENSITIVE.encode() not in everything
    payloads = b"".join(bytes(payload) for (payload,) in query(
        dsn, "SELECT payload FROM state_versions"))
    assert MARKER.encode() not in payloads and b"aws_db_instance" not in payloads
    assert {kek for (kek,) in query(dsn, "SELECT kek_id FROM state_versions")} == {"2026-12"}


@POSTGRES_ONLY
def test_the_tfe_lane_does_not_keep_json_state_outputs(
        kilolock_server_factory: Any, key_file: Path, postgres_dsn: str) -> None:
    """The cloud {} block's upload with json-state-outputs and json-state:
    the state is stored (encrypted), neither JSON copy is kept anywhere."""
    server = kilolock_server_factory(env={"KL_ENCRYPTION_KEYS": str(key_file),
                                          "KL_AUTH_MODE": "static", "KL_AUTH_TOKEN": "t" * 32},
                                     args=())
    auth = {"Authorization": "Bearer " + "t" * 32, "Content-Type": "application/vnd.api+json"}
    created = server.request("POST", "/api/v2/organizations/default/workspaces", json.dumps(
        {"data": {"type": "workspaces", "attributes": {"name": "tfe"}}}).encode(), auth)
    assert created.status == 201, created.body
    workspace = json.loads(created.body)["data"]["id"]
    locked = server.request("POST", f"/api/v2/workspaces/{workspace}/actions/lock",
                            b'{"data":{"attributes":{"reason":"r"}}}', auth)
    assert locked.status == 200, locked.body
    raw = state_with(1, MARKER, SENSITIVE)
    outputs = json.dumps({"secret": {"sensitive": True, "value": f"{SENSITIVE}-json"}})
    document = {"data": {"type": "state-versions", "attributes": {
        "serial": 1, "md5": hashlib.md5(raw).hexdigest(),
        "lineage": "7b1d5c1e-0000-4000-8000-00000000aaaa",
        "json-state-outputs": base64.b64encode(outputs.encode()).decode()}}}
    pending = server.request("POST", f"/api/v2/workspaces/{workspace}/state-versions",
                             json.dumps(document).encode(), auth)
    assert pending.status == 201, pending.body
    attributes = json.loads(pending.body)["data"]["attributes"]
    for url, body in ((attributes["hosted-json-state-upload-url"],
                       json.dumps({"values": {"outputs": {"s": {"value": f"{SENSITIVE}-j2"}}}})
                       .encode()),
                      (attributes["hosted-state-upload-url"], raw)):
        assert server.request("PUT", url, body).status == 200
    assert server.request("GET", "/v1/native/states/tfe", headers=auth).status == 200
    everything = every_text_in_database(postgres_dsn)
    assert SENSITIVE.encode() not in everything
    assert b"-json" not in everything and b"-j2" not in everything


@POSTGRES_ONLY
def test_tampered_rows_answer_502_never_500(encrypted_server: KilolockServer,
                                            postgres_dsn: str, tmp_path: Path) -> None:
    """Two states' ciphertexts swapped in the database: both lanes answer a
    typed 502 JSON error, kl exits 5, nothing garbled is served."""
    post(encrypted_server, "a", state_with(1, "a", SENSITIVE))
    post(encrypted_server, "b", state_with(1, "b", SENSITIVE))
    execute(postgres_dsn, """
        UPDATE state_versions v SET payload = o.payload, data_key = o.data_key
        FROM state_versions o WHERE o.id <> v.id""")
    for path in ("/v1/states/a", "/v1/native/states/b/-/versions/1"):
        reply = encrypted_server.request("GET", path)
        assert reply.status == 502, (path, reply.status)
        assert reply.error_code == "stored_version_unauthentic"
        assert b"Traceback" not in reply.body
    pulled = run_kl("state", "pull", "a", env=kl_environment(encrypted_server.base_url,
                                                             tmp_path))
    assert pulled.code == 5 and "stored_version_unauthentic" in pulled.err


@POSTGRES_ONLY
def test_a_wrong_key_file_is_refused_at_start(kilolock_server_factory: Any, key_file: Path,
                                              tmp_path: Path) -> None:
    """Versions written under one key; a server given another key file
    logs why it cannot serve, is not ready, and answers 503, never a
    version."""
    first = kilolock_server_factory(env={"KL_ENCRYPTION_KEYS": str(key_file)})
    post(first, "app", state_with(1, MARKER, SENSITIVE))
    first.stop()
    other = write_key_file(tmp_path / "other.toml", "2026-12", {"2026-12": secret()})
    server = kilolock_server_factory(env={"KL_ENCRYPTION_KEYS": str(other)})
    reply = server.request("GET", "/v1/states/app")
    assert (reply.status, reply.error_code) == (503, "encryption_keys_refused")
    assert server.request("GET", "/readyz").status == 503
    poll_until(lambda: "encryption key '2026-12' cannot open" in server.log_text(), 10,
               "the refusal in the log")


@POSTGRES_ONLY
def test_turning_encryption_off_step_by_step(kilolock_server_factory: Any, key_file: Path,
                                             postgres_dsn: str) -> None:
    """docs/at-rest.md's steps to turn encryption off: decrypt-versions while
    the server still has the key file (it keeps writing encrypted
    versions); restarted without it, the server answers 503
    encryption_keys_refused (not ready, the log says to run
    decrypt-versions) while a version written meanwhile is encrypted; a
    second decrypt-versions opens it and a pending upload's sealed chunks,
    and the same server then serves, without a restart: every version and
    the upload's commit."""
    keyed = kilolock_server_factory(env={"KL_ENCRYPTION_KEYS": str(key_file)})
    bodies = [state_with(serial, MARKER, SENSITIVE) for serial in (1, 2)]
    for body in bodies:
        post(keyed, "app", body)
    first = migrate("decrypt-versions", "--database", postgres_dsn, "--encryption-keys",
                    str(key_file))
    assert first.returncode == 0, first.stderr
    assert {kek for (kek,) in query(postgres_dsn, "SELECT kek_id FROM state_versions")} == {None}
    bodies.append(state_with(3, MARKER, SENSITIVE))
    post(keyed, "app", bodies[-1])  # written meanwhile: encrypted
    big = state_with(1, MARKER, SENSITIVE, count=40)
    opened = keyed.request("POST", "/v1/native/uploads", json.dumps(
        {"state": "big", "size": len(big), "sha256": hashlib.sha256(big).hexdigest()}).encode(),
        {"Content-Type": "application/json"})
    upload = json.loads(opened.body)["id"]
    assert keyed.request("PUT", f"/v1/native/uploads/{upload}?offset=0", big).status == 200
    keyed.stop()

    plain = kilolock_server_factory()
    refused = plain.request("GET", "/v1/states/app")
    assert (refused.status, refused.error_code) == (503, "encryption_keys_refused")
    assert refused.header(b"retry-after") == b"30"
    assert plain.request("GET", "/readyz").status == 503
    poll_until(lambda: "run kilolock-migrate decrypt-versions" in plain.log_text(), 10,
               "the refusal naming decrypt-versions in the log")
    second = migrate("decrypt-versions", "--database", postgres_dsn, "--encryption-keys",
                     str(key_file))
    assert second.returncode == 0, second.stderr
    assert "changed: 1\nchunks of upload sessions changed: 1" in second.stdout
    poll_until(lambda: plain.request("GET", "/v1/states/app").status == 200, 10,
               "the server serving once decrypt-versions has finished")
    assert plain.request("GET", "/readyz").status == 200
    for number, body in enumerate(bodies, start=1):
        assert plain.request("GET", f"/v1/native/states/app/-/versions/{number}").body == body
    assert plain.request("POST", f"/v1/native/uploads/{upload}/commit").status == 200
    assert plain.request("GET", "/v1/states/big").body == big
    status = migrate("status", "--database", postgres_dsn)
    assert "2026-12" not in status.stdout and "(not encrypted)" in status.stdout


def test_a_bad_key_file_is_a_usage_error(kilolock_server_factory: Any, tmp_path: Path) -> None:
    """A key file that cannot be used stops twistd before it starts."""
    broken = tmp_path / "broken.toml"
    broken.write_text('active = "k"\n[[keys]]\nid = "k"\nsecret = "c2hvcnQ="\n')
    with pytest.raises(AssertionError):
        kilolock_server_factory(env={"KL_ENCRYPTION_KEYS": str(broken)})


def distinct(serial: int) -> bytes:
    """A state whose every value changes with the serial: a full snapshot
    on PostgreSQL too (no delta base to keep), so both stores prune alike."""
    return state_body(serial, resources=[{
        "mode": "managed", "type": "null_resource", "name": f"n{index}",
        "provider": 'provider["registry.terraform.io/hashicorp/null"]',
        "instances": [{"schema_version": 0, "sensitive_attributes": [], "attributes": {
            "id": hashlib.sha256(f"{serial}/{index}".encode()).hexdigest()}}]}
        for index in range(20)])


def metric(server: KilolockServer, name: str) -> float:
    for line in server.request("GET", "/metrics").body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def test_background_pruning_and_kl(kilolock_server_factory: Any, tmp_path: Path) -> None:
    """A server pruning every second keeps the newest 2 versions of each
    state: tombstones in kl state history, /metrics counts them; kl purges
    (not the current version) and sets a state's retention."""
    server = kilolock_server_factory(env={"KL_RETENTION_VERSIONS": "2",
                                          "KL_RETENTION_INTERVAL": "0.5"})
    for serial in range(1, 5):
        post(server, "app", distinct(serial))
    poll_until(lambda: metric(server, "kilolock_versions_pruned_total") >= 2, 30,
               "the background pruning")
    assert metric(server, "kilolock_version_bytes_pruned_total") > 0
    assert metric(server, "kilolock_retention_last_run_timestamp_seconds") > 0
    env = kl_environment(server.base_url, tmp_path)
    history = run_kl("state", "history", "app", env=env).check()
    assert history.out.count("pruned ") == 2
    assert "retention: keep the newest 2 versions" in history.out
    refused = run_kl("state", "purge", "app", "--version", "4", "--reason", "leak", env=env)
    assert refused.code == 4 and "version_is_current" in refused.err
    run_kl("state", "purge", "app", "--version", "3", "--reason", "leaked key", env=env).check()
    history = run_kl("--json", "state", "history", "app", env=env).check().json()
    assert [entry["pruned"] is not None for entry in history["versions"]] == [
        True, True, True, False]
    assert history["versions"][2]["pruned"]["reason"] == "leaked key"
    gone = run_kl("state", "pull", "app", "--version", "3", env=env)
    assert gone.code == 3 and "version_pruned" in gone.err
    shown = run_kl("state", "retention", "app", "--versions", "5", env=env).check()
    assert "keep the newest 5 versions" in shown.out and "state's own override" in shown.out
    tenant = run_kl("--json", "retention", env=env).check().json()
    assert (tenant["source"], tenant["policy"]["versions"]) == ("server", 2)
    verify = run_kl("events", "verify", env=env)
    assert verify.code == 0, verify.out + verify.err
