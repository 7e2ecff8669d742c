"""kilolock.retention.policy: what a policy keeps, exactly, at its edges; where a
state's policy comes from; how a policy is read from a request."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kilolock.core.errors import InvalidField
from kilolock.retention.policy import (
    FROM_SERVER,
    FROM_STATE,
    FROM_TENANT,
    RetentionPolicy,
    VersionFacts,
    effective_policy,
    parse_policy,
    prunable,
    rebased,
)

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def history(*ages: timedelta, bases: dict[int, int] | None = None) -> list[VersionFacts]:
    """Versions 1, 2, ... created C{ages} before NOW (oldest first);
    C{bases}: delta number -> base number."""
    bases = bases or {}
    return [VersionFacts(number, NOW - age, bases.get(number))
            for number, age in enumerate(ages, 1)]


TEN_DAILY = history(*(DAY * (10 - index) for index in range(10)))  # 10 days old ... 1 day old


@pytest.mark.parametrize(("policy", "versions", "pruned"), [
    # No limit: everything stays.
    (RetentionPolicy(), TEN_DAILY, []),
    # The newest N: the edges N-1, N, N+1 of a history of 10.
    (RetentionPolicy(versions=10), TEN_DAILY, []),
    (RetentionPolicy(versions=9), TEN_DAILY, [1]),
    (RetentionPolicy(versions=11), TEN_DAILY, []),
    (RetentionPolicy(versions=1), TEN_DAILY, [1, 2, 3, 4, 5, 6, 7, 8, 9]),
    # Younger than D days: version 5 is exactly 6 days old (not younger than 6).
    (RetentionPolicy(days=6), TEN_DAILY, [1, 2, 3, 4, 5]),
    (RetentionPolicy(days=7), TEN_DAILY, [1, 2, 3, 4]),
    (RetentionPolicy(days=11), TEN_DAILY, []),
    (RetentionPolicy(days=1), TEN_DAILY, [1, 2, 3, 4, 5, 6, 7, 8, 9]),
    # Both: a version is kept when either limit keeps it.
    (RetentionPolicy(versions=3, days=5), TEN_DAILY, [1, 2, 3, 4, 5, 6]),
    (RetentionPolicy(versions=7, days=2), TEN_DAILY, [1, 2, 3]),
    # Ages a second around the edge.
    (RetentionPolicy(days=2), history(2 * DAY + timedelta(seconds=1), 2 * DAY,
                                      2 * DAY - timedelta(seconds=1), timedelta(0)), [1, 2]),
    # The current version stays even when it is old.
    (RetentionPolicy(days=1), history(30 * DAY, 20 * DAY, 10 * DAY), [1, 2]),
    # One version: nothing to prune.
    (RetentionPolicy(versions=1), history(30 * DAY), []),
    ([RetentionPolicy(versions=1)][0], [], []),
], ids=lambda value: repr(value) if not isinstance(value, list) else f"{len(value)}")
def test_a_policy_keeps_exactly_what_it_says(policy: RetentionPolicy,
                                            versions: list[VersionFacts],
                                            pruned: list[int]) -> None:
    """Table: the versions each policy lets go, oldest first."""
    assert prunable(versions, policy, NOW) == pruned


def test_a_locked_state_keeps_everything() -> None:
    """An operation in progress may read any version: nothing goes."""
    assert prunable(TEN_DAILY, RetentionPolicy(versions=1), NOW, locked=True) == []


def test_held_versions_stay() -> None:
    """A version an operation in progress holds is kept, the rest goes."""
    assert prunable(TEN_DAILY, RetentionPolicy(versions=2), NOW, held={3, 5}) == [
        1, 2, 4, 6, 7, 8]


def test_a_kept_delta_whose_base_goes_is_rebased() -> None:
    """The policy decides alone, chains or not; the kept deltas whose base
    goes are named for re-encoding, and no other version."""
    chain = history(*(DAY * (6 - index) for index in range(6)),
                    bases={2: 1, 3: 2, 4: 3, 5: 4, 6: 5})
    gone = prunable(chain, RetentionPolicy(versions=2), NOW)
    assert gone == [1, 2, 3, 4]
    assert rebased(chain, gone) == [5]
    against_snapshots = history(*(DAY * (6 - index) for index in range(6)),
                                bases={2: 1, 3: 1, 5: 4, 6: 4})
    gone = prunable(against_snapshots, RetentionPolicy(versions=4), NOW)
    assert gone == [1, 2]
    assert rebased(against_snapshots, gone) == [3]
    assert rebased(against_snapshots, [2, 3]) == []


def test_tombstones_do_not_count_among_the_newest() -> None:
    """The newest N are counted among stored versions: a history whose
    recent versions were purged keeps older stored ones instead."""
    stored = [version for version in TEN_DAILY if version.number not in (8, 9)]
    assert prunable(stored, RetentionPolicy(versions=3), NOW) == [1, 2, 3, 4, 5]


@given(st.lists(st.integers(min_value=0, max_value=400), min_size=1, max_size=40),
       st.integers(min_value=1, max_value=50) | st.none(),
       st.integers(min_value=1, max_value=400) | st.none())
def test_what_goes_is_exactly_what_no_rule_keeps(ages: list[int], versions: int | None,
                                                 days: int | None) -> None:
    """For any history: the current version stays, the newest N stay, every
    version younger than D days stays, and everything else goes."""
    facts = history(*(timedelta(hours=age) for age in sorted(ages, reverse=True)))
    policy = RetentionPolicy(versions, days)
    gone = set(prunable(facts, policy, NOW))
    newest = sorted((fact.number for fact in facts), reverse=True)
    for fact in facts:
        kept = (policy.keeps_everything or fact.number == newest[0]
                or (versions is not None and fact.number in newest[:versions])
                or (days is not None and NOW - fact.created_at < timedelta(days=days)))
        assert (fact.number in gone) is not kept


def test_the_state_override_wins_then_the_tenant_then_the_server() -> None:
    """Where a state's policy comes from."""
    server, tenant, state = (RetentionPolicy(128, 28), RetentionPolicy(10),
                             RetentionPolicy(days=3))
    assert effective_policy(server, tenant, state).source == FROM_STATE
    assert effective_policy(server, tenant, None).policy == tenant
    assert effective_policy(server, tenant, None).source == FROM_TENANT
    assert effective_policy(server, None, None).source == FROM_SERVER
    # An override that keeps everything is an override too.
    assert effective_policy(server, RetentionPolicy(), None).policy.keeps_everything


