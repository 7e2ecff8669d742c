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

from kilolock.kl.exits import EXIT_CONFLICT, EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_USAGE
from kilolock.tfstate.parse import parse_state
from tests.support.fixtures_server import KilolockServer, ServerFactory
from tests.support.kl_runner import KlResult, kl_environment, run_kl, run_kl_script
from tests.support.native_support import MONOLITH
from tests.support.stub_client import lock_body, state_body, terraform_headers


@pytest.fixture
def hold(tmp_path: Path) -> Path:
    return tmp_path / "hold-operations"


@pytest.fixture
def server(kilolock_server_factory: ServerFactory, hold: Path) -> KilolockServer:
    started = kilolock_server_factory(hooks=("--operation-pause-file", str(hold)))
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
    assert (waited.code, waited.raw) == (EXIT_REFUSED, b"")
    assert waited.err == (f"kl: operation {operation_id} (kl state split mono) was cancelled"
                          " before it wrote anything [cancelled]\n")
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
    assert nothing.code == EXIT_CONFLICT and "[address_not_in_state]" in nothing.err
    taken = kl("state", "mv", "mono", "terraform_data.old", "terraform_data.legacy")
    assert taken.code == EXIT_CONFLICT and "[destination_exists]" in taken.err
    assert kl("state", "rm", "nothing-here", "terraform_data.x").code == EXIT_NOT_FOUND
    assert kl("operation", "show", "op_000000000000000000000000").code == EXIT_NOT_FOUND
    assert kl("state", "split", "mono", "module.net").code == EXIT_USAGE
    assert kl("state", "mv", "mono", "module.a", "terraform_data.b").code == EXIT_REFUSED


def test_every_failure_is_one_line_on_stderr(server: KilolockServer, tmp_path: Path,
                                             hold: Path) -> None:
    """The kl script, run as a process: whether a state operation is refused
    before it starts (a bad address, a lock) or fails while it runs (an
    address that names nothing, a state without a version, an import's
    serial check, a cancel), stdout is empty and stderr is one line naming
    the error's code, with the documented exit code -- --json or not."""
    env = kl_environment(server.base_url, home=tmp_path / "home")
    lineage = parse_state(MONOLITH).lineage
    older = tmp_path / "older.tfstate"
    older.write_bytes(state_body(1, lineage=lineage))

    def fails(code: int, marker: str, *argv: str) -> str:
        for extra in ((), ("--json",)):
            result = run_kl_script(*extra, *argv, env=env)
            assert (result.code, result.raw) == (code, b""), (argv, result)
            assert result.err.count("\n") == 1 and result.err.startswith("kl: "), result.err
            assert marker in result.err, result.err
        return result.err

    fails(EXIT_CONFLICT, "[address_not_in_state]", "state", "rm", "mono", "terraform_data.x")
    fails(EXIT_CONFLICT, "[destination_exists]", "state", "mv", "mono", "terraform_data.old",
          "terraform_data.legacy")
    fails(EXIT_NOT_FOUND, "[version_not_found]", "state", "mv", "typo-name",
          "terraform_data.old", "terraform_data.new")
    fails(EXIT_CONFLICT, "[serial_too_low]", "state", "import", "mono", str(older))
    fails(EXIT_REFUSED, "[400 invalid_field]", "state", "split", "mono",
          "terraform_data.old=elsewhere")
    fails(EXIT_REFUSED, "[400 invalid_field]", "state", "mv", "mono", "module.a",
          "terraform_data.b")
    held = lock_body("terraform-apply", who="ci@runner")
    assert server.request("LOCK", "/v1/states/mono", body=held,
                          headers=terraform_headers(held)).status == 200
    line = fails(EXIT_CONFLICT, "[423 locked]", "state", "rm", "mono", "terraform_data.old")
    assert "locked by ci@runner" in line
    assert server.request("UNLOCK", "/v1/states/mono", body=held,
                          headers=terraform_headers(held)).status == 200
    hold.touch()
    operation_id = run_kl_script("state", "rm", "mono", "terraform_data.old", "--no-wait",
                                 env=env).check().out.strip()
    run_kl_script("operation", "cancel", operation_id, env=env).check()
    hold.unlink()
    fails(EXIT_REFUSED, "[cancelled]", "operation", "wait", operation_id)
    assert [v["kind"] for v in run_kl_script("--json", "state", "history", "mono", env=env)
            .check().json()["versions"]] == ["state_write"]
