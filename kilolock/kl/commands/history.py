"""C{kl state history} (a state's versions) and C{kl state diff} (what
changed between two of them)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from kilolock.kl.arguments import STATE_NAME_HELP, CommandTree, positive_int
from kilolock.kl.context import Context, state_path
from kilolock.kl.output import Output, format_size, format_time, format_value


def register(tree: CommandTree) -> None:
    history = tree.command("history", cmd_state_history, "a state's versions", group="state")
    history.add_argument("name", help=STATE_NAME_HELP)
    diff = tree.command("diff", cmd_state_diff,
                        "what changed between two versions (default: the last change)",
                        group="state")
    diff.add_argument("name", help=STATE_NAME_HELP)
    diff.add_argument("old", nargs="?", type=positive_int, help="the older version number")
    diff.add_argument("new", nargs="?", type=positive_int,
                      help="the newer version number (default: the current one)")


def cmd_state_history(ctx: Context, args: argparse.Namespace) -> int:
    def render(out: Output, document: Any) -> None:
        _print_history(out, document, args.name)

    return ctx.show(f"/states/{state_path(args.name)}/-/versions", f"history of {args.name}",
                    render)


def _print_history(out: Output, document: Any, name: str) -> None:
    rows = []
    for version in document["versions"]:
        kind = version.get("kind", "state_write")
        what = (f"rollback to {version.get('restoredFrom')}" if kind == "state_rollback"
                else "write")
        pruned = version.get("pruned")
        if pruned:  # a tombstone: its bytes are gone
            what += f"; pruned {format_time(pruned['at'])}: {pruned['reason']}"
        rows.append([("*" if version.get("current") else " ") + str(version["number"]),
                     version["serial"], version["sha256"][:12], format_size(version["size"]),
                     version["principal"], format_time(version["createdAt"]), what])
    if not rows:
        out.note(f"{name} has no versions yet")
        return
    out.table(["VERSION", "SERIAL", "SHA256", "SIZE", "BY", "WRITTEN", "WHAT"], rows)


#: How a diff marks what was added and removed, in the order it lists them.
_ADDED_REMOVED = (("+", "added"), ("-", "removed"))


def cmd_state_diff(ctx: Context, args: argparse.Namespace) -> int:
    return ctx.show(f"/states/{state_path(args.name)}/-/diff", f"diff of {args.name}",
                    _print_diff, query={"from": args.old, "to": args.new})


def _print_diff(out: Output, document: Any) -> None:
    old, new = document["from"], document["to"]
    out.line(f"{document['state']}: version {old['number']} (serial {old['serial']})"
             f" -> version {new['number']} (serial {new['serial']})")
    if document.get("lineageChanged"):
        out.line(f"  lineage changed: {old['lineage']} -> {new['lineage']}")
    resources = document["resources"]
    outputs = document["outputs"]
    if not any(resources.values()) and not any(outputs.values()):
        out.line("no changes")
        return

    def label(entry: Mapping[str, Any]) -> str:
        deposed = entry.get("deposed")
        return str(entry["address"]) + (f" (deposed {deposed})" if deposed else "")

    for sign, key in _ADDED_REMOVED:
        out.lines(f"{sign} {label(entry)}" for entry in resources[key])
    for entry in resources["changed"]:
        # Destroyed and created again (a new id), as Terraform's plan marks it.
        sign = "-/+" if entry.get("action") == "replace" else "~"
        out.line(f"{sign} {label(entry)}")
        for change in entry["changes"]:
            out.line(f"    {change['path']}: {_change_text(change)}")
    for sign, key in _ADDED_REMOVED:
        out.lines(f"{sign} output.{name}" for name in outputs[key])
    for change in outputs["changed"]:
        out.line(f"~ output.{change['name']}: {_change_text(change)}")


def _change_text(change: Mapping[str, Any]) -> str:
    if change.get("sensitive"):
        return "(sensitive value changed)"
    before = format_value(change["before"]) if "before" in change else "(absent)"
    after = format_value(change["after"]) if "after" in change else "(absent)"
    return f"{before} -> {after}"
