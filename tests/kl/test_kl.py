"""`kl` against a live Kilolock server on each store (memory and PostgreSQL).

Most commands run in-process (``kilolock.kl.main.main``); the smoke tests at the
end run the installed console script.  The lane-discovery rules (encoded
paths, hung lanes) are in test_kl_discovery.py, the real-Terraform
walkthroughs in test_kl_terraform.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from kilolock.kl.commands.events import check_chain
from kilolock.kl.exits import (
    EXIT_BROKEN_CHAIN,
    EXIT_CONFLICT,
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
)
from tests.support.fixtures_server import STATIC_TOKEN, KilolockServer, ServerFactory
from tests.support.kl_runner import KlResult, kl_environment, kl_script, run_kl, run_kl_script
from tests.support.state_samples import ENVELOPE, LINEAGE, generation
from tests.support.stub_client import lock_body


class Kl:
    """kl bound to one server (and a private HOME, so no user config leaks in)."""

    def __init__(self, server: KilolockServer, home: Path, **env: str) -> None:
        self.server = server
        self.env = kl_environment(server.base_url, home=home, **env)

    def __call__(self, *argv: str) -> KlResult:
        return run_kl(*argv, env=self.env)

    def json(self, *argv: str) -> Any:
        return self("--json", *argv).check().json()


@pytest.fixture
def kl(kilolock_server: KilolockServer, tmp_path: Path) -> Kl:
    return Kl(kilolock_server, tmp_path / "home")


def write_file(tmp_path: Path, name: str, body: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(body)
    return str(path)


# -- states, show, history, pull, push ---------------------------------------------------


def test_push_then_states_show_history_and_pull(kl: Kl, tmp_path: Path) -> None:
    """Pushed files become versions: `states` lists them, `state show` and
    `state history` describe them, `state pull` prints their exact bytes."""
    first, second = generation(1, "blue", "s1"), generation(2, "green", "s2", extra=True)
    kl("state", "push", "app", write_file(tmp_path, "1.tfstate", first)).check()
    pushed = kl("state", "push", "app", write_file(tmp_path, "2.tfstate", second)).check()
    assert "serial 2" in pushed.out

    table = kl("states").check().out.splitlines()
    assert table[0].split() == ["NAME", "SERIAL", "VERSIONS", "RESOURCES", "SIZE", "UPDATED",
                                "LOCKED", "BY", "READY"]
    assert table[1].split()[:4] == ["app", "2", "2", "3"] and table[1].split()[-1] == "yes"
    listed = kl.json("states")["states"]
    assert [(s["name"], s["serial"], s["lineage"]) for s in listed] == [("app", 2, LINEAGE)]

    show = kl("state", "show", "app").check().out
    assert "serial     2" in show and "version    2 of 2" in show
    assert "Locked     False   Unlocked" in show and "Projected  True" in show
    assert kl.json("state", "show", "app")["resourceCount"] == 3

    history = kl("state", "history", "app").check().out.splitlines()
    assert [line.split()[:2] for line in history[1:]] == [["1", "1"], ["*2", "2"]]
    assert kl.json("state", "history", "app")["versions"][0]["size"] == len(first)

    assert kl("state", "pull", "app").check().raw == second
    assert kl("state", "pull", "app", "--version", "1").check().raw == first
    out_file = tmp_path / "pulled.tfstate"
    kl("state", "pull", "app", "--version", "2", "-o", str(out_file)).check()
    assert out_file.read_bytes() == second


def test_push_makes_terraforms_checks(kl: Kl, tmp_path: Path) -> None:
    """Lower serials and other lineages are refused (exit 4) unless --force,
    which writes above the remote serial; an equal serial with new content is
    bumped; identical bytes push nothing; a non-state is exit 1."""
    kl("state", "push", "app", write_file(tmp_path, "5.tfstate", generation(5, "a", "s"))) \
        .check()
    older = kl("state", "push", "app", write_file(tmp_path, "3.tfstate", generation(3, "b", "s")))
    assert older.code == EXIT_CONFLICT and "newer (serial 5)" in older.err
    foreign = write_file(tmp_path, "other.tfstate", generation(9, "c", "s", lineage="other"))
    unrelated = kl("state", "push", "app", foreign)
    assert unrelated.code == EXIT_CONFLICT and "unrelated state (lineage" in unrelated.err
    assert [v["serial"] for v in kl.json("state", "history", "app")["versions"]] == [5]

    forced = kl.json("state", "push", "app", str(tmp_path / "3.tfstate"), "--force")
    assert (forced["serial"], forced["pushed"]) == (6, True)
    pulled = json.loads(kl("state", "pull", "app").check().raw)
    assert (pulled["serial"], pulled["resources"][0]["instances"][0]["attributes"]["input"]) \
        == (6, "b")
    kl("state", "push", "app", foreign, "--force").check()
    assert json.loads(kl("state", "pull", "app").check().raw)["lineage"] == "other"

    assert json.loads(kl("state", "pull", "app").check().raw)["serial"] == 9
    same_serial = write_file(tmp_path, "9.tfstate", generation(9, "d", "s", lineage="other"))
    kl("state", "push", "app", same_serial).check()
    bumped = json.loads(kl("state", "pull", "app").check().raw)
    assert (bumped["serial"], bumped["resources"][0]["instances"][0]["attributes"]["input"]) \
        == (10, "d")
    again = kl("state", "push", "app", write_file(tmp_path, "10.tfstate",
                                                  kl("state", "pull", "app").raw))
    assert again.check().out == "" and "nothing to push" in again.err

    broken = kl("state", "push", "app", write_file(tmp_path, "bad.tfstate", b"{\"version\": 3}"))
    assert broken.code == EXIT_REFUSED and "not a state" in broken.err
    assert kl("state", "push", "a/b", same_serial).code == EXIT_USAGE
    assert kl("state", "push", "app", str(tmp_path / "missing.tfstate")).code == EXIT_USAGE
    events = kl.json("events", "--state", "app")["events"]
    assert {e["kind"] for e in events} == {"lock_acquire", "state_write", "lock_release"}


def test_push_shows_a_progress_bar_for_a_large_file(kl: Kl, tmp_path: Path) -> None:
    """--progress draws a bar on stderr up to 100%; the bytes arrive intact."""
    big = generation(1, "x" * (3 << 20), "s")
    result = kl("state", "push", "big", write_file(tmp_path, "big.tfstate", big),
                "--progress").check()
    assert "uploading" in result.err and "100%" in result.err
    assert kl("state", "pull", "big").check().raw == big
    quiet = kl("state", "push", "big2", str(tmp_path / "big.tfstate")).check()
    assert "uploading" not in quiet.err  # stderr is no terminal here


def test_push_while_someone_holds_the_lock(kl: Kl, tmp_path: Path) -> None:
    """push locks the state: while another client holds it, push fails with
    the holder (exit 4); --lock-id writes under a lock the caller holds."""
    path = write_file(tmp_path, "1.tfstate", generation(1, "a", "s"))
    kl("state", "push", "app", path).check()
    kl.server.with_body("LOCK", "/v1/states/app", lock_body("L-bob", who="bob@ci"))
    refused = kl("state", "push", "app", write_file(tmp_path, "2.tfstate",
                                                    generation(2, "b", "s")))
    assert refused.code == EXIT_CONFLICT and "bob@ci" in refused.err and "L-bob" in refused.err
    kl("state", "push", "app", str(tmp_path / "2.tfstate"), "--lock-id", "L-bob").check()
    assert json.loads(kl("state", "pull", "app").raw)["serial"] == 2
    assert kl.json("lock", "status", "app")["lock"]["id"] == "L-bob"


# -- diff, outputs, rollback -----------------------------------------------------------


def test_diff_and_outputs_never_show_secrets(kl: Kl, tmp_path: Path) -> None:
    """`state diff` shows added/changed addresses and paths, `outputs` the
    outputs; sensitive values appear in neither, as text or JSON."""
    kl("state", "push", "app", write_file(tmp_path, "1", generation(1, "blue", "hunter2"))) \
        .check()
    kl("state", "push", "app", write_file(tmp_path, "2", generation(2, "green", "hunter3",
                                                                     extra=True))).check()
    diff = kl("state", "diff", "app", "1", "2").check().out
    assert diff.splitlines() == [
        "app: version 1 (serial 1) -> version 2 (serial 2)",
        "+ terraform_data.cache[0]",
        "~ terraform_data.app",
        "    input: blue -> green",
        "    tags.Name: app-blue -> app-green",
        "    password: (sensitive value changed)",
        "~ output.colour: blue -> green",
        "~ output.secret: (sensitive value changed)",
    ]
    assert kl("state", "diff", "app").check().out == diff
    as_json = kl("--json", "state", "diff", "app", "1", "2").check()
    assert as_json.json()["resources"]["added"] == [{"address": "terraform_data.cache[0]"}]
    outputs = kl("outputs", "app").check().out
    assert outputs.split() == ["OUTPUT", "VALUE", "colour", "green", "secret", "(sensitive)"]
    older = kl.json("outputs", "app", "--version", "1")
    assert older["outputs"][0]["value"] == "blue"
    for text in (diff, as_json.out, outputs, json.dumps(older)):
        assert "hunter" not in text
    missing = kl("state", "diff", "app", "1", "9")
    assert missing.code == EXIT_NOT_FOUND and "no version 9" in missing.err


def test_rollback_restores_a_version_and_is_audited(kl: Kl, tmp_path: Path) -> None:
    """`state rollback NAME N` makes version N current again with a new serial;
    history and events show the rollback."""
    first = generation(1, "blue", "s")
    kl("state", "push", "app", write_file(tmp_path, "1", first)).check()
    kl("state", "push", "app", write_file(tmp_path, "2", generation(2, "red", "s"))).check()
    done = kl("state", "rollback", "app", "1").check()
    assert "restored version 1 of app as version 3 (serial 3" in done.out
    restored = json.loads(kl("state", "pull", "app").check().raw)
    expected = json.loads(first)
    expected["serial"] = 3
    assert restored == expected
    history = kl("state", "history", "app").check().out
    assert "rollback to 1" in history.splitlines()[-1]
    (event,) = kl.json("events", "--kind", "state_rollback")["events"]
    assert (event["state"], event["serial"], event["detail"]["restored_version"]) == (
        "app", 3, 1)
    assert kl("state", "diff", "app", "1", "3").check().out.endswith("no changes\n")
    assert kl("state", "rollback", "app", "7").code == EXIT_NOT_FOUND
    assert kl("state", "rollback", "nothing", "1").code == EXIT_NOT_FOUND
    kl("state", "push", "sealed", write_file(tmp_path, "e", ENVELOPE)).check()
    sealed = kl("state", "rollback", "sealed", "1")
    assert sealed.code == EXIT_CONFLICT and "encrypted" in sealed.err


# -- locks -------------------------------------------------------------------------------


def test_lock_status_rollback_under_lock_and_force_unlock(kl: Kl, tmp_path: Path) -> None:
    """`lock status` shows the holder and age; rollback is refused under
    someone else's lock (exit 4) and allowed with --lock-id; `unlock` needs
    --force and then releases it (audited as lock_force_release)."""
    kl("state", "push", "app", write_file(tmp_path, "1", generation(1, "a", "s"))).check()
    kl("state", "push", "app", write_file(tmp_path, "2", generation(2, "b", "s"))).check()
    assert kl("lock", "status", "app").check().out == "app is not locked\n"
    kl.server.with_body("LOCK", "/v1/states/app", lock_body("L-ann", who="ann@laptop"))
    status = kl("lock", "status", "app").check().out
    assert "app is locked" in status and "ann@laptop" in status and "L-ann" in status
    assert kl.json("lock", "status", "app")["lock"]["ageSeconds"] >= 0
    listed = kl("states").check().out
    assert "ann@laptop" in listed and listed.splitlines()[1].split()[-1] == "no"

    refused = kl("state", "rollback", "app", "1")
    assert refused.code == EXIT_CONFLICT
    assert "locked by ann@laptop (OperationTypeApply" in refused.err and "L-ann" in refused.err
    kl("state", "rollback", "app", "1", "--lock-id", "L-ann").check()

    unforced = kl("unlock", "app")
    assert unforced.code == EXIT_USAGE and "--force" in unforced.err
    released = kl("unlock", "app", "--force").check().out
    assert "ann@laptop" in released and "L-ann" in released
    assert kl("lock", "status", "app").check().out == "app is not locked\n"
    assert kl("unlock", "app", "--force").check().out.startswith("app is not locked")
    kinds = [e["kind"] for e in kl.json("events", "--state", "app")["events"]]
    assert kinds[-2:] == ["state_rollback", "lock_force_release"]


# -- resources, events ---------------------------------------------------------------------


def test_resources_search_filters(kl: Kl, tmp_path: Path) -> None:
    """`resources search` filters by type, address pattern, module, attribute
    and state, across the tenant's states."""
    kl("state", "push", "app", write_file(tmp_path, "1", generation(1, "blue", "s"))).check()
    kl("state", "push", "ws1/prod/net", write_file(tmp_path, "2",
                                                   generation(1, "red", "s", extra=True))).check()
    rows = kl("resources", "search", "--address", "*.app").check().out.splitlines()
    assert [row.split()[:2] for row in rows[1:]] == [["app", "terraform_data.app"],
                                                    ["ws1/prod/net", "terraform_data.app"]]
    by_module = kl.json("resources", "search", "--module", "module.data")["resources"]
    assert {r["state"] for r in by_module} == {"app", "ws1/prod/net"}
    by_value = kl("resources", "search", "--attr", "tags.Name=app-red", "--show", "input")
    assert by_value.check().out.splitlines()[1].split() == [
        "ws1/prod/net", "terraform_data.app", "terraform_data", "(root)", "red"]
    one_state = kl.json("resources", "search", "--state", "ws1/prod/net",
                        "--type", "terraform_data")
    assert len(one_state["resources"]) == 3
    limited = kl("resources", "search", "--limit", "1").check()
    assert "narrow the search" in limited.err
    none = kl("resources", "search", "--type", "nothing").check()
    assert none.out == "" and "no resource matches" in none.err
    assert kl("resources", "search", "--attr", "novalue").code == EXIT_USAGE


