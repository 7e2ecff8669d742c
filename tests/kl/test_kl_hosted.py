"""`kl` in hosted mode (KL_AUTH_MODE=database) on both stores: `kl tenants`
and `kl tokens` against the control API, then the tokens it issued used by
`kl` on the native lane (scoped to their workspace/environment, foreign
states missing, read-only tokens refused, revoked tokens unauthorised)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kilolock.kl.exits import EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_USAGE
from tests.support.hosted_support import HostedServer
from tests.support.kl_runner import KlResult, run_kl
from tests.support.state_samples import generation


def issue(kl: Callable[..., KlResult], slug: str, name: str, *extra: str) -> dict[str, Any]:
    token: dict[str, Any] = kl("--json", "tokens", "create", slug, "--name", name,
                               "--environment", "default", *extra).check().json()
    return token


def test_tenants_and_tokens_through_the_control_api(kl: Callable[..., KlResult]) -> None:
    """`kl tenants create/list/show/delete` and `kl tokens create/list/revoke`
    drive the control API; a token's secret is printed once, with its block."""
    created = kl("tenants", "create", "acme", "--name", "Acme Corp").check().out
    assert created.startswith("created tenant acme (tn_")
    assert "default" in created and "ws_" in created and "env_" in created
    listed = kl("tenants").check().out.splitlines()
    assert listed[0].split()[:3] == ["SLUG", "NAME", "ID"]
    assert [line.split()[0] for line in listed[1:]] == ["acme"]
    shown = kl("tenants", "show", "acme").check().out
    assert "name      Acme Corp" in shown and "states    0" in shown
    assert kl("--json", "tenants", "show", "acme").check().json()["slug"] == "acme"
    assert kl("tenants", "show", "nobody").code == EXIT_NOT_FOUND

    issued = kl("tokens", "create", "acme", "--name", "ci", "--environment", "default").check()
    assert issued.out.startswith("token_secret    kl_")
    assert 'backend "http"' in issued.out and "shown once" in issued.err
    token = issue(kl, "acme", "dashboard", "--scope", "read")
    assert (token["scope"], token["token_secret"][:3]) == ("read", "kl_")
    tokens = kl("tokens", "list", "acme").check().out
    assert tokens.count("tok_") == 2 and "kl_" not in tokens
    kl("tokens", "revoke", "acme", token["id"]).check()
    revoked = kl("--json", "tokens", "list", "acme").check().json()["tokens"]
    assert [t["active"] for t in revoked if t["id"] == token["id"]] == [False]

    refused = kl("tenants", "delete", "acme")
    assert refused.code == EXIT_USAGE and "--yes" in refused.err
    gone = kl("tenants", "delete", "acme", "--yes", "--delete-states").check().out
    assert gone == "deleted tenant acme: 0 states deleted, 1 token revoked\n"  # one was already
    assert kl("--json", "tenants").check().json()["tenants"] == []
    assert run_kl("tenants", env={"KL_CONTROL_URL": "http://127.0.0.1:9"}).code == EXIT_USAGE


def test_issued_tokens_on_the_native_lane(kl: Callable[..., KlResult], tmp_path: Path) -> None:
    """A tenant's write token pushes, lists and rolls back its own states (a
    bare name maps into its workspace/environment); another tenant's token
    finds nothing there; a read token cannot roll back; a revoked one is 401."""
    kl("tenants", "create", "acme").check()
    kl("tenants", "create", "globex").check()
    writer = issue(kl, "acme", "ci")
    reader = issue(kl, "acme", "dashboard", "--scope", "read")
    stranger = issue(kl, "globex", "ci")
    prefix = f"{writer['workspace_id']}/{writer['env_public_id']}"
    for serial, colour in ((1, "blue"), (2, "red")):
        path = tmp_path / f"{serial}.tfstate"
        path.write_bytes(generation(serial, colour, "s"))
        kl("state", "push", "app", str(path), token=writer["token_secret"]).check()

    states = kl("--json", "states", token=writer["token_secret"]).check().json()["states"]
    assert [s["name"] for s in states] == [f"{prefix}/app"]
    assert kl("--json", "state", "show", f"{prefix}/app",
              token=reader["token_secret"]).check().json()["serial"] == 2
    refused = kl("state", "rollback", "app", "1", token=reader["token_secret"])
    assert refused.code == EXIT_REFUSED and "[403 forbidden]" in refused.err
    kl("state", "rollback", "app", "1", token=writer["token_secret"]).check()
    assert kl("--json", "state", "show", "app",
              token=writer["token_secret"]).check().json()["serial"] == 3

    foreign = kl("state", "show", "app", token=stranger["token_secret"])
    assert foreign.code == EXIT_NOT_FOUND and "no such state" in foreign.err
    outside = kl("state", "show", f"{prefix}/app", token=stranger["token_secret"])
    assert outside.code == EXIT_REFUSED and "[403 forbidden]" in outside.err
    assert kl("--json", "states", token=stranger["token_secret"]).check().json()["states"] == []
    verified = kl("events", "verify", token=writer["token_secret"]).check().out
    assert "the audit chain verifies" in verified

    kl("tokens", "revoke", "acme", writer["id"]).check()
    revoked = kl("states", token=writer["token_secret"])
    assert revoked.code == EXIT_REFUSED and "[401 unauthorized]" in revoked.err


def test_refused_operations_leave_the_workspace_deletable(kl: Callable[..., KlResult],
                                                          hosted: HostedServer) -> None:
    """State operations refused while they run (a misspelt state, a split or
    a move into a new state of something that is not there) create no
    state: the tenant's state list stays empty and the workspace is deleted
    (not 409 not_empty)."""
    kl("tenants", "create", "acme").check()
    hosted.control.ok("POST", "/tenants/acme/workspaces", {"name": "scratch"}, 201)
    writer = issue(kl, "acme", "ci", "--workspace", "scratch")
    secret = writer["token_secret"]
    assert kl("state", "mv", "typo-name", "terraform_data.a", "terraform_data.b",
              token=secret).code == EXIT_NOT_FOUND
    assert kl("state", "split", "typo-name", "module.net=network",
              token=secret).code == EXIT_NOT_FOUND
    assert kl("state", "mv", "typo-name", "terraform_data.a", "terraform_data.a",
              "--to-state", "other", token=secret).code == EXIT_NOT_FOUND
    assert kl("--json", "states", token=secret).check().json()["states"] == []
    assert kl("--json", "tenants", "show", "acme").check().json()["state_count"] == 0
    deleted = hosted.control.call("DELETE", "/tenants/acme/workspaces/scratch")
    assert deleted.status == 200, deleted
