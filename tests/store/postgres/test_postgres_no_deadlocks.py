"""Concurrent writers never deadlock in PostgreSQL: every transaction that
touches a tenant's states, locks, versions and chain head takes its row
locks in one order (the state row, its lock row, its versions, the chain
head last; see kilolock/store/schema/upgrade/006_write_path.sql).

Two real Kilolock processes on one embedded PostgreSQL, 16 clients creating
200 states at once with Terraform's LOCK -> POST ?ID= -> UNLOCK (the case
that used to deadlock on the tenant row: a fleet's first applies): every
request answers 200 (no 503: a retry inside Kilolock is never an answer),
and PostgreSQL's own log says no "deadlock detected"."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kilolock.store.postgres.embedded import EmbeddedPostgres
from tests.support.fixtures_postgres import embedded_postgres_in_temporary_directory
from tests.support.fixtures_server import KilolockServer, clean_environment, server_command
from tests.support.stub_client import lock_body, state_body

pytestmark = pytest.mark.postgres

STATES = 200
CLIENTS = 16


@pytest.fixture
def own_postgres() -> Iterator[EmbeddedPostgres]:
    """A cluster of this test's own, so that its log holds only this test."""
    with embedded_postgres_in_temporary_directory() as server:
        server.start_blocking()
        yield server


def start_server(dsn: str, directory: Path) -> KilolockServer:
    return KilolockServer(
        server_command("--listen", "tcp:0:interface=127.0.0.1", "--store", "postgres",
                       "--database", dsn),
        clean_environment(), cwd=directory, log_path=directory / "server.log").start()


def create_states(servers: list[KilolockServer], names: list[str],
                  answers: list[tuple[str, str, int]]) -> None:
    """One client: the write cycle on each of C{names}, alternating servers."""
    for index, name in enumerate(names):
        server = servers[index % len(servers)]
        lock_id = str(uuid.uuid4())
        lock = lock_body(lock_id)
        for method, path, body in (
                ("LOCK", f"/v1/states/{name}", lock),
                ("POST", f"/v1/states/{name}?ID={lock_id}", state_body(1)),
                ("UNLOCK", f"/v1/states/{name}", lock)):
            reply = server.with_body(method, path, body)
            answers.append((method, name, reply.status))


def test_two_processes_create_200_states_without_a_deadlock(own_postgres: EmbeddedPostgres,
                                                            tmp_path: Path) -> None:
    dsn = own_postgres.dsn("kilolock")
    servers = [start_server(dsn, tmp_path / f"server-{index}") for index in range(2)]
    try:
        names = [f"fleet-{index:03d}" for index in range(STATES)]
        answers: list[tuple[str, str, int]] = []
        clients = [threading.Thread(target=create_states,
                                    args=(servers, names[index::CLIENTS], answers))
                   for index in range(CLIENTS)]
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        listed = json.loads(servers[0].request("GET", "/v1/native/states").body)
    finally:
        for server in servers:
            server.stop()
    assert len(answers) == 3 * STATES
    assert [answer for answer in answers if answer[2] != 200] == []
    assert sorted(state["name"] for state in listed["states"]) == names
    log = (own_postgres.pgdata / "log").read_text(errors="replace")
    assert "deadlock detected" not in log