def test_events_filters_and_verify(kl: Kl, tmp_path: Path) -> None:
    """`events` lists the audit trail with filters; `events verify` checks the
    hash chain both on the server and in kl."""
    kl("state", "push", "app", write_file(tmp_path, "1", generation(1, "a", "s"))).check()
    kl("state", "push", "db", write_file(tmp_path, "2", generation(1, "a", "s"))).check()
    lines = kl("events").check().out.splitlines()
    assert len(lines) == 6 and "state_write" in lines[1] and "app" in lines[1]
    writes = kl.json("events", "--kind", "state_write")["events"]
    assert [(e["seq"], e["state"]) for e in writes] == [(2, "app"), (5, "db")]
    assert [e["seq"] for e in kl.json("events", "--state", "db", "--last", "2")["events"]] \
        == [5, 6]
    assert kl.json("events", "--all", "--since", "2999-01-01T00:00:00Z")["events"] == []
    every = kl.json("events", "--all")["events"]
    assert [e["seq"] for e in every] == [1, 2, 3, 4, 5, 6]
    verified = kl("events", "verify").check().out
    assert verified.startswith("the audit chain verifies: 6 events, head #6")
    assert kl.json("events", "verify")["verified"] is True
    assert check_chain(every, complete=True) is None
    tampered = [dict(e) for e in every]
    tampered[2]["principal"] = "mallory"
    assert check_chain(tampered, complete=True) == "event #3 does not match its hash"
    assert check_chain(every[:2] + every[3:], complete=True) == "event #3 is missing"
    assert EXIT_BROKEN_CHAIN == 7


