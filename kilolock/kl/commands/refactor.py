"""Refactoring states on the server: C{kl state rm}, C{kl state mv} (within
a state or to another), C{kl state split}, C{kl state import}, and C{kl
operation show|cancel|wait}.

Each starts an operation on the native lane and waits for it (printing its
steps on stderr when that is a terminal), unless C{--no-wait}; Ctrl-C while
waiting asks the server to cancel it.  A succeeded operation is printed on
stdout; one that failed or was cancelled is a failure like any other of
kl's (L{operation_failure}: one line on stderr, nothing on stdout, C{--json}
or not).  The exit code says how it ended: 0 succeeded, 4 refused by a lock
or by the state's content (an address that names nothing, a taken
destination, ...), 3 a state without a version, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from kilolock.kl.arguments import STATE_NAME_HELP, CommandTree, positive_int
from kilolock.kl.commands.versions import read_state_file
from kilolock.kl.context import Context
from kilolock.kl.exits import (
    EXIT_CONFLICT,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    KlError,
)
from kilolock.kl.output import PROGRESS_THRESHOLD, Output, Progress, describe_lock_info
from kilolock.kl.uploads import DEFAULT_CHUNK_BYTES, UPLOAD_THRESHOLD, send_in_chunks

#: Seconds between two looks at a running operation.
POLL_SECONDS = 0.5
#: Error codes of a failed operation that mean "conflict" (exit code 4).
_CONFLICTS = frozenset({"locked", "lock_not_held", "address_not_in_state",
                        "destination_exists", "state_exists", "lineage_mismatch",
                        "serial_too_low", "serial_conflict", "encrypted_state"})


def register(tree: CommandTree) -> None:
    rm = tree.command("rm", cmd_state_rm, "remove resources from a state (server-side)",
                      group="state")
    rm.add_argument("name", help=STATE_NAME_HELP)
    rm.add_argument("addresses", nargs="+", metavar="ADDRESS",
                    help="a module, resource or instance address")
    _waiting(rm)
    mv = tree.command("mv", cmd_state_mv, "move or rename resources or modules, within a"
                      " state or to another (server-side, atomic)", group="state")
    mv.add_argument("name", help=STATE_NAME_HELP)
    mv.add_argument("source", help="the address to move (module, resource or instance)")
    mv.add_argument("destination", help="its new address")
    mv.add_argument("--to-state", dest="to_state", help="move into this state instead")
    _waiting(mv)
    split = tree.command("split", cmd_state_split, "move modules out of a state into new"
                         " states (server-side, atomic)", group="state")
    split.add_argument("name", help=STATE_NAME_HELP)
    split.add_argument("parts", nargs="+", metavar="MODULE=STATE",
                       help="a module and the new state it goes to, e.g. module.net=network")
    split.add_argument("--to-root", dest="to_root", action="store_true",
                       help="put each module's resources at the root of its new state")
    _waiting(split)
    imported = tree.command("import", cmd_state_import, "import a state file as the next"
                            " version (server-side; Terraform's state push checks)",
                            group="state")
    imported.add_argument("name", help=STATE_NAME_HELP)
    imported.add_argument("file", help="the state file ('-' for stdin)")
    imported.add_argument("--force", action="store_true",
                          help="skip the lineage and serial checks")
    imported.add_argument("--chunk-size", dest="chunk_size", type=positive_int,
                          default=DEFAULT_CHUNK_BYTES,
                          help="bytes per upload chunk for large files")
    _waiting(imported)
    tree.group("operation", "server-side state operations: show, cancel, wait")
    for name, handler, text in (("show", cmd_operation_show, "an operation's status"),
                                ("cancel", cmd_operation_cancel, "cancel an operation"),
                                ("wait", cmd_operation_wait, "wait for an operation")):
        command = tree.command(name, handler, text, group="operation")
        command.add_argument("id", help="the operation's id (op_...)")


def _waiting(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-wait", dest="wait", action="store_false",
                        help="print the operation's id and return at once")


def cmd_state_rm(ctx: Context, args: argparse.Namespace) -> int:
    return _start(ctx, args, {"kind": "rm", "state": args.name,
                              "addresses": list(args.addresses)})


def cmd_state_mv(ctx: Context, args: argparse.Namespace) -> int:
    return _start(ctx, args, {"kind": "mv", "state": args.name, "from": args.source,
                              "to": args.destination, "toState": args.to_state})


def cmd_state_split(ctx: Context, args: argparse.Namespace) -> int:
    parts = []
    for text in args.parts:
        module, separator, state = text.partition("=")
        if not separator or not module or not state:
            raise KlError(EXIT_USAGE, f"{text!r}: write each part as MODULE=STATE,"
                          " e.g. module.net=network")
        part = {"module": module, "state": state}
        if args.to_root:
            part["to"] = ""
        parts.append(part)
    return _start(ctx, args, {"kind": "split", "state": args.name, "parts": parts})


def cmd_state_import(ctx: Context, args: argparse.Namespace) -> int:
    raw, source = read_state_file(args.file)
    document: dict[str, Any] = {"kind": "import", "state": args.name, "force": args.force}
    if len(raw) >= UPLOAD_THRESHOLD:
        progress = _progress(ctx, len(raw))
        document["upload"] = send_in_chunks(ctx, args.name, raw, args.chunk_size, progress)
        if progress is not None:
            progress.finish()
    else:
        try:
            document["stateFile"] = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise KlError(EXIT_REFUSED, f"{source} is not UTF-8 text") from None
    return _start(ctx, args, document)


def _progress(ctx: Context, size: int) -> Progress | None:
    if size >= PROGRESS_THRESHOLD and ctx.out.stderr.isatty():
        return Progress(size, ctx.out.stderr)
    return None


def _start(ctx: Context, args: argparse.Namespace, document: dict[str, Any]) -> int:
    answer = ctx.native("/operations", f"starting kl state {document['kind']}",
                        method="POST", expect=202,
                        body=json.dumps({k: v for k, v in document.items()
                                         if v is not None}).encode(),
                        headers={"Content-Type": "application/json"})
    operation = answer.json()
    if not args.wait:
        if not ctx.out.json_if_asked(operation):
            ctx.out.line(operation["id"])
        return EXIT_OK
    return _wait(ctx, operation)


def _wait(ctx: Context, operation: Any) -> int:
    """Follow an operation to its end; Ctrl-C asks the server to cancel it.

    @return: 0 when it succeeded (printed).
    @raise KlError: it failed or was cancelled (L{operation_failure})."""
    shown = None
    # Its steps are for someone watching: a script's stderr holds only a
    # failure's one line.
    watching = not ctx.out.as_json and ctx.out.stderr.isatty()
    try:
        while operation["status"] == "running":
            step = operation["progress"].get("step")
            if step != shown and watching:
                ctx.out.note(f"{operation['id']}: {step}")
                shown = step
            time.sleep(POLL_SECONDS)
            operation = ctx.native_json(f"/operations/{operation['id']}",
                                        f"operation {operation['id']}")
    except KeyboardInterrupt:
        ctx.out.note(f"cancelling {operation['id']}")
        ctx.native(f"/operations/{operation['id']}", "cancelling", method="DELETE",
                   expect=202)
        raise
    if operation["status"] != "succeeded":
        raise operation_failure(operation)
    if not ctx.out.json_if_asked(operation):
        _print_operation(ctx.out, operation)
    return EXIT_OK


def operation_failure(operation: Any) -> KlError:
    """The KlError of an operation that failed or was cancelled: its exit
    code and one line naming the operation, the server's message (for a
    lock, its holder) and the error's code, worded as a refused request is
    (L{kilolock.kl.client.server_error})."""
    request = operation.get("request") or {}
    what = (f"operation {operation['id']} (kl state {operation['kind']}"
            f" {request.get('state', '')})")
    if operation["status"] == "cancelled":
        return KlError(EXIT_REFUSED, f"{what} was cancelled before it wrote anything"
                                     " [cancelled]")
    error = operation.get("error") or {}
    code = error.get("code") or "failed"
    message = error.get("message") or "it failed"
    lock = error.get("lock")
    if code == "locked" and isinstance(lock, dict):
        message = "locked by " + describe_lock_info(lock)
    if code in _CONFLICTS:
        exit_code = EXIT_CONFLICT
    elif code in ("version_not_found", "state_not_found"):
        exit_code = EXIT_NOT_FOUND
    else:
        exit_code = EXIT_REFUSED
    return KlError(exit_code, f"{what} failed: {message} [{code}]")


def _print_operation(out: Output, operation: Any) -> None:
    request = operation.get("request") or {}
    out.line(f"{operation['id']}: kl state {operation['kind']} {request.get('state', '')}"
             f" -- {operation['status']}")
    result = operation.get("result") or {}
    for pair in result.get("moved", []):
        where = (f" ({pair['fromState']} -> {pair['toState']})" if "toState" in pair else "")
        out.line(f"  moved {pair['from']} to {pair['to']}{where}")
    for address in result.get("removed", []):
        out.line(f"  removed {address}")
    for state in result.get("created", []):
        out.line(f"  created state {state}")
    for version in result.get("versions", []):
        out.line(f"  {version['state']}: version {version['number']}, serial"
                 f" {version['serial']}, lineage {version['lineage']}")
    error = operation.get("error")
    if error:
        out.line(f"  error: {error.get('message')} [{error.get('code')}]")
        lock = error.get("lock")
        if isinstance(lock, dict):
            out.line(f"  locked by {lock.get('Who') or '?'} ({lock.get('Operation') or '?'}),"
                     f" lock ID {lock.get('ID')}")


def cmd_operation_show(ctx: Context, args: argparse.Namespace) -> int:
    return ctx.show(f"/operations/{args.id}", f"operation {args.id}", _print_operation)


def cmd_operation_cancel(ctx: Context, args: argparse.Namespace) -> int:
    return ctx.show(f"/operations/{args.id}", f"cancelling {args.id}", _print_operation,
                    method="DELETE", expect=202)


def cmd_operation_wait(ctx: Context, args: argparse.Namespace) -> int:
    return _wait(ctx, ctx.native_json(f"/operations/{args.id}", f"operation {args.id}"))
