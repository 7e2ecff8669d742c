"""C{kl events} (the audit trail, filtered, paged or followed), C{kl events
verify} (the hash chain, checked by the server and again here with
L{kilolock.core.audit.verify_chain}, against the head the server recorded and a
head pinned with C{--expect-head}) and C{kl events head} (the head to pin)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kilolock.core.audit import (
    GENESIS_HEAD,
    HEAD_MISMATCH,
    MISSING,
    NOT_GENESIS,
    TRUNCATED,
    UNLINKED,
    ChainHead,
    verify_chain,
)
from kilolock.core.events import AuditEvent
from kilolock.core.model import parse_created
from kilolock.kl.arguments import CommandTree, positive_float, positive_int, rfc3339_time
from kilolock.kl.context import Context
from kilolock.kl.exits import EXIT_BROKEN_CHAIN, EXIT_OK
from kilolock.kl.output import Output, format_time

#: Events per page when kl reads the whole trail.
PAGE_SIZE = 10000


def register(tree: CommandTree) -> None:
    events = tree.command("events", cmd_events, "the audit trail")
    events.add_argument("--state", help="only this state's events")
    events.add_argument("--kind", action="append",
                        help="only this kind (repeatable), e.g. state_write, state_rollback")
    events.add_argument("--since", type=rfc3339_time, help="from this time (RFC 3339)")
    events.add_argument("--until", type=rfc3339_time, help="before this time (RFC 3339)")
    events.add_argument("--last", type=positive_int,
                        help="the last N events (default 100; 10 with --follow)")
    events.add_argument("--all", action="store_true", help="every event")
    events.add_argument("--follow", "-f", action="store_true",
                        help="keep printing new events (Ctrl-C stops)")
    events.add_argument("--interval", type=positive_float, default=2.0,
                        help="seconds between polls with --follow (default 2)")
    events.add_argument("--stop-after", dest="stop_after", type=positive_int,
                        help="with --follow: stop after N new events")
    tree.subcommands("events", events)
    verify = tree.command("verify", cmd_events_verify, "check the audit hash chain",
                          group="events")
    verify.add_argument("--expect-head", dest="expect_head", type=chain_head_argument,
                        metavar="SEQ:HASH",
                        help="a head pinned earlier (`kl events head`): the chain must"
                             " still pass through it")
    tree.command("head", cmd_events_head, "the audit chain's head, SEQ:HASH, to pin"
                 " outside Kilolock", group="events")


def chain_head_argument(text: str) -> ChainHead:
    """C{--expect-head}'s value.  @raise argparse.ArgumentTypeError: not SEQ:HASH."""
    try:
        return ChainHead.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _event_query(args: argparse.Namespace) -> dict[str, Any]:
    return {"state": args.state, "kind": ",".join(args.kind) if args.kind else None,
            "since": args.since, "until": args.until}


def _all_events(ctx: Context, query: Mapping[str, Any], what: str) -> tuple[list[Any], bool]:
    """Every event the query selects, page after page; and whether any page
    said it was scoped (only the events this token may see)."""
    events: list[Any] = []
    after, scoped = 0, False
    while True:
        page = ctx.native_json("/events", what,
                               query={**query, "after": after, "limit": PAGE_SIZE})
        events.extend(page["events"])
        scoped = scoped or bool(page.get("scoped"))
        if not page.get("more"):
            return events, scoped
        after = page["next"]


def _print_events(out: Output, events: list[dict[str, Any]]) -> None:
    if out.as_json:
        for event in events:  # one JSON document per line: follows stream cleanly
            out.line(json.dumps(event, ensure_ascii=False))
        return
    for event in events:
        detail = event.get("detail") or {}
        facts = []
        if event.get("serial") is not None:
            facts.append(f"serial {event['serial']}")
        if isinstance(detail, dict):
            if "version" in detail:
                facts.append(f"version {detail['version']}")
            if "restored_version" in detail:
                facts.append(f"restored {detail['restored_version']}")
            if detail.get("who"):
                facts.append(f"who {detail['who']}")
        if event.get("lockId"):
            facts.append(f"lock {event['lockId']}")
        out.line(f"{event['seq']:>6}  {format_time(event['at'])}  {event['kind']:<18}"
                 f"  {event.get('state') or '-':<24}  {event['principal']:<16}"
                 f"  {', '.join(facts)}".rstrip())
    out.stdout.flush()


