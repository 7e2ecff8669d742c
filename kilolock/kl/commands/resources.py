"""What states hold: C{kl resources search} (resources across the current
versions) and C{kl outputs} (one state's outputs, sensitive ones withheld)."""

from __future__ import annotations

import argparse
from typing import Any

from kilolock.kl.arguments import STATE_NAME_HELP, CommandTree, attribute_filter, positive_int
from kilolock.kl.context import Context, state_path
from kilolock.kl.output import Output, format_value


def register(tree: CommandTree) -> None:
    tree.group("resources", "search resources across states")
    search = tree.command("search", cmd_resources, "resources of the current versions, by"
                          " type, address, module, attribute", group="resources")
    search.add_argument("--type", help="the resource type, e.g. aws_instance")
    search.add_argument("--address", help="an address pattern; * matches anything")
    search.add_argument("--module", help="the module path exactly ('' for the root module)")
    search.add_argument("--attr", "--attribute", dest="attribute", type=attribute_filter,
                        help="PATH=VALUE: an attribute's value, e.g. tags.Name=web")
    search.add_argument("--state", help="only this state")
    search.add_argument("--limit", type=positive_int,
                        help="at most this many (default 1000)")
    search.add_argument("--show", help="also show this top-level attribute")
    outputs = tree.command("outputs", cmd_outputs, "a state's outputs (sensitive withheld)")
    outputs.add_argument("name", help=STATE_NAME_HELP)
    outputs.add_argument("--version", type=positive_int, help="a stored version number")


def cmd_resources(ctx: Context, args: argparse.Namespace) -> int:
    def render(out: Output, document: Any) -> None:
        _print_resources(out, document, args.show)

    query = {"type": args.type, "address": args.address, "module": args.module,
             "attribute": args.attribute, "state": args.state, "limit": args.limit}
    return ctx.show("/resources", "searching resources", render, query=query)


def _print_resources(out: Output, document: Any, show: str | None) -> None:
    rows = [[r["state"], r["address"], r["type"], r["module"] or "(root)",
             format_value(r["attributes"].get(show), 40) if show else ""]
            for r in document["resources"]]
    if not rows:
        out.note("no resource matches")
        return
    headers = ["STATE", "ADDRESS", "TYPE", "MODULE"] + ([show.upper()] if show else [])
    out.table(headers, [row[:len(headers)] for row in rows])
    if document.get("truncated"):
        out.note(f"showing the first {len(rows)} matches: narrow the search or raise"
                 " --limit")


def cmd_outputs(ctx: Context, args: argparse.Namespace) -> int:
    def render(out: Output, document: Any) -> None:
        _print_outputs(out, document, args.name)

    return ctx.show(f"/states/{state_path(args.name)}/-/outputs", f"outputs of {args.name}",
                    render, query={"version": args.version})


def _print_outputs(out: Output, document: Any, name: str) -> None:
    rows = [[o["name"], "(sensitive)" if o["sensitive"] else format_value(o["value"], 80)]
            for o in document["outputs"]]
    if not rows:
        out.note(f"version {document['version']} of {name} has no outputs")
        return
    out.table(["OUTPUT", "VALUE"], rows)
