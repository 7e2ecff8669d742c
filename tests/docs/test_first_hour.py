"""The first hour of a new user, walked as the docs tell it: what kl prints
about locks (one "since": the server's), the hint of `kl tenants delete`,
a replaced resource in `kl state diff`, a port already in use, an embedded
PostgreSQL left behind by `kill -9`, and the docs' own instructions."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kilolock.kl.exits import EXIT_CONFLICT
from tests.support.fixtures_postgres import embedded_postgres_in_temporary_directory
from tests.support.fixtures_server import KilolockServer, ServerFactory, server_command
from tests.support.hosted_support import CONTROL_TOKEN, start_hosted_server
from tests.support.kl_runner import kl_environment, run_kl
from tests.support.log_events import logged
from tests.support.paths import REPO
from tests.support.stub_client import lock_body, state_body

ROOT = REPO


def test_kl_names_one_since_for_a_lock_the_servers(kilolock_server: KilolockServer,
                                                   tmp_path: Path) -> None:
    """A lock whose LockInfo says it was Created in 2001: `kl lock status`,
    a refused `kl state rollback` and a refused `kl state push` all name the
    server's time of acquisition, the same one, and never the client's."""
    env = kl_environment(kilolock_server.base_url, home=tmp_path)
    for serial in (1, 2):
        assert kilolock_server.with_body("POST", "/v1/states/app",
                                         state_body(serial)).status == 200
    info = lock_body("L-old", who="ann@laptop", created="2001-02-03T04:05:06Z")
    assert kilolock_server.with_body("LOCK", "/v1/states/app", info).status == 200
    status = run_kl("lock", "status", "app", env=env).check().out
    since = re.search(r"since\s+(\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ)", status)
    assert since is not None and not since.group(1).startswith("2001")
    refused = run_kl("state", "rollback", "app", "1", env=env)
    assert refused.code == EXIT_CONFLICT
    assert f"since {since.group(1)}" in refused.err and "2001" not in refused.err
    (tmp_path / "s.tfstate").write_bytes(state_body(9))
    pushed = run_kl("state", "push", "app", str(tmp_path / "s.tfstate"), env=env)
    assert pushed.code == EXIT_CONFLICT
    assert f"since {since.group(1)}" in pushed.err and "2001" not in pushed.err


def test_tenants_delete_suggests_its_own_option(kilolock_server_factory: ServerFactory,
                                                tmp_path: Path) -> None:
    """Deleting a tenant that has states tells the kl user to pass
    --delete-states (not the control API's ?states=delete)."""
    hosted = start_hosted_server(kilolock_server_factory)
    tenant = hosted.control.tenant("acme")
    address = f"/v1/states/{tenant.prefix}/app"
    assert hosted.with_body("POST", address, state_body(1), tenant.auth(tenant.write)).status \
        == 200
    env = kl_environment(hosted.base_url, home=tmp_path, KL_CONTROL_URL=hosted.control_url,
                         KL_CONTROL_TOKEN=CONTROL_TOKEN)
    refused = run_kl("tenants", "delete", "acme", "--yes", env=env)
    assert refused.code == EXIT_CONFLICT
    assert "--delete-states" in refused.err and "?states=" not in refused.err
    run_kl("tenants", "delete", "acme", "--yes", "--delete-states", env=env).check()


def test_kl_state_diff_shows_a_replaced_resource_as_a_replacement(
        kilolock_server: KilolockServer, tmp_path: Path) -> None:
    """An instance destroyed and created again (a new id) is `-/+`; one
    updated in place keeps `~`."""
    env = kl_environment(kilolock_server.base_url, home=tmp_path)

    def state(serial: int, ident: str, value: str) -> bytes:
        return state_body(serial, resources=[{
            "mode": "managed", "type": "terraform_data", "name": name,
            "provider": 'provider["terraform.io/builtin/terraform"]',
            "instances": [{"schema_version": 0, "sensitive_attributes": [],
                           "attributes": {"id": f"{ident}-{name}", "input": value}}]}
            for name in ("kept", "swapped")])

    first = state(1, "a", "x")
    second = json.loads(state(2, "a", "y"))
    second["resources"][1]["instances"][0]["attributes"]["id"] = "b-swapped"
    for body in (first, json.dumps(second).encode()):
        assert kilolock_server.with_body("POST", "/v1/states/app", body).status == 200
    diff = run_kl("state", "diff", "app", env=env).check().out.splitlines()
    assert "~ terraform_data.kept" in diff and "-/+ terraform_data.swapped" in diff
    assert any("id: a-swapped -> b-swapped" in line for line in diff)


def test_a_port_already_in_use_is_one_line_and_exit_status_1(tmp_path: Path) -> None:
    """Starting on a port another process holds ends at once with one log
    line naming the port and what to do, exit status 1, no traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            server_command("--listen", f"tcp:{port}:interface=127.0.0.1", "--store", "memory"),
            cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 1
    assert "Traceback" not in output
    (line,) = [text for text in output.splitlines() if "cannot listen" in text]
    assert f"127.0.0.1:{port}" in line and "--listen" in line


_KILLED = """
import os, signal, sys
from kilolock.store.postgres.embedded import EmbeddedPostgres
EmbeddedPostgres(sys.argv[1]).start_blocking()
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.postgres
@pytest.mark.slow  # a cluster of its own: initdb takes seconds
def test_an_embedded_postgres_left_by_kill_9_is_adopted_out_loud() -> None:
    """A process that started the embedded PostgreSQL and died with SIGKILL
    leaves it running; the next start adopts it and logs that it did."""
    with embedded_postgres_in_temporary_directory() as server:
        killed = subprocess.run([sys.executable, "-c", _KILLED, str(server.data_dir)],
                                capture_output=True, timeout=120, check=False)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        adopting = ("adopting an embedded PostgreSQL (pid {pid}) left running in {pgdata} by"
                    " a process that is gone (killed with -9, or it crashed); it is used as it"
                    " is and stopped with this server")
        with logged(adopting) as adopted:
            server.start_blocking()
        assert len(adopted) == 1 and adopted[0]["pgdata"] == str(server.pgdata)
        assert os.path.exists(server.pgdata / "postmaster.pid")


# -- the docs, as a new user reads them ---------------------------------------------


def _docs() -> dict[str, str]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "docs" / "examples").glob("*"))]
    return {path.name: path.read_text() for path in files if path.is_file()}


