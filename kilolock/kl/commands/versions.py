"""The commands that read or write a state's bytes: C{kl state pull} (a
version exactly, or a slice of it), C{kl state push} (a file as the new
current version, with Terraform's checks; large files through an upload
session, in chunks) and C{kl state rollback} (an old version as the new
current one)."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from kilolock.core.errors import KilolockError
from kilolock.kl.arguments import STATE_NAME_HELP, CommandTree, positive_int
from kilolock.kl.commands.locks import json_headers, lock_info
from kilolock.kl.context import Context, state_path
from kilolock.kl.exits import (
    EXIT_CONFLICT,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_PROTOCOL,
    EXIT_REFUSED,
    EXIT_USAGE,
    KlError,
)
from kilolock.kl.output import PROGRESS_THRESHOLD, Output, Progress, format_size
from kilolock.kl.uploads import DEFAULT_CHUNK_BYTES, UPLOAD_THRESHOLD, send_in_chunks
from kilolock.tfstate.diff import restore_body
from kilolock.tfstate.parse import parse_state


def register(tree: CommandTree) -> None:
    pull = tree.command("pull", cmd_state_pull,
                        "print a state's bytes exactly (the current version, or --version N),"
                        " or a slice of it (--module, --type, --address, --outputs)",
                        group="state")
    pull.add_argument("name", help=STATE_NAME_HELP)
    pull.add_argument("--version", type=positive_int, help="a stored version number")
    pull.add_argument("-o", "--output", help="write to this file instead of stdout")
    pull.add_argument("--module", action="append", default=[],
                      help="only this module and what is below it (repeatable)")
    pull.add_argument("--type", action="append", default=[], dest="types",
                      help="only resources of this type (repeatable)")
    pull.add_argument("--address", action="append", default=[], dest="addresses",
                      help="only this resource or instance (repeatable)")
    pull.add_argument("--outputs", action="store_true",
                      help="the outputs (alone: only the outputs)")
    pull.add_argument("--projected", action="store_true",
                      help="the slice as projected JSON (sensitive values redacted)")
    push = tree.command("push", cmd_state_push,
                        "write a state file as the new current version (Terraform's checks)",
                        group="state")
    push.add_argument("name", help=STATE_NAME_HELP)
    push.add_argument("file", help="the state file ('-' for stdin)")
    push.add_argument("--force", action="store_true",
                      help="skip the lineage and serial checks")
    push.add_argument("--lock-id", dest="lock_id",
                      help="write under this lock, which you already hold")
    push.add_argument("--no-lock", dest="lock", action="store_false",
                      help="do not lock the state while pushing")
    push.add_argument("--progress", dest="progress", action="store_true", default=None,
                      help="always show the upload progress bar on stderr")
    push.add_argument("--no-progress", dest="progress", action="store_false",
                      help="never show the progress bar")
    push.add_argument("--chunked", dest="chunked", action="store_true", default=None,
                      help="always send the state through an upload session in chunks"
                           f" (the default from {UPLOAD_THRESHOLD >> 20} MiB on)")
    push.add_argument("--no-chunked", dest="chunked", action="store_false",
                      help="always send the state in one POST")
    push.add_argument("--chunk-size", dest="chunk_size", type=positive_int,
                      default=DEFAULT_CHUNK_BYTES, help="bytes per chunk"
                      f" (default {DEFAULT_CHUNK_BYTES})")
    rollback = tree.command("rollback", cmd_state_rollback,
                            "restore version N as a new current version", group="state")
    rollback.add_argument("name", help=STATE_NAME_HELP)
    rollback.add_argument("version", type=positive_int, help="the version number to restore")
    rollback.add_argument("--lock-id", dest="lock_id",
                          help="the ID of the lock you hold on the state, if any")


def cmd_state_pull(ctx: Context, args: argparse.Namespace) -> int:
    sliced = args.module or args.types or args.addresses or args.outputs
    if args.projected and not sliced:
        raise KlError(EXIT_USAGE, "--projected goes with --module, --type, --address or"
                      " --outputs")
    if sliced:
        answer = ctx.native(f"/states/{state_path(args.name)}/-/slice",
                            f"a slice of {args.name}", query={
                                "module": args.module, "type": args.types,
                                "address": args.addresses,
                                "outputs": "true" if args.outputs else None,
                                "version": args.version,
                                "format": "projection" if args.projected else None})
    elif args.version is not None:
        answer = ctx.native(f"/states/{state_path(args.name)}/-/versions/{args.version}",
                            f"version {args.version} of {args.name}")
    else:
        answer = ctx.http_lane(f"/{state_path(args.name)}", f"state {args.name}",
                               expect=(200, 404))
        if answer.status == 404:
            raise KlError(EXIT_NOT_FOUND, f"state {args.name}: no version has been written"
                          " (the HTTP lane answered 404)")
    if args.output and args.output != "-":
        Path(args.output).write_bytes(answer.body)
        ctx.out.note(f"wrote {len(answer.body)} bytes to {args.output}")
    else:
        ctx.out.stdout.flush()
        buffer = getattr(ctx.out.stdout, "buffer", None)
        if buffer is not None:
            buffer.write(answer.body)
            buffer.flush()
        else:
            ctx.out.stdout.write(answer.body.decode("utf-8", "replace"))
    return EXIT_OK


def _is_empty_state(document: Any) -> bool:
    """Terraform's State.Empty(): no resource instances and no outputs."""
    if not isinstance(document, dict):
        return True
    resources = document.get("resources") or []
    instances = any(resource.get("instances") for resource in resources
                    if isinstance(resource, dict))
    return not instances and not document.get("outputs")