def cmd_events(ctx: Context, args: argparse.Namespace) -> int:
    query = _event_query(args)
    if args.all:
        events, _ = _all_events(ctx, query, "listing events")
    else:
        last = args.last if args.last is not None else (10 if args.follow else 100)
        events = ctx.native_json("/events", "listing events",
                                 query={**query, "last": last})["events"]
    if not ctx.out.as_json and not events and not args.follow:
        ctx.out.note("no events")
    if ctx.out.as_json and not args.follow:
        ctx.out.json({"events": events})
    else:
        _print_events(ctx.out, events)
    if not args.follow:
        return EXIT_OK
    seen = 0
    after = events[-1]["seq"] if events else _head_seq(ctx, query)
    try:
        while args.stop_after is None or seen < args.stop_after:
            time.sleep(args.interval)
            page = ctx.native_json("/events", "following events",
                                   query={**query, "after": after, "limit": 1000})
            fresh = page["events"]
            if args.stop_after is not None:
                fresh = fresh[:args.stop_after - seen]
            if fresh:
                _print_events(ctx.out, fresh)
                after = fresh[-1]["seq"]
                seen += len(fresh)
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def _head_seq(ctx: Context, query: Mapping[str, Any]) -> int:
    page = ctx.native_json("/events", "following events", query={**query, "last": 1})
    return int(page["events"][-1]["seq"]) if page["events"] else 0


def cmd_events_head(ctx: Context, args: argparse.Namespace) -> int:
    document = ctx.native_json("/events/head", "reading the chain head")
    if not ctx.out.json_if_asked(document):
        ctx.out.line(str(document["head"]))
    return EXIT_OK


def cmd_events_verify(ctx: Context, args: argparse.Namespace) -> int:
    pinned: ChainHead | None = args.expect_head
    server = ctx.native_json("/events/verify", "verifying events",
                             query={"head": str(pinned)} if pinned else None)
    events, scoped = _all_events(ctx, {}, "reading events")
    heads = [] if scoped else [_server_head(server), *([pinned] if pinned else [])]
    problem = check_chain(events, complete=not scoped, heads=heads)
    verified = server.get("verified") is True and problem is None
    result = {"verified": verified, "server": server, "checkedEvents": len(events),
              "scoped": scoped, "problem": problem,
              "pinnedHead": None if pinned is None else str(pinned)}
    if ctx.out.as_json:
        ctx.out.json(result)
    elif verified:
        ctx.out.line(f"the audit chain verifies: {server['events']} events, head"
                     f" #{server['headSeq']} {server.get('headHash') or '-'}")
        if pinned is not None:
            ctx.out.line(f"it passes through the pinned head #{pinned.seq}")
        ctx.out.line(f"checked here too: {len(events)} events"
                     + (" (those this token may see)" if scoped else ""))
    else:
        if server.get("verified") is not True:
            ctx.out.line(f"the server finds the chain broken at event #"
                         f"{server.get('firstBrokenSeq')}: {server.get('reason') or '?'}")
        if problem is not None:
            ctx.out.line(f"kl finds the chain broken: {problem}")
    return EXIT_OK if verified else EXIT_BROKEN_CHAIN


def _server_head(server: Mapping[str, Any]) -> ChainHead:
    """The head the server says its store recorded."""
    seq = server.get("headSeq")
    hash_ = server.get("headHash")
    if not isinstance(seq, int) or not seq:
        return GENESIS_HEAD
    return ChainHead(seq, str(hash_))


def check_chain(events: list[dict[str, Any]], complete: bool,
                heads: Sequence[ChainHead] = ()) -> str | None:
    """Recompute every event's hash and each link to its predecessor (all links
    from genesis when C{complete}), and that the chain passes through
    C{heads}, with L{verify_chain}; None when everything holds, else what
    broke, in words."""
    chain: list[AuditEvent] = []
    for document in events:
        at = parse_created(document.get("at") or "")
        if at is None:
            return f"event #{document.get('seq')} has no readable time"
        chain.append(AuditEvent(
            seq=document["seq"], tenant=document.get("tenant", ""), kind=document["kind"],
            state_path=document.get("state"), principal=document["principal"], at=at,
            lock_id=document.get("lockId"), serial=document.get("serial"),
            sha256=document.get("sha256"), detail=document.get("detailText", ""),
            prev_hash=document.get("prevHash", ""), hash=document.get("hash", "")))
    broken = verify_chain(chain, complete=complete, heads=heads)
    if broken is None:
        return None
    if broken.problem in (TRUNCATED, HEAD_MISMATCH):
        return broken.reason()
    if broken.expected_seq == 1 and broken.problem in (MISSING, NOT_GENESIS):
        return f"the chain does not start at genesis (first event #{broken.seq})"
    if broken.problem == MISSING:
        return f"event #{broken.expected_seq} is missing"
    if broken.problem == UNLINKED:
        return f"event #{broken.seq} does not link to event #{broken.seq - 1}"
    return f"event #{broken.seq} does not match its hash"
