"""What PostgreSQL's files and a pg_dump hold of a state's secret, on a live
server whose database is in a cluster of the test's own (tests/support/disk_scan.py
reads every file of its data directory after a CHECKPOINT, zstd frames
decompressed):

  - with encryption keys, an upload session's chunks (a chunked push and an
    abandoned one) show the secret nowhere: not in a pg_dump taken mid-upload,
    not in the data directory once the sessions are over -- dead rows and
    the WAL included; the same steps without keys show it (so the check
    can fail);
  - a purged version's bytes stay in the tables' files until
    C{kilolock-migrate vacuum-purged}, and are gone from them after it (the
    WAL keeps them, as docs/at-rest.md says).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.at_rest_support import secret as new_key
from tests.support.at_rest_support import write_key_file
from tests.support.disk_scan import ScanCluster, ScanDatabase, Secret
from tests.support.fixtures_server import KilolockServer, StoreLaunch
from tests.support.migrate_support import migrate

pytestmark = pytest.mark.postgres

NATIVE = "/v1/native"
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def scan_cluster() -> Iterator[ScanCluster]:
    with ScanCluster.started() as cluster:
        yield cluster


@pytest.fixture
def scan_database(scan_cluster: ScanCluster) -> Iterator[ScanDatabase]:
    with scan_cluster.database() as database:
        yield database


@pytest.fixture
def server_store(scan_database: ScanDatabase) -> StoreLaunch:
    """The servers of these tests keep their states in the scanned cluster."""
    return StoreLaunch(("--store", "postgres", "--database", scan_database.dsn))


def state_holding(secret: Secret, serial: int, sensitive: bool) -> bytes:
    """A v4 state whose one resource holds the secret in an attribute marked
    sensitive (never in the projection), or in one that is not (the leak a
    purge is for)."""
    marks = [[{"type": "get_attr", "value": "password"}]] if sensitive else []
    return json.dumps({
        "version": 4, "terraform_version": "1.15.5", "serial": serial,
        "lineage": "7b1d5c1e-0000-4000-8000-0000000000d1", "outputs": {},
        "resources": [{"mode": "managed", "type": "aws_db_instance", "name": "main",
                       "provider": 'provider["registry.terraform.io/hashicorp/aws"]',
                       "instances": [{"schema_version": 1, "sensitive_attributes": marks,
                                      "attributes": {"id": "db-1", "password": secret.text}}]}],
    }, indent=2).encode() + b"\n"


def open_upload(server: KilolockServer, name: str, raw: bytes) -> str:
    reply = server.request("POST", f"{NATIVE}/uploads", json.dumps({
        "state": name, "size": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}).encode(),
        JSON)
    assert reply.status == 201, reply.body
    upload: str = json.loads(reply.body)["id"]
    return upload


def put_chunks(server: KilolockServer, upload: str, raw: bytes, size: int = 500) -> None:
    for offset in range(0, len(raw), size):
        reply = server.request("PUT", f"{NATIVE}/uploads/{upload}?offset={offset}",
                               raw[offset:offset + size],
                               {"Content-Type": "application/octet-stream"})
        assert reply.status == 200, reply.body


def upload_sessions(server: KilolockServer, cluster: ScanCluster, database: ScanDatabase,
                    secret: Secret) -> tuple[set[str], set[str], dict[str, set[str]]]:
    """A chunked push committed, then another abandoned (DELETE), both of a
    state holding C{secret} in a sensitive attribute.  @return: how a
    pg_dump taken mid-upload holds the secret, how one taken after the
    sessions holds it, and the data directory's files that hold it."""
    raw = state_holding(secret, 1, sensitive=True)
    upload = open_upload(server, "pushed", raw)
    put_chunks(server, upload, raw)
    mid_upload = cluster.dump_holding(database, secret)
    assert cluster.compressed_or_out_of_line(database) == []
    committed = server.request("POST", f"{NATIVE}/uploads/{upload}/commit")
    assert committed.status == 200, committed.body
    assert server.request("GET", "/v1/states/pushed").body == raw
    abandoned = open_upload(server, "abandoned", raw)
    put_chunks(server, abandoned, raw)
    assert server.request("DELETE", f"{NATIVE}/uploads/{abandoned}").status == 200
    assert cluster.compressed_or_out_of_line(database) == []
    return mid_upload, cluster.dump_holding(database, secret), cluster.files_holding(secret)


