"""Running `kl` from tests: in-process (``main(argv)`` with captured output)
or as the installed console script (a subprocess)."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attrs import frozen

from kilolock.kl.main import main


@frozen
class KlResult:
    """What one kl command did: exit code, stdout (bytes and text), stderr."""

    code: int
    raw: bytes
    err: str

    @property
    def out(self) -> str:
        return self.raw.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.raw)

    def check(self, code: int = 0) -> KlResult:
        assert self.code == code, (f"kl exited {self.code}, expected {code}\n"
                                   f"--- stdout ---\n{self.out}\n--- stderr ---\n{self.err}")
        return self


def kl_environment(url: str | None = None, home: Path | None = None,
                   **extra: str) -> dict[str, str]:
    """An environment with no inherited KL_* setting and no user config file."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("KL_")}
    if home is not None:
        env["XDG_CONFIG_HOME"] = str(home / ".config")
        env["HOME"] = str(home)
    if url is not None:
        env["KL_URL"] = url
    env.update(extra)
    return env


def run_kl(*argv: str, env: Mapping[str, str]) -> KlResult:
    """``kl ARGV`` in this process."""
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    stderr = io.StringIO()
    code = main(list(argv), stdout=stdout, stderr=stderr, environ=env)
    stdout.flush()
    raw = stdout.buffer.getvalue()  # type: ignore[attr-defined]
    return KlResult(code, raw, stderr.getvalue())


def kl_script() -> str:
    """The installed `kl` console script of this interpreter's environment."""
    found = shutil.which("kl", path=str(Path(sys.executable).parent))
    assert found, "the kl console script is not installed next to this interpreter"
    return found


def run_kl_script(*argv: str, env: Mapping[str, str], timeout: float = 60.0,
                  stdin: bytes | None = None) -> KlResult:
    """``kl ARGV`` as a subprocess of the installed console script."""
    process = subprocess.run([kl_script(), *argv], env=dict(env), capture_output=True,
                             timeout=timeout, input=stdin)
    return KlResult(process.returncode, process.stdout, process.stderr.decode("utf-8", "replace"))