def test_events_follow_prints_new_events(kl: Kl, tmp_path: Path) -> None:
    """`events --follow` (the console script) waits for new events and prints
    them as they happen; --stop-after ends it."""
    kl("state", "push", "app", write_file(tmp_path, "1", generation(1, "a", "s"))).check()
    follower = subprocess.Popen(
        [kl_script(), "events", "--follow", "--last", "1", "--interval", "0.2",
         "--stop-after", "2", "--kind", "state_write,state_rollback"],
        env=kl.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = follower.stdout.readline().decode()  # type: ignore[union-attr]
        assert "state_write" in first and " 2 " in f" {first.split()[0]} "
        kl("state", "push", "app", write_file(tmp_path, "2", generation(2, "b", "s"))).check()
        kl("state", "rollback", "app", "1").check()
        out, err = follower.communicate(timeout=30)
    finally:
        follower.kill()
    assert follower.returncode == 0, err
    fresh = out.decode().splitlines()
    assert ["state_write" in fresh[0], "state_rollback" in fresh[1]] == [True, True]


# -- errors, auth, configuration ---------------------------------------------------------------


def test_errors_have_clear_messages_and_exit_codes(kl: Kl, tmp_path: Path) -> None:
    """Not found is 3, a usage mistake 2, an unreachable server 5; each prints
    the server's own error code and message."""
    missing = kl("state", "show", "nothing")
    assert missing.code == EXIT_NOT_FOUND
    assert missing.err == "kl: state nothing: no such state [404 state_not_found]\n"
    assert kl("state", "pull", "nothing").code == EXIT_NOT_FOUND
    assert kl("state", "history", "a/b").code == EXIT_USAGE
    assert kl("frobnicate").code == EXIT_USAGE
    dots = kl("state", "show", "..")
    assert dots.code == EXIT_REFUSED
    assert dots.err == ("kl: state ..: '.' and '..' are not allowed as path segments"
                        " [400 dot_segment]\n")
    literal = kl("state", "show", "a%2Fb")  # a name, escaped on the wire: never a slash
    assert literal.code == EXIT_NOT_FOUND and "state a%2Fb: no such state" in literal.err
    bad = kl("--timeout", "-1", "states")
    assert bad.code == EXIT_USAGE
    dead = run_kl("states", env={**kl.env, "KL_URL": "http://127.0.0.1:9"})
    assert dead.code == EXIT_UNAVAILABLE and "cannot reach the server" in dead.err
    assert "connection refused" in dead.err


def test_static_token_from_environment_flag_or_config_file(
        kilolock_server_factory: ServerFactory, tmp_path: Path) -> None:
    """The token comes from --token, KL_TOKEN or kl.toml (in that order of
    precedence); a wrong or missing one is exit 1 with the 401 explained."""
    server = kilolock_server_factory(env={"KL_AUTH_MODE": "static",
                                          "KL_AUTH_TOKEN": STATIC_TOKEN})
    home = tmp_path / "home"
    env = kl_environment(server.base_url, home=home)
    anonymous = run_kl("states", env=env)
    assert anonymous.code == EXIT_REFUSED and "[401 unauthorized]" in anonymous.err
    assert run_kl("states", "--token", STATIC_TOKEN, env=env).code == 0
    assert run_kl("states", env={**env, "KL_TOKEN": STATIC_TOKEN}).code == 0
    config = home / ".config" / "kilolock" / "kl.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'url = "{server.base_url}"\ntoken = "{STATIC_TOKEN}"\n')
    config.chmod(0o600)
    no_env_url = {k: v for k, v in env.items() if k != "KL_URL"}
    from_file = run_kl("states", env=no_env_url)
    assert from_file.code == 0 and from_file.err == "kl: no states yet\n"
    assert run_kl("states", env={**no_env_url, "KL_TOKEN": "wrong"}).code == EXIT_REFUSED
    assert run_kl("states", "--token", "wrong", env=no_env_url).code == EXIT_REFUSED
    config.chmod(0o644)
    assert "readable by others" in run_kl("states", env=no_env_url).err
    other = tmp_path / "other.toml"
    other.write_text('url = "http://127.0.0.1:9"\n')
    assert run_kl("states", "--config", str(other), env=no_env_url).code == EXIT_UNAVAILABLE
    assert run_kl("states", env={**no_env_url, "KL_CONFIG": str(other)}).code == \
        EXIT_UNAVAILABLE
    other.write_text('tokne = "x"\n')
    typo = run_kl("states", "--config", str(other), env=no_env_url)
    assert typo.code == EXIT_USAGE and "unknown keys: tokne" in typo.err
    assert run_kl("states", "--config", str(tmp_path / "nope.toml"), env=env).code == \
        EXIT_USAGE


# -- the installed console script -------------------------------------------------------------


def test_console_script_smoke(kl: Kl, tmp_path: Path) -> None:
    """The installed `kl` script runs the same commands with the same exit
    codes; push reads stdin and pull writes exact bytes to stdout."""
    body = generation(1, "blue", "s")
    pushed = run_kl_script("state", "push", "app", "-", env=kl.env, stdin=body)
    assert pushed.check().out.startswith("pushed stdin to app: serial 1")
    assert run_kl_script("state", "pull", "app", env=kl.env).check().raw == body
    listed = run_kl_script("states", "--json", env=kl.env).check().json()
    assert [s["name"] for s in listed["states"]] == ["app"]
    missing = run_kl_script("state", "show", "nothing", env=kl.env)
    assert missing.code == EXIT_NOT_FOUND and "no such state" in missing.err
    usage = run_kl_script("unlock", env=kl.env)
    assert usage.code == EXIT_USAGE
    version = run_kl_script("--version", env=kl.env).check()
    assert version.out.startswith("kl ")
    assert run_kl_script("--help", env=kl.env).check().out.startswith("usage: kl")


def test_kl_is_a_console_script_that_starts_without_twisted() -> None:
    """setup.cfg's `kl` entry point is kilolock.kl.main:main, and importing it loads
    neither the reactor nor the web tree (a CLI starts fast)."""
    (entry,) = entry_points(group="console_scripts", name="kl")
    assert entry.value == "kilolock.kl.main:main"
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, kilolock.kl.main;"
         " print(sorted(m for m in sys.modules if m.startswith(('twisted.internet.reactor',"
         " 'kilolock.web', 'psycopg2'))))"], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"


def test_workspaces_list_shows_the_values_of_key_value_tags(
        kilolock_server: KilolockServer, tmp_path: Path) -> None:
    """`kl workspaces list` writes a tag as `kl workspaces create --tag`
    takes it: `team=ops` stays `team=ops`, a plain tag its key; a workspace
    without tags is `-`."""
    env = kl_environment(kilolock_server.base_url, home=tmp_path / "home")
    run_kl("workspaces", "create", "net-prod", "--tag", "network", "--tag", "team=ops",
           env=env).check()
    run_kl("workspaces", "create", "bare", env=env).check()
    rows = [line.split() for line in run_kl("workspaces", "list", env=env).check().out
            .splitlines()[1:]]
    assert {row[0]: row[-1] for row in rows} == {"bare": "-", "net-prod": "network,team=ops"}
