"""The deployment files (Dockerfile, docker-compose.yml, deploy/kilolock.service,
docs/nginx.conf) agree with Kilolock's options and with docs/deploying.md.

No Docker engine is needed: the commands the files run are parsed by twistd's
own option parser (with the Kilolock plugin), the compose file is read as
YAML, and the systemd unit is checked by ``systemd-analyze verify`` when that
is installed.
"""

from __future__ import annotations

import configparser
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.fixtures_server import clean_environment
from tests.support.paths import REPO

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
COMPOSE = REPO / "docker-compose.yml"
UNIT = REPO / "deploy" / "kilolock.service"
NGINX_CONF = REPO / "docs" / "nginx.conf"
DEPLOYING = REPO / "docs" / "deploying.md"
RUNNING = REPO / "docs" / "running.md"

#: Parses a twistd command line the way twistd does (the Kilolock plugin
#: included) and prints what it understood as JSON.
_PARSE_TWISTD = """
import json, sys
from twisted.scripts._twistd_unix import ServerOptions
options = ServerOptions()
options.parseOptions(sys.argv[1:])
sub = options.subOptions or {}
print(json.dumps({"nodaemon": bool(options["nodaemon"]), "pidfile": options["pidfile"],
                  "command": options.subCommand,
                  "kilolock": {key: sub.get(key) for key in ("listen", "store", "database")}}))
"""