def read_state_file(name: str) -> tuple[bytes, str]:
    """The bytes of the state file C{name} (C{-}: stdin) and what to call it."""
    if name == "-":
        return sys.stdin.buffer.read(), "stdin"
    try:
        return Path(name).read_bytes(), name
    except OSError as error:
        raise KlError(EXIT_USAGE, f"cannot read {name}: {error.strerror}") from None


def cmd_state_push(ctx: Context, args: argparse.Namespace) -> int:
    raw, source = read_state_file(args.file)
    try:
        parsed = parse_state(raw)
    except KilolockError as error:
        raise KlError(EXIT_REFUSED, f"{source} is not a state Kilolock accepts: {error.message}") \
            from None
    path = f"/{state_path(args.name)}"
    lock_id = args.lock_id
    own_lock: bytes | None = None
    if lock_id is None and args.lock:
        own_lock = lock_info("OperationTypeStatePush")
        ctx.http_lane(path, f"locking {args.name}", method="LOCK", body=own_lock,
                      headers=json_headers(own_lock))
        lock_id = json.loads(own_lock)["ID"]
    try:
        answer = ctx.http_lane(path, f"reading {args.name}", expect=(200, 404))
        remote = None if answer.status == 404 else answer.json()
        if remote is not None and raw == answer.body:
            body, serial = raw, parsed.serial
        else:
            body, serial = _push_body(raw, parsed.serial, parsed.lineage, remote, args.force,
                                      args.name, source)
        if remote is not None and body == answer.body:
            ctx.out.note(f"{args.name} already holds exactly {source}: nothing to push")
            result = {"state": args.name, "serial": serial, "lineage": parsed.lineage,
                      "size": len(body), "pushed": False}
        else:
            progress = None
            if args.progress or (args.progress is None and len(body) >= PROGRESS_THRESHOLD
                                 and ctx.out.stderr.isatty()):
                progress = Progress(len(body), ctx.out.stderr)
            chunked = args.chunked if args.chunked is not None else (
                len(body) >= UPLOAD_THRESHOLD)
            if chunked:
                upload = send_in_chunks(ctx, args.name, body, args.chunk_size, progress)
                ctx.native(f"/uploads/{upload}/commit", f"writing {args.name}",
                           method="POST", query={"ID": lock_id} if lock_id else None)
            else:
                ctx.http_lane(path, f"writing {args.name}", method="POST", body=body,
                              query={"ID": lock_id} if lock_id else None,
                              headers=json_headers(body), progress=progress)
            if progress is not None:
                progress.finish()
            result = {"state": args.name, "serial": serial, "lineage": parsed.lineage,
                      "size": len(body), "sha256": hashlib.sha256(body).hexdigest(),
                      "pushed": True}
    finally:
        if own_lock is not None:
            try:
                ctx.http_lane(path, f"unlocking {args.name}", method="UNLOCK", body=own_lock,
                              headers=json_headers(own_lock))
            except KlError as error:
                ctx.out.note(f"could not release kl's lock {lock_id}: {error.message}")
    if ctx.out.as_json:
        ctx.out.json(result)
    elif result["pushed"]:
        ctx.out.line(f"pushed {source} to {args.name}: serial {serial}, lineage"
                     f" {parsed.lineage}, {format_size(len(body))}")
    return EXIT_OK


def _push_body(raw: bytes, serial: int, lineage: str, remote: Any, force: bool, name: str,
               source: str) -> tuple[bytes, int]:
    """Terraform's checks for C{state push} (unless C{force}) and the bytes to
    send: the file itself, or re-serialised with a serial above the remote one
    when its own serial is not (equal serial with other content, or C{--force})."""
    if remote is None:
        return raw, serial
    if not isinstance(remote, dict):
        raise KlError(EXIT_PROTOCOL, f"the current state of {name} is not a JSON object")
    remote_serial = remote.get("serial")
    remote_lineage = remote.get("lineage")
    if not isinstance(remote_serial, int):
        raise KlError(EXIT_PROTOCOL, f"the current state of {name} has no serial")
    if not force and not _is_empty_state(remote):
        if remote_lineage != lineage:
            raise KlError(EXIT_CONFLICT, f"cannot push {source} (lineage {lineage}) over"
                          f" {name}, an unrelated state (lineage {remote_lineage});"
                          " --force pushes anyway")
        if serial < remote_serial:
            raise KlError(EXIT_CONFLICT, f"cannot push {source} (serial {serial}) over {name},"
                          f" which is newer (serial {remote_serial}); --force pushes anyway")
    if serial > remote_serial:
        return raw, serial
    new_serial = remote_serial + 1
    try:
        return restore_body(raw, new_serial, lineage), new_serial
    except KilolockError:
        raise KlError(EXIT_CONFLICT, f"{source} is an encrypted state with serial {serial},"
                      f" not above {name}'s serial {remote_serial}: re-encrypt it with a"
                      " higher serial") from None


def cmd_state_rollback(ctx: Context, args: argparse.Namespace) -> int:
    return ctx.show(f"/states/{state_path(args.name)}/-/rollback",
                    f"rolling back {args.name}", _print_rollback, method="POST",
                    body=json.dumps({"version": args.version}).encode(),
                    query={"ID": args.lock_id} if args.lock_id else None,
                    headers={"Content-Type": "application/json"})


def _print_rollback(out: Output, document: Any) -> None:
    version = document["version"]
    out.line(f"restored version {document['restoredFrom']} of {document['state']} as"
             f" version {version['number']} (serial {version['serial']}, lineage"
             f" {version['lineage']})")
    out.line("run `terraform plan` to see what the restored state means for the real"
             " infrastructure")
