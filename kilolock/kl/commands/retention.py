"""C{kl state purge} (delete one version's bytes, e.g. a leaked secret,
leaving its tombstone), C{kl state retention} (a state's retention policy)
and C{kl retention} (the tenant's): the native API's
C{.../-/versions/N/purge} and C{.../retention}.  Changing either needs a
tenant admin's token."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kilolock.kl.arguments import STATE_NAME_HELP, CommandTree, positive_int
from kilolock.kl.context import Context, state_path
from kilolock.kl.exits import EXIT_USAGE, KlError
from kilolock.kl.output import Output, format_time

_JSON = {"Content-Type": "application/json"}


def limit(text: str) -> int | None:
    """A retention limit: a whole number from 1, or C{off} (no limit)."""
    if text.strip().lower() in ("off", "none"):
        return None
    return positive_int(text)


def _policy_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--versions", type=limit, default=argparse.SUPPRESS,
                        help="keep the newest N versions (off: no count limit)")
    parser.add_argument("--days", type=limit, default=argparse.SUPPRESS,
                        help="keep every version younger than D days (off: no age limit)")
    parser.add_argument("--clear", action="store_true",
                        help="remove the override (the next level's policy applies)")


def register(tree: CommandTree) -> None:
    purge = tree.command("purge", cmd_state_purge,
                         "delete one version's bytes (a leaked secret), leaving its tombstone"
                         " (tenant admins)", group="state")
    purge.add_argument("name", help=STATE_NAME_HELP)
    purge.add_argument("--version", type=positive_int, required=True,
                       help="the version to purge (not the current one)")
    purge.add_argument("--reason", required=True, help="why it must go (kept in history)")
    retention = tree.command("retention", cmd_state_retention,
                             "a state's retention policy: show it, or set its own"
                             " (tenant admins)", group="state")
    retention.add_argument("name", help=STATE_NAME_HELP)
    _policy_options(retention)
    tenant = tree.command("retention", cmd_retention,
                          "the tenant's retention policy: show it, or set it (tenant admins)")
    _policy_options(tenant)


def cmd_state_purge(ctx: Context, args: argparse.Namespace) -> int:
    return ctx.show(f"/states/{state_path(args.name)}/-/versions/{args.version}/purge",
                    f"purging version {args.version} of {args.name}", _print_purge,
                    method="POST", body=json.dumps({"reason": args.reason}).encode(),
                    headers=_JSON)


def _print_purge(out: Output, document: Any) -> None:
    version = document["version"]
    out.line(f"purged version {version['number']} of {document['state']} (serial"
             f" {version['serial']}, sha256 {version['sha256'][:12]}): its bytes are gone;"
             " its tombstone stays in the history")
    out.line("the database's files keep the bytes until the operator runs `kilolock-migrate"
             " vacuum-purged`, its WAL and backups longer: see docs/at-rest.md")


def _change(args: argparse.Namespace) -> tuple[str, bytes | None] | None:
    """The request a policy command makes: None to show, else the method
    and body."""
    given = {name: getattr(args, name) for name in ("versions", "days") if hasattr(args, name)}
    if args.clear:
        if given:
            raise KlError(EXIT_USAGE, "--clear takes no --versions or --days")
        return "DELETE", None
    if not given:
        return None
    return "PUT", json.dumps({"versions": given.get("versions"),
                              "days": given.get("days")}).encode()


def _policy(ctx: Context, args: argparse.Namespace, path: str, what: str) -> int:
    change = _change(args)
    if change is None:
        return ctx.show(path, what, _print_policy)
    method, body = change
    return ctx.show(path, what, _print_policy, method=method, body=body,
                    headers=_JSON if body else None)


def cmd_state_retention(ctx: Context, args: argparse.Namespace) -> int:
    return _policy(ctx, args, f"/states/{state_path(args.name)}/-/retention",
                   f"retention of {args.name}")


def cmd_retention(ctx: Context, args: argparse.Namespace) -> int:
    return _policy(ctx, args, "/retention", "the tenant's retention")


def _print_policy(out: Output, document: Any) -> None:
    policy = document["policy"]
    subject = document.get("state") or "the tenant"
    out.fields([
        ("policy", f"{subject}: {policy['description']}"),
        ("from", {"state": "the state's own override", "tenant": "the tenant's default",
                  "server": "the server's default"}.get(document["source"],
                                                        document["source"])),
        ("server", document["server"]["description"]),
        *[(name, f"{level['description']} (set {format_time(level['updatedAt'])})"
           if level else "none")
          for name, level in (("tenant override", document.get("tenantOverride")),
                              ("state override", document.get("stateOverride")))
          if name != "state override" or "state" in document],
    ])
