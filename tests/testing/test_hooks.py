"""The hooks of Kilolock's own tests (kilolock.testing.hooks, run by
`python -m kilolock.testing.twist`): what they do, and that a production
server knows nothing of them.  Their use against a live server is in
tests/server/test_oidc_server.py (the token clock) and
tests/kl/test_kl_state_operations.py (the operation pause)."""

from __future__ import annotations

import sys
from pathlib import Path

from twisted.internet.defer import ensureDeferred
from twisted.internet.task import Clock

from kilolock.testing.hooks import FileClock, Options, pause_while_file_exists
from tests.support.fixtures_server import clean_environment, server_command
from tests.support.paths import REPO

#: What would mean a production module knows a test hook.
HOOK_WORDS = ("token-clock-file", "operation-pause-file", "KL_TESTING", "FileClock",
              "pause_while_file_exists", "kilolock.testing.hooks")


def test_no_production_module_names_a_hook() -> None:
    """Outside kilolock/testing/, no module (nor the plugin, nor
    kilolock.tac) names a hook: they live with the tests' tools only."""
    production = [path for path in (REPO / "kilolock").rglob("*.py")
                  if "testing" not in path.relative_to(REPO / "kilolock").parts]
    production += [REPO / "kilolock.tac", REPO / "twisted" / "plugins" / "kilolock_plugin.py"]
    assert len(production) > 100
    naming = sorted(f"{path.relative_to(REPO)}: {word}" for path in production
                    for word in HOOK_WORDS if word in path.read_text())
    assert naming == []


def test_a_production_server_refuses_the_hook_options(tmp_path: Path) -> None:
    """`twist kilolock --token-clock-file ...` is a usage error: only the
    test runner's plugin takes it."""
    import subprocess

    command = server_command("--store", "memory", "--token-clock-file",
                             str(tmp_path / "clock"))
    assert command[1:3] == ["-m", "twisted"]
    result = subprocess.run(command, env=clean_environment(), cwd=tmp_path, timeout=60,
                            capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert result.returncode != 0
    assert "option --token-clock-file not recognized" in result.stdout + result.stderr


def test_the_test_runner_takes_every_option_and_the_hooks() -> None:
    """The runner's kilolock options are twistd kilolock's plus the two
    hooks; with hooks, the fixtures start that runner."""
    options = Options()
    options.parseOptions(["--store", "memory", "--trusted-proxy", "10.0.0.0/8",
                          "--token-clock-file", "/clock", "--operation-pause-file", "/hold"])
    assert (options["store"], options["trusted-proxy"], options["token-clock-file"],
            options["operation-pause-file"]) == ("memory", ["10.0.0.0/8"], "/clock", "/hold")
    assert server_command("--store", "memory", hooks=("--operation-pause-file", "/hold")) == [
        sys.executable, "-m", "kilolock.testing.twist", "--log-format=text", "--log-file=-",
        "kilolock", "--store", "memory", "--operation-pause-file", "/hold"]


def test_the_file_clock_reads_its_file_and_keeps_the_reactors_timers(tmp_path: Path) -> None:
    """The time is the file's number; the reactor's while the file is
    missing or holds no number; timers run on the reactor."""
    reactor = Clock()
    reactor.advance(50)
    path = tmp_path / "clock"
    clock = FileClock(reactor, str(path))
    assert clock.seconds() == 50
    path.write_text("1700000000.5\n")
    assert clock.seconds() == 1700000000.5
    path.write_text("soon")
    assert clock.seconds() == 50
    fired: list[str] = []
    clock.callLater(3, fired.append, "late")
    assert len(clock.getDelayedCalls()) == 1
    reactor.advance(3)
    assert fired == ["late"]


def test_the_pause_holds_writes_while_its_file_exists(tmp_path: Path) -> None:
    """Before its write an operation waits while the file exists, and goes
    on once it is gone; the other steps never wait."""
    reactor = Clock()
    hold = tmp_path / "hold"
    hold.touch()
    pause = pause_while_file_exists(str(hold), reactor)
    assert ensureDeferred(pause("op-1", "locking")).called
    waiting = ensureDeferred(pause("op-1", "writing"))
    reactor.advance(1)
    assert not waiting.called
    hold.unlink()
    reactor.advance(0.05)
    assert waiting.called
