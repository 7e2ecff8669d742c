"""The control API's commands: C{kl tenants} (list, show, create, delete;
a tenant's workspaces and environments) and C{kl tokens} (list, create,
revoke)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from kilolock.kl.arguments import CommandTree
from kilolock.kl.context import Context
from kilolock.kl.exits import EXIT_OK, EXIT_USAGE, KlError
from kilolock.kl.output import Output, format_count, format_time


def register(tree: CommandTree) -> None:
    tenants = tree.command("tenants", cmd_tenants, "tenants (control API)")
    tenants.set_defaults(deleted=False)
    tree.subcommands("tenants", tenants)
    listing = tree.command("list", cmd_tenants, "list tenants", group="tenants")
    listing.add_argument("--deleted", action="store_true", help="include deleted tenants")
    show = tree.command("show", cmd_tenants, "one tenant", group="tenants")
    show.add_argument("slug")
    create = tree.command("create", cmd_tenants, "create a tenant", group="tenants")
    create.add_argument("slug")
    create.add_argument("--name", dest="display_name",
                        help="its display name (default: the slug)")
    delete = tree.command("delete", cmd_tenants, "delete a tenant (revokes its tokens)",
                          group="tenants")
    delete.add_argument("slug")
    delete.add_argument("--delete-states", dest="delete_states", action="store_true",
                        help="also delete its states (their audit events are kept)")
    delete.add_argument("--yes", action="store_true", help="required: confirm the deletion")

    tree.group("tokens", "API tokens of a tenant (control API)")
    listing = tree.command("list", cmd_tokens, "a tenant's tokens (never secrets)",
                           group="tokens")
    listing.add_argument("slug")
    create = tree.command("create", cmd_tokens, "issue a token (its secret shown once)",
                          group="tokens")
    create.add_argument("slug")
    create.add_argument("--name", dest="token_name", required=True,
                        help="what the token is for")
    create.add_argument("--environment", required=True, help="the environment it may use")
    create.add_argument("--workspace", help="the workspace (default: the tenant's default)")
    create.add_argument("--scope", choices=("write", "read", "outputs", "admin"),
                        help="default write; outputs: TFE workspaces and non-sensitive"
                             " outputs only; admin: write, and purge versions and set"
                             " retention")
    revoke = tree.command("revoke", cmd_tokens, "revoke a token", group="tokens")
    revoke.add_argument("slug")
    revoke.add_argument("token_id")


def _items(document: Any, *keys: str) -> list[dict[str, Any]]:
    """The list a control-API document holds (itself, or under one of C{keys})."""
    if isinstance(document, list):
        return document
    if isinstance(document, dict):
        for key in keys:
            if isinstance(document.get(key), list):
                return list(document[key])
    return []


def _pick(item: Mapping[str, Any], *names: str) -> str:
    """The first of C{names} the item has, as text (times formatted); C{-}."""
    for name in names:
        if item.get(name) not in (None, ""):
            value = item[name]
            return format_time(value) if name.endswith(("_at", "At")) else str(value)
    return "-"


def cmd_tenants(ctx: Context, args: argparse.Namespace) -> int:
    action = args.tenants_command or "list"
    slug = quote(args.slug, safe="") if getattr(args, "slug", None) else None
    if action == "list":
        document = ctx.control("GET", "/tenants", "listing tenants",
                               query={"deleted": "true"} if args.deleted else None)
    elif action == "show":
        document = ctx.control("GET", f"/tenants/{slug}", f"tenant {args.slug}")
    elif action == "create":
        body = {"slug": args.slug, "name": args.display_name or args.slug}
        document = ctx.control("POST", "/tenants", f"creating tenant {args.slug}",
                               expect=(200, 201), body=body)
    else:
        if not args.yes:
            raise KlError(EXIT_USAGE, f"deleting tenant {args.slug} revokes its tokens: pass"
                          " --yes to confirm")
        try:
            document = ctx.control(
                "DELETE", f"/tenants/{slug}", f"deleting tenant {args.slug}",
                expect=(200, 204), query={"states": "delete"} if args.delete_states else None)
        except KlError as error:
            if "not_empty" not in error.message or args.delete_states:
                raise
            raise KlError(error.code, f"deleting tenant {args.slug}: it still has states;"
                          " delete them first, or pass --delete-states to delete them with"
                          " it (their audit events are kept) [409 not_empty]") from None
    if ctx.out.json_if_asked(document):
        return EXIT_OK
    if action == "list":
        ctx.out.table(["SLUG", "NAME", "ID", "CREATED", "DELETED"], [
            [_pick(t, "slug"), _pick(t, "name"), _pick(t, "id"),
             _pick(t, "created_at", "createdAt"), _pick(t, "deleted_at", "deletedAt")]
            for t in _items(document, "tenants", "items")])
    elif action == "delete":
        states = (document or {}).get("deleted_states") or []
        tokens = (document or {}).get("revoked_tokens") or []
        ctx.out.line(f"deleted tenant {args.slug}: {format_count(len(states), 'state')}"
                     f" deleted, {format_count(len(tokens), 'token')} revoked")
    else:
        _print_tenant(ctx.out, document or {}, created=action == "create")
    return EXIT_OK


def _print_tenant(out: Output, tenant: Mapping[str, Any], created: bool) -> None:
    if created:
        out.line(f"created tenant {_pick(tenant, 'slug')} ({_pick(tenant, 'id')})")
    else:
        out.fields([(name, _pick(tenant, key)) for name, key in (
            ("slug", "slug"), ("name", "name"), ("id", "id"), ("created", "created_at"),
            ("deleted", "deleted_at"), ("states", "state_count"))], width=8)
    rows = []
    for workspace in tenant.get("workspaces") or []:
        for environment in workspace.get("environments") or [{}]:
            rows.append([_pick(workspace, "name"), _pick(workspace, "id"),
                         _pick(environment, "name"), _pick(environment, "id")])
    if rows:
        out.line()
        out.table(["WORKSPACE", "WORKSPACE ID", "ENVIRONMENT", "ENV PUBLIC ID"], rows)


def cmd_tokens(ctx: Context, args: argparse.Namespace) -> int:
    action = args.tokens_command or "list"
    slug = quote(args.slug, safe="")
    if action == "list":
        document = ctx.control("GET", f"/tenants/{slug}/tokens",
                               f"tokens of tenant {args.slug}")
    elif action == "create":
        body: dict[str, Any] = {"name": args.token_name, "environment": args.environment}
        if args.workspace:
            body["workspace"] = args.workspace
        if args.scope:
            body["scope"] = args.scope
        document = ctx.control("POST", f"/tenants/{slug}/tokens",
                               f"creating a token for tenant {args.slug}", expect=(200, 201),
                               body=body)
    else:
        document = ctx.control("DELETE",
                               f"/tenants/{slug}/tokens/{quote(args.token_id, safe='')}",
                               f"revoking token {args.token_id}", expect=(200, 204))
    if ctx.out.json_if_asked(document):
        return EXIT_OK
    if action == "list":
        ctx.out.table(["ID", "NAME", "WORKSPACE", "ENVIRONMENT", "SCOPE", "LAST USED",
                       "REVOKED"], [
            [_pick(t, "id"), _pick(t, "name"), _pick(t, "workspace_id", "workspaceId"),
             _pick(t, "env_public_id", "envPublicId", "environment"), _pick(t, "scope"),
             _pick(t, "last_used_at", "lastUsedAt"), _pick(t, "revoked_at", "revokedAt")]
            for t in _items(document, "tokens", "items")])
    elif action == "create":
        _print_new_token(ctx.out, document if isinstance(document, dict) else {})
    else:
        ctx.out.line(f"revoked token {args.token_id}")
    return EXIT_OK


def _print_new_token(out: Output, token: Mapping[str, Any]) -> None:
    """The secret (shown once), the token's facts, and the backend block to paste."""
    out.line(f"token_secret    {_pick(token, 'token_secret')}")
    out.note("the secret is shown once: store it now (e.g. as KL_TOKEN or TF_HTTP_PASSWORD)")
    out.fields([(key, token[key]) for key in ("id", "scope", "workspace_id", "env_public_id",
                                              "username", "state_address") if key in token],
               width=14)
    block = token.get("backend_block") or token.get("remote_state_block")
    if isinstance(block, str):
        out.line()
        out.line(block.rstrip())
