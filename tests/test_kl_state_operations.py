"""`kl` against live servers (both stores) for what the native lane's write
side adds: sliced pulls, operations followed, cancelled and shown, and the
exit codes of their failures.  (With the real Terraform:
test_state_operations_terraform.py; through nginx: test_upload_sessions_live.py.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from fixtures_server import KilolockServer, ServerFactory
from kl_runner import KlResult, kl_environment, run_kl
from native_support import MONOLITH

from kilolock.kl.exits import EXIT_CONFLICT, EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_USAGE
from kilolock.tfstate import parse_state


@pytest.fixture
def hold(tmp_path: Path) -> Path:
    return tmp_path / "hold-operations"


@pytest.fixture
def server(kilolock_server_factory: ServerFactory, hold: Path) -> KilolockServer:
    started = kilolock_server_factory(env={"KL_TESTING_OPERATION_PAUSE_FILE": str(hold)})
    assert started.with_body("POST", "/v1/states/mono", MONOLITH).status == 200
    return started


@pytest.fixture
def kl(server: KilolockServer, tmp_path: Path) -> Callable[..., KlResult]:
    env = kl_environment(server.base_url, home=tmp_path / "home")
    return lambda *argv: run_kl(*argv, env=env)


def test_sliced_pulls(kl: Callable[..., KlResult], tmp_path: Path) -> None:
    """--module, --type, --address (repeatable), --outputs, --projected,
    --version and -o; --projected alone is a usage error."""
    sliced = kl("state", "pull", "mono", "--module", "module.net", "--address",
                "terraform_data.items[1]", "--type", "terraform_data").check()
    parsed = parse_state(sliced.raw)
    assert parsed.projection is not None and parsed.serial == parse_state(MONOLITH).serial
    assert {r.address for r in parsed.projection.resources} == set()
    either = kl("state", "pull", "mono", "--address", "module.net.terraform_data.vpc",
                "--address", "terraform_data.items[1]").check()
    assert [r["name"] for r in json.loads(either.raw)["resources"]] == ["items", "vpc"]
    projected = kl("state", "pull", "mono", "--type", "terraform_remote_state",
                   "--projected", "--version", "1").check().json()
    assert [r["address"] for r in projected["resources"]] == [
        "data.terraform_remote_state.peer"]
    target = tmp_path / "outputs.json"
    kl("state", "pull", "mono", "--outputs", "-o", str(target)).check()
    assert json.loads(target.read_text())["resources"] == []
    assert kl("state", "pull", "mono", "--projected").code == EXIT_USAGE
    assert kl("state", "pull", "mono", "--address", "not an address").code == EXIT_REFUSED


def test_an_operation_cancelled_while_it_waits(kl: Callable[..., KlResult], hold: Path,
                                               server: KilolockServer) -> None:
    """--no-wait prints the id; `kl operation cancel` while it is held before
    its write; it ends cancelled, writing nothing; `kl operation show`."""
    hold.touch()
    operation_id = kl("state", "split", "mono", "module.net=network",
                      "--no-wait").check().out.strip()
    assert operation_id.startswith("op_")
    cancelled = kl("--json", "operation", "cancel", operation_id).check().json()
    assert cancelled["cancelRequested"] is True
    hold.unlink()
    waited = kl("operation", "wait", operation_id)
    assert waited.code == EXIT_REFUSED and "cancelled" in waited.out
    shown = kl("--json", "operation", "show", operation_id).check().json()
    assert shown["status"] == "cancelled"
    assert server.request("GET", "/v1/states/network").status == 404
    versions = kl("--json", "state", "history", "mono").check().json()["versions"]
    assert len(versions) == 1


def test_exit_codes_of_failed_operations(kl: Callable[..., KlResult],
                                         server: KilolockServer) -> None:
    """An address that names nothing and a taken destination: 4; a state
    without a version: 3; an unknown operation: 3; a bad split part: 2."""
    nothing = kl("state", "rm", "mono", "terraform_data.ghost")
    assert nothing.code == EXIT_CONFLICT and "address_not_in_state" in nothing.out
    taken = kl("state", "mv", "mono", "terraform_data.old", "terraform_data.legacy")
    assert taken.code == EXIT_CONFLICT and "destination_exists" in taken.out
    assert kl("state", "rm", "nothing-here", "terraform_data.x").code == EXIT_NOT_FOUND
    assert kl("operation", "show", "op_000000000000000000000000").code == EXIT_NOT_FOUND
    assert kl("state", "split", "mono", "module.net").code == EXIT_USAGE
    assert kl("state", "mv", "mono", "module.a", "terraform_data.b").code == EXIT_REFUSED
