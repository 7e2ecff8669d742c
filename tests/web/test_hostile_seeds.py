"""The state lane (Terraform's http backend: LOCK, UNLOCK, GET, POST and
DELETE of /v1/states/...) fuzzed from random seeds on both stores, every
5xx counted instead of stopping at the first: the count must be 0.

The other hostile-input suites run derandomized, so they try the same
examples on every run; these start from seeds, so each seed explores other
histories of the same states (long chains of versions, tiny and large
states after one another).  CI runs L{DEFAULT_SEEDS} with a few dozen
to a few hundred examples; C{bench/hostile_seeds.py} runs five seeds of a thousand examples
or more on both stores and prints the counts (C{KL_FUZZ_SEEDS},
C{KL_FUZZ_EXAMPLES} and C{KL_FUZZ_REPORT} choose the seeds, the examples
per seed and where the counts are written as JSON).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from hypothesis import HealthCheck, given, seed, settings

from tests.support.hostile_support import (
    STORES,
    Harness,
    check_answer,
    make_harness,
    state_histories,
    still_serving,
)
from tests.support.stub_client import Reply
from tests.web.test_hostile_routes import STATE_LANE

#: The seeds CI runs (several seeds: KL_FUZZ_SEEDS="1,2,3").
DEFAULT_SEEDS = [20261201]
#: Examples per seed and store in CI, of requests and of histories
#: (KL_FUZZ_EXAMPLES overrides them all).
LANE_EXAMPLES = {"memory": 300, "postgres": 60}
HISTORY_EXAMPLES = {"memory": 150, "postgres": 40}
#: The state each history is written to (deleted before each).
HISTORY = "history"


def _seeds() -> list[int]:
    named = os.environ.get("KL_FUZZ_SEEDS", "")
    return [int(each) for each in named.split(",") if each.strip()] or DEFAULT_SEEDS


def _examples(table: dict[str, int], kind: str) -> int:
    named = os.environ.get("KL_FUZZ_EXAMPLES", "")
    return int(named) if named else table[kind]


@pytest.fixture(params=STORES)
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """A seeded harness on each store; after the test it must still serve."""
    built = make_harness(request)
    yield built
    still_serving(built)


def _report(test: str, kind: str, run_seed: int, examples: int,
            failures: list[dict[str, Any]]) -> None:
    """Append this run's counts to C{KL_FUZZ_REPORT} (one JSON line), if set."""
    path = os.environ.get("KL_FUZZ_REPORT")
    if not path:
        return
    with Path(path).open("a", encoding="utf-8") as out:
        out.write(json.dumps({"test": test, "store": kind, "seed": run_seed, "examples": examples,
                              "5xx": len(failures), "requests": failures}) + "\n")


def _settings(run_seed: int, examples: int) -> Any:
    """Hypothesis from C{run_seed}: C{examples} examples, no example database."""
    def apply(test: Any) -> Any:
        return seed(run_seed)(settings(
            max_examples=examples, deadline=None, derandomize=False, database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                   HealthCheck.data_too_large])(test))
    return apply


def _counted(failures: list[dict[str, Any]], method: str, path: str, body: bytes | None,
             reply: Reply, before: Any, after: Any) -> None:
    """Count a 5xx (with what was sent and answered); check any other answer."""
    if reply.status >= 500:
        failures.append({"method": method, "path": path, "status": reply.status,
                         "body": (body or b"")[:300].decode("utf-8", "replace"),
                         "answer": reply.body[:300].decode("utf-8", "replace")})
    else:
        check_answer(reply, before, after, f"{method} {path} {body!r:.200}")


@pytest.mark.parametrize("run_seed", _seeds())
@pytest_twisted.ensureDeferred
async def test_the_state_lane_answers_no_5xx_from_any_seed(harness: Harness,
                                                          run_seed: int) -> None:
    """Hostile methods, paths, lock infos and state bodies on the state lane,
    from seed C{run_seed}: no answer is a 5xx (each one is counted, with its
    request, and the count must be 0), a JSON answer is JSON, a refused
    request stores nothing; the server serves on afterwards."""
    examples = _examples(LANE_EXAMPLES, harness.kind)
    failures: list[dict[str, Any]] = []

    @_settings(run_seed, examples)
    @given(STATE_LANE)
    def one(request: tuple[str, str, bytes | None]) -> None:
        method, path, body = request
        before = harness.snapshot()
        reply = harness.state_request(method, path, body)
        _counted(failures, method, path, body, reply, before, harness.snapshot())
        harness.release("app", "new")

    await harness.run(one)
    _report("lane", harness.kind, run_seed, examples, failures)
    assert failures == [], f"{len(failures)} answers were 5xx: {failures[:3]}"


@pytest.mark.parametrize("run_seed", _seeds())
@pytest_twisted.ensureDeferred
async def test_a_history_of_hostile_states_answers_no_5xx_from_any_seed(
        harness: Harness, run_seed: int) -> None:
    """Histories of two to eight versions of one state (tiny, large,
    incompressible, hostile text; serials rising), each POSTed from a
    fresh state, from seed C{run_seed}: no answer is a 5xx (counted, and
    the count must be 0), every version is stored or refused with a 4xx,
    and each stored version reads back byte for byte."""
    examples = _examples(HISTORY_EXAMPLES, harness.kind)
    failures: list[dict[str, Any]] = []

    @_settings(run_seed, examples)
    @given(state_histories())
    def one(history: list[bytes]) -> None:
        harness.delete(HISTORY)
        path = f"/v1/states/{HISTORY}"
        for body in history:
            before = harness.snapshot()
            reply = harness.state_request("POST", path, body)
            _counted(failures, "POST", path, body, reply, before, harness.snapshot())
            if reply.status == 200:
                read = harness.state_request("GET", path)
                assert (read.status, read.body) == (200, body)

    await harness.run(one)
    _report("history", harness.kind, run_seed, examples, failures)
    assert failures == [], f"{len(failures)} answers were 5xx: {failures[:3]}"
