"""C{kl oidc}: a hosted tenant's OIDC policy, the issuers whose CI tokens it
trusts and the rules that grant them states (control API; see
docs/ci-identity.md).

  kl oidc show TENANT            the policy (issuers, then rules)
  kl oidc set TENANT FILE        set it from a TOML (or .json) file
  kl oidc delete TENANT --yes    remove it: the tenant accepts no CI token

C{set} reads the file as the server's C{--oidc-config} would: TOML unless
its name ends in C{.json}; an issuer's C{jwks_file} and C{ca_file} (paths
relative to the file) are read and sent inline (C{jwks}, C{ca_pem}), since
the server never reads a tenant's paths.  The server validates the
document; a refusal lists every problem and stores nothing.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kilolock.auth.oidc.policy_file import MAX_FILE, parse_policy_text
from kilolock.auth.oidc.validation import PolicyError
from kilolock.kl.arguments import CommandTree
from kilolock.kl.context import Context
from kilolock.kl.exits import EXIT_OK, EXIT_USAGE, KlError
from kilolock.kl.output import Output, format_time


def register(tree: CommandTree) -> None:
    tree.group("oidc", "a tenant's OIDC policy for CI tokens (control API)")
    show = tree.command("show", cmd_oidc, "the tenant's trusted issuers and rules",
                        group="oidc")
    show.add_argument("slug")
    put = tree.command("set", cmd_oidc, "set the policy from a TOML or .json file",
                       group="oidc")
    put.add_argument("slug")
    put.add_argument("file", help="the policy (docs/ci-identity.md)")
    delete = tree.command("delete", cmd_oidc, "remove the policy (no CI token accepted)",
                          group="oidc")
    delete.add_argument("slug")
    delete.add_argument("--yes", action="store_true", help="required: confirm the removal")


def _read(path: Path, what: str) -> bytes:
    try:
        content = path.read_bytes()
    except OSError as error:
        raise KlError(EXIT_USAGE, f"{what}: cannot read {path}: {error.strerror}") from None
    if len(content) > MAX_FILE:
        raise KlError(EXIT_USAGE, f"{what}: {path} is larger than {MAX_FILE} bytes")
    return content


def policy_from_file(path: Path) -> dict[str, Any]:
    """The document in a policy file, with its local JWKS and CA files inline.

    @raise KlError: the file (or one it names) is unreadable or does not parse."""
    try:
        document = parse_policy_text(_read(path, "policy"), path.suffix.lower())
    except PolicyError as error:
        raise KlError(EXIT_USAGE, f"{path}: {'; '.join(error.problems)}") from None
    if not isinstance(document, dict):
        raise KlError(EXIT_USAGE, f"{path}: the policy must be a table (an object)")
    for index, issuer in enumerate(document.get("issuers") or []):
        if not isinstance(issuer, dict):
            continue
        where = f"issuers[{index}]"
        jwks_file = issuer.pop("jwks_file", None)
        if isinstance(jwks_file, str):
            try:
                issuer["jwks"] = json.loads(_read(path.parent / jwks_file, f"{where}.jwks_file"))
            except ValueError:
                raise KlError(EXIT_USAGE, f"{where}.jwks_file: {jwks_file} is not JSON") from None
        ca_file = issuer.pop("ca_file", None)
        if isinstance(ca_file, str):
            issuer["ca_pem"] = _read(path.parent / ca_file, f"{where}.ca_file").decode(
                "ascii", "replace")
    return document


def cmd_oidc(ctx: Context, args: argparse.Namespace) -> int:
    action = args.oidc_command
    path = f"/tenants/{quote(args.slug, safe='')}/oidc-policy"
    what = f"the OIDC policy of tenant {args.slug}"
    if action == "show":
        document = ctx.control("GET", path, what)
    elif action == "set":
        document = ctx.control("PUT", path, f"setting {what}",
                               body=policy_from_file(Path(args.file)))
    else:
        if not args.yes:
            raise KlError(EXIT_USAGE, f"removing {what} refuses every CI token of the tenant:"
                          " pass --yes to confirm")
        document = ctx.control("DELETE", path, f"removing {what}")
    if ctx.out.json_if_asked(document):
        return EXIT_OK
    record = document if isinstance(document, dict) else {}
    if action == "delete":
        ctx.out.line(f"removed {what}: it accepts no CI token")
        return EXIT_OK
    if action == "set":
        ctx.out.line(f"set {what}")
    _print_policy(ctx.out, record)
    return EXIT_OK


def _text(value: Any) -> str:
    if isinstance(value, list):
        return " | ".join(str(each) for each in value)
    return str(value)


def _print_policy(out: Output, record: Mapping[str, Any]) -> None:
    policy = record.get("policy") or {}
    out.fields([("tenant", str(record.get("tenant", "-"))),
                ("updated", format_time(str(record.get("updated_at", "-"))))], width=8)
    out.line()
    out.table(["ISSUER", "URL", "AUDIENCE", "KEYS"], [
        [issuer.get("name", "-"), issuer.get("url", "-"), issuer.get("audience", "-"),
         "inline" if "jwks" in issuer else issuer.get("jwks_url", "discovery")]
        for issuer in policy.get("issuers") or []])
    out.line()
    out.table(["RULE", "ISSUER", "CLAIMS", "ACCESS", "STATES"], [
        [rule.get("name", "-"), rule.get("issuer", "-"),
         ", ".join(f"{claim}={_text(value)}"
                   for claim, value in (rule.get("claims") or {}).items()),
         (rule.get("grant") or {}).get("access", "-"),
         _grant_states(rule.get("grant") or {})]
        for rule in policy.get("rules") or []])


def _grant_states(grant: Mapping[str, Any]) -> str:
    where = "/".join(str(grant[key]) for key in ("workspace", "environment") if key in grant)
    states = ", ".join(str(state) for state in grant.get("states") or [])
    return f"{where}: {states}" if where else states
