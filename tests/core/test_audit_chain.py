"""The audit-chain rule, decided once in L{kilolock.core.audit.verify_chain}: every
way a chain can break, on a whole chain and on a filtered selection."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from attrs import evolve

from kilolock.core.audit import (
    ALTERED,
    GENESIS,
    GENESIS_HEAD,
    HEAD_MISMATCH,
    MISSING,
    NOT_GENESIS,
    TRUNCATED,
    UNLINKED,
    ChainHead,
    event_hash,
    first_broken_link,
    unchained_event,
    verify_chain,
)
from kilolock.core.events import AuditEvent


def chain(length: int) -> list[AuditEvent]:
    """A valid chain of C{length} events of one tenant."""
    events: list[AuditEvent] = []
    for seq in range(1, length + 1):
        event = evolve(unchained_event("t", "state_write", f"p{seq}", "app",
                                       datetime(2026, 1, 1, 0, 0, seq, tzinfo=UTC)),
                       seq=seq, prev_hash=events[-1].hash if events else GENESIS)
        events.append(evolve(event, hash=event_hash(event)))
    return events


def altered(event: AuditEvent) -> AuditEvent:
    """C{event} with its principal changed and its hash left as it was."""
    return evolve(event, principal="mallory")


def rehashed(event: AuditEvent, **changes: object) -> AuditEvent:
    """C{event} changed and re-hashed (its own hash verifies again)."""
    changed = evolve(event, **changes)
    return evolve(changed, hash=event_hash(changed))


def test_a_whole_valid_chain_and_an_empty_one_verify() -> None:
    """A chain built link by link from genesis verifies, whole or empty."""
    assert verify_chain(chain(5)) is None
    assert verify_chain([]) is None
    assert first_broken_link(chain(5)) is None


@pytest.mark.parametrize(("events", "problem", "seq", "expected_seq"), [
    # an event's contents changed: its hash no longer matches
    ([*chain(5)[:2], altered(chain(5)[2]), *chain(5)[3:]], ALTERED, 3, 3),
    # an event deleted from the middle: the next one stands where it should not
    ([*chain(5)[:2], *chain(5)[3:]], MISSING, 4, 3),
    # the first events deleted: the chain does not start at seq 1
    (chain(5)[2:], MISSING, 3, 1),
    # a re-hashed event that links to something else than its predecessor
    ([*chain(3)[:2], rehashed(chain(3)[2], prev_hash="f" * 64)], UNLINKED, 3, 3),
    # a first event that does not start from the genesis hash
    ([rehashed(chain(1)[0], prev_hash="f" * 64)], NOT_GENESIS, 1, 1),
], ids=["altered", "missing-middle", "missing-start", "unlinked", "not-genesis"])
def test_each_break_is_found_where_it_is(events: list[AuditEvent], problem: str, seq: int,
                                         expected_seq: int) -> None:
    """The first event that does not verify, why, and which seq belonged there."""
    broken = verify_chain(events)
    assert broken is not None
    assert (broken.problem, broken.seq, broken.expected_seq) == (problem, seq, expected_seq)
    assert first_broken_link(events) == broken.event


def test_reasons_name_the_break_and_no_content() -> None:
    """The reason sentence says what broke and never quotes the event."""
    events = chain(4)
    reasons = {
        verify_chain([*events[:1], *events[2:]]).reason(),  # type: ignore[union-attr]
        verify_chain([altered(events[0])]).reason(),  # type: ignore[union-attr]
    }
    assert reasons == {"expected event seq 2 here, found seq 3",
                       "its contents do not match its hash (the event was altered)"}
    assert not any("mallory" in reason for reason in reasons)


def test_a_filtered_selection_checks_hashes_and_the_links_it_holds() -> None:
    """Without C{complete}, gaps are expected (other states' events were
    filtered out) but every event's hash and each link between consecutive
    seqs still verify."""
    events = chain(6)
    assert verify_chain(events[1::2], complete=False) is None
    assert verify_chain(events[3:], complete=False) is None
    tampered = verify_chain([events[1], altered(events[3])], complete=False)
    assert tampered is not None and (tampered.problem, tampered.seq) == (ALTERED, 4)
    unlinked = verify_chain([events[1], rehashed(events[2], prev_hash="e" * 64)],
                            complete=False)
    assert unlinked is not None and (unlinked.problem, unlinked.seq) == (UNLINKED, 3)


# -- the head: truncation and rewrites -------------------------------------------------


def head_of(events: list[AuditEvent]) -> ChainHead:
    return ChainHead(events[-1].seq, events[-1].hash) if events else GENESIS_HEAD


def test_a_chain_that_reaches_its_heads_verifies() -> None:
    """The recorded head at the end, a pinned head earlier, events appended
    after a head: all fine; so is an empty chain with the genesis head."""
    events = chain(6)
    assert verify_chain(events, heads=[head_of(events), head_of(events[:3])]) is None
    assert verify_chain(events, heads=[head_of(events[:4])]) is None
    assert verify_chain([], heads=[GENESIS_HEAD]) is None


def test_deleting_the_newest_events_is_truncation() -> None:
    """The newest events deleted, the head kept: every link still verifies,
    but the chain ends before its head -- truncated, at the first missing
    seq; with every event gone too."""
    events = chain(6)
    head = head_of(events)
    broken = verify_chain(events[:4], heads=[head])
    assert broken is not None
    assert (broken.problem, broken.seq, broken.head) == (TRUNCATED, 5, head)
    assert broken.event == events[3]
    assert broken.reason() == ("the chain ends at event seq 4 but its head is seq 6: the"
                               " events after seq 4 are missing (truncated)")
    emptied = verify_chain([], heads=[head])
    assert emptied is not None and (emptied.problem, emptied.seq) == (TRUNCATED, 1)


def test_a_rewritten_chain_misses_its_pinned_head() -> None:
    """A chain rewritten from some event on (re-hashed and re-linked, so every
    link verifies) no longer passes through a head pinned before: the event
    at the pinned seq has another hash."""
    events = chain(5)
    pinned = head_of(events[:4])
    forged = [*events[:2]]
    for event in events[2:]:
        forged.append(rehashed(event, principal="mallory", prev_hash=forged[-1].hash))
    assert verify_chain(forged) is None
    assert verify_chain(forged, heads=[head_of(forged)]) is None
    broken = verify_chain(forged, heads=[head_of(forged), pinned])
    assert broken is not None and (broken.problem, broken.seq, broken.head) == (
        HEAD_MISMATCH, 4, pinned)
    assert "mallory" not in broken.reason()


def test_chain_heads_are_written_and_read_as_seq_colon_hash() -> None:
    """SEQ:HASH both ways; anything else is a ValueError naming the form."""
    head = ChainHead(42, "ab" * 32)
    assert ChainHead.parse(str(head)) == head == ChainHead.parse(f" {head}\n")
    for text in ("42", "42:", "x:" + "ab" * 32, "42:" + "AB" * 32, "42:abc", "-1:" + "0" * 64,
                 "\u0664\u0662:" + "ab" * 32):
        with pytest.raises(ValueError, match="SEQ:HASH"):
            ChainHead.parse(text)