def parse_twistd(arguments: list[str]) -> dict[str, Any]:
    """What twistd makes of C{twistd ARGUMENTS} (in a clean environment)."""
    result = subprocess.run([sys.executable, "-c", _PARSE_TWISTD, *arguments],
                            env=clean_environment(), capture_output=True, text=True,
                            timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"twistd rejects {arguments}:\n{result.stderr}"
    parsed: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return parsed


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    instructions = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions


def dockerfile_cmd() -> list[str]:
    commands = [rest for keyword, rest in dockerfile_instructions() if keyword == "CMD"]
    assert len(commands) == 1, commands
    command: list[str] = json.loads(commands[0])  # exec form: a JSON array
    return command


def unit_settings() -> dict[str, dict[str, list[str]]]:
    """The unit's sections and settings (a key may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        assert current is not None, f"a setting outside a section: {line!r}"
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def load_compose() -> dict[str, Any]:
    """docker-compose.yml as data: PyYAML in this interpreter, else the
    system python3's (Debian ships it), else the test is skipped."""
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        system_python = shutil.which("python3", path="/usr/bin:/bin")
        if system_python is None:
            pytest.skip("no YAML parser (PyYAML) to read docker-compose.yml")
        result = subprocess.run(
            [system_python, "-c", "import json, sys, yaml;"
             " print(json.dumps(yaml.safe_load(open(sys.argv[1]))))", str(COMPOSE)],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if result.returncode != 0 and "No module named 'yaml'" in result.stderr:
            pytest.skip("no YAML parser (PyYAML) to read docker-compose.yml")
        assert result.returncode == 0, result.stderr
        loaded: dict[str, Any] = json.loads(result.stdout)
        return loaded
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def interpolate_defaults(value: str) -> str:
    """C{value} with every compose C{${VAR:-default}} replaced by its default."""
    return re.sub(r"\$\{[A-Z_][A-Z0-9_]*:-([^}]*)\}", r"\1", value)


# -- Dockerfile --------------------------------------------------------------------


def test_dockerfile_is_python_311_slim_and_runs_as_a_non_root_user() -> None:
    """The image starts FROM python:3.11-slim and its final USER is a
    created, non-root user."""
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    users = [rest for keyword, rest in instructions if keyword == "USER"]
    assert users and users[-1] not in ("root", "0", "0:0")
    created = [rest for keyword, rest in instructions
               if keyword == "RUN" and "useradd" in rest]
    assert created and users[-1] in created[0].split()


def test_dockerfile_cmd_is_a_valid_twistd_kilolock_command_line() -> None:
    """The image's CMD is `twistd -n --pidfile= kilolock --listen tcp:8080`,
    and twistd's own parser (with the Kilolock plugin) accepts it: foreground,
    no pidfile, the kilolock plugin, listening on the EXPOSEd port."""
    command = dockerfile_cmd()
    assert command[0] == "twistd"
    parsed = parse_twistd(command[1:])
    assert parsed["nodaemon"] is True
    assert parsed["pidfile"] == ""
    assert parsed["command"] == "kilolock"
    assert parsed["kilolock"]["listen"] == "tcp:8080"
    exposed = [rest for keyword, rest in dockerfile_instructions() if keyword == "EXPOSE"]
    assert exposed[0].split() == ["8080", "8090"]


def test_dockerfile_copies_everything_the_package_build_reads() -> None:
    """Every file setup.cfg's build reads (pyproject.toml, setup.cfg, the
    long description, every package directory and its package data) is
    inside something the Dockerfile COPYs and that .dockerignore lets through."""
    copied = []
    for keyword, rest in dockerfile_instructions():
        if keyword == "COPY":
            *sources, _destination = rest.split()
            copied.extend(sources)
    for source in copied:
        assert (REPO / source).exists(), source
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    needed = ["pyproject.toml", "setup.cfg"]
    needed += [value.split("file:", 1)[1].strip()
               for value in config["metadata"].values() if value.strip().startswith("file:")]
    needed += [package.replace(".", "/") for package
               in config["options"]["packages"].split()]
    needed += [f"{package.replace('.', '/')}/{pattern.strip()}"
               for package, pattern in config["options.package_data"].items()]
    for path in needed:
        assert any(path == source or path.startswith(source.rstrip("/") + "/")
                   for source in copied), f"{path} is not copied into the image"
    allowed = {line[1:].rstrip("/") for line in DOCKERIGNORE.read_text().splitlines()
               if line.startswith("!")}
    assert set(copied) <= allowed, f"{set(copied) - allowed} are excluded by .dockerignore"


# -- docker-compose.yml ------------------------------------------------------------


def test_compose_runs_kilolock_against_a_healthy_postgres_16() -> None:
    """The compose file has postgres:16 with a pg_isready healthcheck and a
    named volume, and Kilolock built from the Dockerfile, started once the
    database is healthy, with KL_DATABASE_URL naming that service, user,
    password and database."""
    compose = load_compose()
    postgres = compose["services"]["postgres"]
    kilolock = compose["services"]["kilolock"]
    assert postgres["image"] == "postgres:16"
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    [volume] = postgres["volumes"]
    assert volume.split(":")[0] in compose["volumes"]
    assert volume.split(":")[1] == "/var/lib/postgresql/data"

    assert kilolock["build"] == "."
    assert kilolock["depends_on"]["postgres"]["condition"] == "service_healthy"
    url = urlsplit(interpolate_defaults(kilolock["environment"]["KL_DATABASE_URL"]))
    environment = {name: interpolate_defaults(str(value))
                   for name, value in postgres["environment"].items()}
    assert url.scheme == "postgresql"
    assert (url.hostname, url.port) == ("postgres", 5432)
    assert url.username == environment["POSTGRES_USER"]
    assert url.password == environment["POSTGRES_PASSWORD"]
    assert url.path == "/" + environment["POSTGRES_DB"]
    # The password variable feeds both services.
    assert ("${POSTGRES_PASSWORD" in kilolock["environment"]["KL_DATABASE_URL"]
            and "${POSTGRES_PASSWORD" in postgres["environment"]["POSTGRES_PASSWORD"])


def test_compose_publishes_the_port_the_image_listens_on_to_localhost_only() -> None:
    """Kilolock's published ports map to the Dockerfile's listening port and
    the control API's default port, on 127.0.0.1 only; PostgreSQL publishes
    nothing."""
    compose = load_compose()
    state_lane, control = compose["services"]["kilolock"]["ports"]
    listen = dockerfile_cmd()[dockerfile_cmd().index("--listen") + 1]
    for mapping, port in ((state_lane, listen.split(":")[1]), (control, "8090")):
        host_address, _host_port, container_port = interpolate_defaults(mapping).split(":")
        assert host_address == "127.0.0.1"
        assert container_port == port
    assert "ports" not in compose["services"]["postgres"]


# -- systemd -----------------------------------------------------------------------


def test_systemd_unit_runs_twistd_kilolock_with_an_environment_file() -> None:
    """The unit runs `twistd --nodaemon --pidfile= kilolock` (twistd's parser
    accepts it) as a dedicated user, with its settings from an EnvironmentFile."""
    service = unit_settings()["Service"]
    [exec_start] = service["ExecStart"]
    binary, *arguments = shlex.split(exec_start)
    assert binary.endswith("/bin/twistd")
    parsed = parse_twistd(arguments)
    assert (parsed["nodaemon"], parsed["pidfile"], parsed["command"]) == (True, "", "kilolock")
    assert service["EnvironmentFile"] == ["/etc/kilolock/kilolock.env"]
    assert service["User"] == ["kilolock"]
    assert service["WorkingDirectory"] == ["/var/lib/kilolock"]
    assert service["StateDirectory"] == ["kilolock"]
    assert unit_settings()["Install"]["WantedBy"] == ["multi-user.target"]


def test_systemd_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    """`systemd-analyze verify` reports nothing about the unit (its twistd
    path pointed at this test run's twistd, which exists)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    twistd = Path(sys.executable).with_name("twistd")
    if not twistd.exists():
        pytest.skip(f"no twistd script next to {sys.executable}")
    unit = tmp_path / "kilolock.service"
    unit.write_text(UNIT.read_text().replace("/opt/kilolock/venv/bin/twistd", str(twistd)))
    result = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                            timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert (result.stdout + result.stderr).strip() == ""


# -- the documentation ---------------------------------------------------------------


def nginx_directives() -> set[str]:
    """Every directive name used (not commented out) in docs/nginx.conf."""
    names = set()
    for raw in NGINX_CONF.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        match = re.match(r"([a-z_]+)\b", line)
        if match:
            names.add(match.group(1))
    return names


def test_deploying_doc_describes_every_file_and_every_nginx_directive() -> None:
    """docs/deploying.md names each deployment file and explains every
    directive docs/nginx.conf uses (each appears in `backticks`)."""
    doc = DEPLOYING.read_text()
    for name in ("Dockerfile", "docker-compose.yml", "deploy/kilolock.service",
                 "docs/nginx.conf", ".dockerignore"):
        assert f"`{name}`" in doc, name
    structural = {"events", "http", "server", "location", "upstream"}
    directives = nginx_directives() - structural
    assert {"proxy_pass", "client_max_body_size", "proxy_request_buffering"} <= directives
    missing = sorted(name for name in directives if f"`{name}" not in doc)
    assert missing == [], f"docs/deploying.md does not explain {missing}"


def test_deploying_doc_shows_the_commands_the_files_run() -> None:
    """The commands quoted in docs/deploying.md are the ones the Dockerfile
    and the unit run, character for character."""
    doc = DEPLOYING.read_text()
    assert " ".join(dockerfile_cmd()) in doc
    [exec_start] = unit_settings()["Service"]["ExecStart"]
    assert f"ExecStart={exec_start}" in doc


def test_every_kilolock_variable_in_the_deployment_files_is_documented() -> None:
    """Each KL_* variable the deployment files and docs/deploying.md name is
    one Kilolock knows: listed by `twistd kilolock --help` or in
    docs/running.md (no misspelt setting is silently ignored)."""
    result = subprocess.run([sys.executable, "-m", "twisted", "kilolock", "--help"],
                            env=clean_environment(), capture_output=True, text=True,
                            timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    documented = set(re.findall(r"\b(KL_[A-Z_]+)\b", result.stdout))
    documented |= set(re.findall(r"`(KL_[A-Z_]+)`", RUNNING.read_text()))
    used = set()
    for path in (DOCKERFILE, COMPOSE, UNIT, DEPLOYING):
        used |= set(re.findall(r"\b(KL_[A-Z_]+)\b", path.read_text()))
    assert used, "no KL_* variable found"
    assert used <= documented, f"not in docs/running.md: {sorted(used - documented)}"
