"""Reading one version's bytes from the PostgreSQL store, in process.

A state (bench/state_history.py's realistic 41 KB state, two random
resources of 50 changed per version) is written --versions times through
L{PostgresStateStore.write_state}; then, each a median of --rounds reads
through the store's own read calls (the SQL, the decode and every check; no
HTTP):

  - C{current, writer}: the current version, read by the process that wrote
    it (Terraform's read of its state, on the server that serves it);
  - C{current, cold} and C{version N, cold}: read by a process that holds
    none of the state (its cache emptied before each read: after a restart,
    or a state this process never served); N are the chain's links.

With KL_BENCH_BASELINE_TREE (a tree of other code, e.g. C{git archive main
| tar -x -C DIR}) the same reads run on that code too, in a child process,
on a database of its own in the same cluster; printed side by side with
the ratio.

    python bench/version_reads.py [--versions 64] [--rounds 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import BASELINE_TREE, new_database, postgres_cluster
from state_history import history


def forget(store: Any, key: Any) -> None:
    """Empty the store's cache of the state, whichever the code's."""
    cache = getattr(store, "chains", None) or getattr(store, "snapshots", None)
    if cache is not None:
        cache.forget(key)


async def measure(dsn: str, versions: int, rounds: int) -> dict[str, float]:
    from twisted.internet import reactor

    from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey
    from kilolock.store.postgres.store import PostgresStateStore
    from kilolock.web.body import prepare_upload

    key, admin = StateKey(DEFAULT_TENANT, "prod/network"), Principal(DEFAULT_TENANT, "admin")
    raws = list(history(versions))
    store = PostgresStateStore(dsn, reactor, pool_size=2)
    await store.start()
    try:
        for raw in raws:
            await store.write_state(key, prepare_upload(raw), None, admin)

        async def timed(read: Any, expected: bytes, cold: bool) -> float:
            samples = []
            for _ in range(rounds):
                if cold:
                    forget(store, key)
                started = time.perf_counter()
                got = await read()
                samples.append(time.perf_counter() - started)
                assert got == expected
            return statistics.median(samples) * 1e3

        results = {"current, writer": await timed(lambda: store.read_current(key),
                                                  raws[-1], False)}
        results["current, cold"] = await timed(lambda: store.read_current(key), raws[-1], True)
        for number in sorted({1, 2, 16, 32, versions}):
            results[f"version {number}, cold"] = await timed(
                lambda n=number: store.read_version(key, n), raws[number - 1], True)
        return results
    finally:
        await store.stop()


def run_here(dsn: str, versions: int, rounds: int) -> dict[str, float]:
    from twisted.internet import defer, reactor

    outcome: dict[str, Any] = {}

    def go() -> None:
        d = defer.ensureDeferred(measure(dsn, versions, rounds))
        d.addCallbacks(lambda result: outcome.update(result=result),
                       lambda failure: outcome.update(error=failure))
        d.addBoth(lambda _: reactor.stop())

    reactor.callWhenRunning(go)
    reactor.run()
    if "error" in outcome:
        outcome["error"].raiseException()
    return outcome["result"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--child-dsn", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_dsn:
        print(json.dumps(run_here(args.child_dsn, args.versions, args.rounds)))
        return
    with postgres_cluster() as cluster:
        columns: dict[str, dict[str, float]] = {}
        if BASELINE_TREE:
            child = subprocess.run(
                [sys.executable, __file__, "--versions", str(args.versions), "--rounds",
                 str(args.rounds), "--child-dsn", new_database(cluster, "reads_baseline")],
                env={**os.environ, "PYTHONPATH": BASELINE_TREE}, check=True,
                capture_output=True, text=True, cwd=BASELINE_TREE)
            columns["baseline"] = json.loads(child.stdout.strip().splitlines()[-1])
        columns["this tree"] = run_here(new_database(cluster, "reads"), args.versions,
                                        args.rounds)
    names = list(columns)
    print(f"{args.versions} versions, medians of {args.rounds} reads, ms;"
          f" load average {os.getloadavg()[0]:.1f}")
    print("| read | " + " | ".join(names) + (" | ratio |" if len(names) == 2 else " |"))
    print("|---" * (len(names) + 1 + (len(names) == 2)) + "|")
    for read in columns[names[-1]]:
        values = [columns[name].get(read) for name in names]
        cells = " | ".join("" if value is None else f"{value:.3f}" for value in values)
        ratio = (f" | {values[1] / values[0]:.2f}" if len(names) == 2 and values[0]
                 and values[1] else (" | " if len(names) == 2 else ""))
        print(f"| {read} | {cells}{ratio} |")


if __name__ == "__main__":
    main()