def test_an_encrypted_store_keeps_no_upload_chunk_readable(
        kilolock_server_factory: Any, scan_cluster: ScanCluster, scan_database: ScanDatabase,
        tmp_path: Path) -> None:
    """With a key file: a pg_dump taken while the chunks are in the
    database, a pg_dump once the sessions are over, and every file of the
    data directory (dead rows of the deleted chunks, their WAL, the version
    written) hold the secret nowhere -- not even inside a zstd frame."""
    keys = write_key_file(tmp_path / "keys.toml", "2026-12", {"2026-12": new_key()})
    server = kilolock_server_factory(env={"KL_ENCRYPTION_KEYS": str(keys)})
    secret = Secret.new()
    assert upload_sessions(server, scan_cluster, scan_database, secret) == (set(), set(), {})


def test_without_keys_the_same_scan_finds_the_chunks_and_the_version(
        kilolock_server_factory: Any, scan_cluster: ScanCluster,
        scan_database: ScanDatabase) -> None:
    """The same steps on a store without keys: the mid-upload dump shows the
    chunks' bytes, and the data directory shows them as they came (the
    deleted chunks' rows, the WAL) and inside the version's zstd frame: the
    scan of the test above finds a secret where there is one."""
    server = kilolock_server_factory()
    secret = Secret.new()
    mid_upload, after, files = upload_sessions(server, scan_cluster, scan_database, secret)
    assert mid_upload == {"raw"}
    assert after == {"zstd"}  # the version's payload; no chunk is left
    table_files = {how for path, hows in files.items()
                   if path.startswith(f"base/{scan_database.oid}/") for how in hows}
    assert table_files == {"raw", "zstd"}
    assert any(path.startswith("pg_wal/") for path in files)


def test_a_purged_version_leaves_the_table_files_with_vacuum_purged(
        kilolock_server_factory: Any, scan_cluster: ScanCluster,
        scan_database: ScanDatabase) -> None:
    """A version that leaked a secret in an attribute not marked sensitive
    (so in its payload and in the projection rows it had), then a version
    without it, then the purge: the tables' files still hold the secret
    (the rows PostgreSQL keeps until VACUUM); after `kilolock-migrate
    vacuum-purged` they hold it nowhere, as they are or in a zstd frame.
    The WAL still does (docs/at-rest.md: WAL and backups keep it longer)."""
    server = kilolock_server_factory()
    secret = Secret.new()
    leaked = state_holding(secret, 1, sensitive=False)
    clean = state_holding(Secret.new(), 2, sensitive=False)
    for raw in (leaked, clean):
        assert server.with_body("POST", "/v1/states/prod", raw).status == 200
    purged = server.request("POST", f"{NATIVE}/states/prod/-/versions/1/purge",
                            b'{"reason": "leaked the password"}', JSON)
    assert purged.status == 200, purged.body
    tables = f"base/{scan_database.oid}"
    assert scan_cluster.compressed_or_out_of_line(scan_database) == []
    before = scan_cluster.files_holding(secret, under=(tables,))
    assert {how for hows in before.values() for how in hows} == {"raw", "zstd"}
    vacuumed = migrate("vacuum-purged", "--database", scan_database.dsn)
    assert vacuumed.returncode == 0, vacuumed.stderr
    assert "state_versions: " in vacuumed.stdout and "resources: " in vacuumed.stdout
    assert scan_cluster.files_holding(secret, under=(tables,)) == {}
    assert scan_cluster.files_holding(secret, under=("pg_wal",))
    assert server.request("GET", "/v1/states/prod").body == clean
    assert server.request("GET", f"{NATIVE}/states/prod/-/versions/1").status == 410
