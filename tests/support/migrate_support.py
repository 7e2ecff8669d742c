"""Values carried out of tests.migrate.test_migrate."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.fixtures_server import clean_environment

#: Seconds one run of the command may take (a new embedded cluster: initdb).
COMMAND_TIMEOUT = 120.0


SCRIPT = Path(sys.executable).parent / "kilolock-migrate"


def migrate(*args: str, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed C{kilolock-migrate ARGS}; its output as text."""
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT, env=clean_environment(env), cwd=cwd,
                          stdin=subprocess.DEVNULL, check=False)