def _commands(text: str) -> list[str]:
    """The lines of a document's fenced code blocks (what a reader pastes)."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    return [line for block in blocks for line in block.splitlines()]


def test_no_install_command_names_a_package_that_is_not_published() -> None:
    """`pip install kilolock` cannot work (it is not on the package index):
    every install command the docs give installs from a checkout or a git
    URL."""
    specs = [(name, spec) for name, text in _docs().items() for line in _commands(text)
             for spec in re.findall(r"pip install (?:-\S+\s+)*(\S+)", line)]
    for name, spec in specs:
        assert not re.fullmatch(r"['\"]?kilolock(\[.*)?['\"]?", spec), (name, spec)
    kilolock_installs = {name for name, spec in specs
                         if spec in ("./kilolock", '"git+REPO-URL"')}
    assert kilolock_installs >= {"kl.md", "testing-terraform-modules.md"}


def test_user_facing_text_states_rules_not_decision_records() -> None:
    """No doc and no message cites "ADR 0018": they state the rule itself."""
    sources = [*ROOT.glob("docs/**/*.md"), *ROOT.glob("docs/examples/*"), ROOT / "README.md",
               *ROOT.glob("kilolock/**/*.py")]
    for path in sources:
        if path.is_file():
            assert "ADR 0018" not in path.read_text(), path