def test_a_policy_document_is_read_strictly() -> None:
    """Both members, whole numbers in range or null."""
    assert parse_policy({"versions": 128, "days": None}) == RetentionPolicy(128, None)
    assert parse_policy({"versions": None, "days": None}).keeps_everything


@pytest.mark.parametrize(("document", "field"), [
    ([], "body"), ({"versions": 1}, "days"), ({"days": 1}, "versions"),
    ({"versions": 0, "days": None}, "versions"), ({"versions": True, "days": None}, "versions"),
    ({"versions": 1.5, "days": None}, "versions"), ({"versions": "3", "days": None}, "versions"),
    ({"versions": None, "days": 36501}, "days"), ({"versions": None, "days": -1}, "days"),
    ({"versions": 10**30, "days": None}, "versions"),
    ({"versions": None, "days": None, "keep": 1}, "keep"),
])
def test_a_bad_policy_document_names_its_field(document: object, field: str) -> None:
    """Every bad member is a 400 naming it."""
    with pytest.raises(InvalidField) as raised:
        parse_policy(document)
    assert raised.value.field == field and raised.value.status == 400


def test_a_policy_describes_itself() -> None:
    """The reason a tombstone gives quotes the policy."""
    assert RetentionPolicy(128, 28).prune_reason() == (
        "retention: keep the newest 128 versions and versions younger than 28 days")
    assert RetentionPolicy(versions=1).describe() == "keep the newest 1 version"
    assert RetentionPolicy().describe() == "keep every version"
