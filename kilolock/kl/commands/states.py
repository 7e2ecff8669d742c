"""C{kl states} (every state at a glance) and C{kl state show} (one state's
summary and conditions)."""

from __future__ import annotations

import argparse
from typing import Any

from kilolock.kl.arguments import STATE_NAME_HELP, CommandTree
from kilolock.kl.context import Context, state_path
from kilolock.kl.output import Output, format_age, format_size, format_time, or_dash


def register(tree: CommandTree) -> None:
    tree.command("states", cmd_states, "list the states: serial, versions, lock, readiness")
    tree.group("state", "one state: show, history, diff, pull, push, rollback, purge,"
                        " retention, rm, mv, split, import")
    show = tree.command("show", cmd_state_show, "a state's summary and conditions",
                        group="state")
    show.add_argument("name", help=STATE_NAME_HELP)


def cmd_states(ctx: Context, args: argparse.Namespace) -> int:
    return ctx.show("/states", "listing states", _print_states)


def _print_states(out: Output, document: Any) -> None:
    rows = []
    for state in document["states"]:
        lock = state.get("lock")
        rows.append([
            state["name"], or_dash(state.get("serial")), state.get("versionCount", 0),
            state.get("resourceCount", 0), format_size(state.get("size")),
            format_time(state.get("updatedAt")),
            "-" if not lock else f"{lock.get('who') or lock.get('principal')}"
                                 f" ({format_age(lock.get('ageSeconds', 0))})",
            "yes" if state.get("ready") else "no",
        ])
    if not rows:
        out.note("no states yet")
        return
    out.table(["NAME", "SERIAL", "VERSIONS", "RESOURCES", "SIZE", "UPDATED", "LOCKED BY",
               "READY"], rows)


def cmd_state_show(ctx: Context, args: argparse.Namespace) -> int:
    return ctx.show(f"/states/{state_path(args.name)}", f"state {args.name}", _print_state)


def _print_state(out: Output, document: Any) -> None:
    lock = document.get("lock")
    out.fields([
        ("name", document["name"]),
        ("serial", or_dash(document.get("serial"))),
        ("lineage", or_dash(document.get("lineage"))),
        ("version", f"{or_dash(document.get('currentVersion'))} of"
                    f" {document.get('versionCount', 0)}"),
        ("size", format_size(document.get("size"))),
        ("sha256", or_dash(document.get("sha256"))),
        ("resources", str(document.get("resourceCount", 0))),
        ("updated", format_time(document.get("updatedAt"))),
        ("lock", "none" if not lock else
         f"{lock.get('who') or lock.get('principal')} ({lock.get('operation') or '-'}),"
         f" held {format_age(lock.get('ageSeconds', 0))}, ID {lock.get('id')}"),
        ("ready", "yes" if document.get("ready") else "no"),
    ])
    out.line()
    out.table(["CONDITION", "STATUS", "REASON", "SINCE", "MESSAGE"], [
        [c["type"], c["status"], c["reason"], format_time(c.get("lastTransitionTime")),
         c["message"]]
        for c in document.get("conditions", [])])
