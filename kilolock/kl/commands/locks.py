"""C{kl lock status} (who holds a state's lock) and C{kl unlock --force};
the LockInfo kl itself locks with."""

from __future__ import annotations

import argparse
import base64
import getpass
import hashlib
import json
import socket
import uuid
from datetime import UTC, datetime
from typing import Any

import kilolock
from kilolock.core.model import rfc3339
from kilolock.kl.arguments import STATE_NAME_HELP, CommandTree
from kilolock.kl.context import Context, state_path
from kilolock.kl.exits import EXIT_OK, EXIT_USAGE, KlError
from kilolock.kl.output import Output, format_age, format_time


def register(tree: CommandTree) -> None:
    tree.group("lock", "lock status")
    status = tree.command("status", cmd_lock_status, "who holds a state's lock, and"
                          " for how long", group="lock")
    status.add_argument("name", help=STATE_NAME_HELP)
    unlock = tree.command("unlock", cmd_unlock, "force-release a state's lock")
    unlock.add_argument("name", help=STATE_NAME_HELP)
    unlock.add_argument("--force", action="store_true",
                        help="required: release whoever holds the lock")


def lock_info(operation: str) -> bytes:
    """A LockInfo like Terraform's, naming kl and the local user."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return json.dumps({
        "ID": str(uuid.uuid4()), "Operation": operation, "Info": "",
        "Who": f"{user}@{socket.gethostname()}", "Version": f"kl {kilolock.__version__}",
        "Created": rfc3339(datetime.now(UTC)), "Path": "",
    }, separators=(",", ":")).encode()


def json_headers(body: bytes) -> dict[str, str]:
    """The headers of a JSON body on the HTTP lane, with its C{Content-MD5}
    (as Terraform sends them)."""
    digest = hashlib.md5(body).digest()  # noqa: S324 - an integrity check, not security
    return {"Content-Type": "application/json",
            "Content-MD5": base64.b64encode(digest).decode()}


def cmd_lock_status(ctx: Context, args: argparse.Namespace) -> int:
    return ctx.show(f"/states/{state_path(args.name)}/-/lock", f"lock of {args.name}",
                    _print_lock)


def _print_lock(out: Output, document: Any) -> None:
    lock = document.get("lock")
    if not lock:
        out.line(f"{document['state']} is not locked")
        return
    out.line(f"{document['state']} is locked")
    out.fields([("who", lock.get("who") or "-"), ("operation", lock.get("operation")),
                ("lane", {"tfe": "TFE (cloud block, actions/lock)",
                          "http": "HTTP backend (LOCK)",
                          "operation": "state operation (native lane)"}.get(lock.get("lane"),
                                                                            "-")),
                ("since", format_time(lock.get("acquiredAt"))),
                ("age", format_age(lock.get("ageSeconds", 0))), ("lock ID", lock.get("id")),
                ("principal", lock.get("principal"))], indent="  ")


def cmd_unlock(ctx: Context, args: argparse.Namespace) -> int:
    if not args.force:
        raise KlError(EXIT_USAGE, f"kl unlock releases whoever holds the lock of {args.name}:"
                      " pass --force to confirm (check `kl lock status` first)")
    held = None
    try:  # best effort: say what is released (the native lane may be down)
        held = ctx.native_json(f"/states/{state_path(args.name)}/-/lock",
                               f"lock of {args.name}").get("lock")
    except KlError:
        held = None
    ctx.http_lane(f"/{state_path(args.name)}", f"unlocking {args.name}", method="UNLOCK",
                  body=b"", headers=json_headers(b""))
    if ctx.out.as_json:
        ctx.out.json({"state": args.name, "released": held})
    elif held:
        ctx.out.line(f"released the lock of {args.name} held by"
                     f" {held.get('who') or held.get('principal')} for"
                     f" {format_age(held.get('ageSeconds', 0))} (lock ID {held.get('id')})")
    else:
        ctx.out.line(f"{args.name} is not locked (any lock is released)")
    return EXIT_OK
