"""C{kl workspaces}: TFE workspaces (Terraform's C{cloud {}} block), listed
and created ahead of C{terraform init -input=false} with the tags strategy.

Through the TFE lane (C{/api/v2/}) with kl's own token, as Terraform would
(the organization: C{--organization}, else the token's own); or, with
C{--tenant}, through the control API into a tenant's environment."""

from __future__ import annotations

import argparse
import json
from typing import Any
from urllib.parse import quote

from kilolock.kl.arguments import CommandTree
from kilolock.kl.client import Unreachable, server_error
from kilolock.kl.context import Context
from kilolock.kl.exits import EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, KlError

API = "/api/v2"
JSONAPI = "application/vnd.api+json"


def register(tree: CommandTree) -> None:
    workspaces = tree.command("workspaces", cmd_workspaces,
                              "TFE workspaces of the cloud {} block")
    workspaces.set_defaults(tags=[], organization=None, tenant=None, environment=None,
                            hosted_workspace=None)
    tree.subcommands("workspaces", workspaces)
    for name, summary in (("list", "list workspaces (with --tag: those with every tag)"),
                          ("create", "create a workspace ahead of terraform init")):
        command = tree.command(name, cmd_workspaces, summary, group="workspaces")
        if name == "create":
            command.add_argument("name", help="the workspace (a state) name")
        command.add_argument("--tag", dest="tags", action="append", default=[],
                             help="a tag (repeatable); KEY=VALUE is a key/value tag")
        command.add_argument("--organization", help="the organization (default: the"
                             " token's own: default, or the tenant's slug)")
        command.add_argument("--tenant", help="through the control API: the tenant's slug")
        command.add_argument("--environment", help="with --tenant: the environment")
        command.add_argument("--workspace", dest="hosted_workspace",
                             help="with --tenant: the hosted workspace (default: default)")


def _lane(ctx: Context, method: str, path: str, what: str, document: Any = None,
          expect: tuple[int, ...] = (200,)) -> Any:
    """A request on the TFE lane with kl's token; its JSON answer."""
    body = None if document is None else json.dumps(document).encode()
    try:
        answer = ctx.client.request(method, API + path, body=body,
                                    headers={"Content-Type": JSONAPI} if body else None)
    except Unreachable as error:
        raise KlError(EXIT_UNAVAILABLE, f"{what}: the TFE lane of {ctx.settings.url} did not"
                      f" answer: {error}") from None
    if answer.status not in expect:
        raise server_error(answer, what)
    return answer.json() if answer.body else None


def _organization(ctx: Context, args: argparse.Namespace) -> str:
    if args.organization:
        return str(args.organization)
    found = _lane(ctx, "GET", "/organizations", "finding the token's organization")
    return str(found["data"][0]["id"])


def _tags(values: list[str]) -> tuple[list[str], dict[str, str]]:
    plain = [value for value in values if "=" not in value]
    bindings = dict(value.split("=", 1) for value in values if "=" in value)
    return plain, bindings


def cmd_workspaces(ctx: Context, args: argparse.Namespace) -> int:
    action = args.workspaces_command or "list"
    if getattr(args, "tenant", None):
        return _through_control(ctx, args, action)
    organization = quote(_organization(ctx, args), safe="")
    if action == "create":
        plain, bindings = _tags(args.tags)
        relationships: dict[str, Any] = {}
        if plain:
            relationships["tags"] = {"data": [{"type": "tags", "attributes": {"name": tag}}
                                              for tag in plain]}
        if bindings:
            relationships["tag-bindings"] = {"data": [
                {"type": "tag-bindings", "attributes": {"key": key, "value": value}}
                for key, value in bindings.items()]}
        document = _lane(ctx, "POST", f"/organizations/{organization}/workspaces",
                         f"creating workspace {args.name}", {"data": {
                             "type": "workspaces", "attributes": {"name": args.name},
                             "relationships": relationships}}, expect=(201,))
        if not ctx.out.json_if_asked(document):
            created = document["data"]
            ctx.out.line(f"created workspace {created['attributes']['name']}"
                         f" ({created['id']})")
        return EXIT_OK
    items: list[dict[str, Any]] = []
    page = 1
    query = "&search[tags]=" + quote(",".join(args.tags), safe=",") if args.tags else ""
    while True:
        listing = _lane(ctx, "GET", f"/organizations/{organization}/workspaces?page[size]=100"
                        f"&page[number]={page}{query}", "listing workspaces")
        items.extend(listing["data"])
        next_page = listing.get("meta", {}).get("pagination", {}).get("next-page")
        if not next_page:
            break
        page = int(next_page)
    if not ctx.out.json_if_asked(items):
        ctx.out.table(["NAME", "ID", "LOCKED", "RESOURCES", "TAGS"], [
            [w["attributes"]["name"], w["id"], "yes" if w["attributes"]["locked"] else "no",
             str(w["attributes"]["resource-count"]), ",".join(_tags_of(ctx, w)) or "-"]
            for w in items])
    return EXIT_OK


def _tags_of(ctx: Context, workspace: dict[str, Any]) -> list[str]:
    """A workspace's tags as C{kl workspaces create --tag} takes them:
    C{key}, or C{key=value} for a key/value tag.  A workspace document
    names only the keys (C{tag-names}); the values are its tag bindings,
    asked for only when it has tags."""
    names: list[str] = workspace["attributes"]["tag-names"]
    if not names:
        return []
    bindings = _lane(ctx, "GET", f"/workspaces/{quote(workspace['id'], safe='')}/tag-bindings",
                     f"reading the tags of workspace {workspace['attributes']['name']}")
    values = {item["attributes"]["key"]: item["attributes"].get("value") or ""
              for item in bindings["data"]}
    return [name + (f"={values[name]}" if values.get(name) else "") for name in names]


def _through_control(ctx: Context, args: argparse.Namespace, action: str) -> int:
    if not args.environment:
        raise KlError(EXIT_USAGE, "--tenant needs --environment (the environment the"
                      " workspace belongs to)")
    slug = quote(args.tenant, safe="")
    where = {"environment": args.environment,
             "workspace": args.hosted_workspace or "default"}
    if action == "create":
        document = ctx.control("POST", f"/tenants/{slug}/terraform-workspaces",
                               f"creating workspace {args.name}", expect=(201,),
                               body={"name": args.name, "tags": args.tags, **where})
        if not ctx.out.json_if_asked(document):
            ctx.out.line(f"created workspace {document['name']} ({document['id']}),"
                         f" state {document['state_path']}")
        return EXIT_OK
    document = ctx.control("GET", f"/tenants/{slug}/terraform-workspaces",
                           "listing workspaces", query=where)
    if not ctx.out.json_if_asked(document):
        ctx.out.table(["NAME", "ID", "STATE", "TAGS"], [
            [w["name"], w["id"], w["state_path"], ",".join(w["tags"]) or "-"]
            for w in document["terraform_workspaces"]])
    return EXIT_OK
