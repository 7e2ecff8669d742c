"""Benchmark: the state lane's hostile-input fuzz from several seeds, on
both stores, with every 5xx counted.

    python bench/hostile_seeds.py [--seeds 1,2,3,4,5] [--examples 1000] [--workers 2]

Runs tests/web/test_hostile_seeds.py (its two tests: single hostile requests on
the state lane, and histories of hostile states POSTed to one state) with
C{--examples} examples per seed, test and store -- far more than CI runs,
which is why it is a benchmark -- and prints, per test, store and seed, the
examples run and the answers that were 5xx (with the first few requests
that got one).  Exit status 1 when any 5xx was seen.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=0,
                        help="pytest-xdist workers (0: run in this process's pytest)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        report = Path(directory) / "counts.jsonl"
        env = {**os.environ, "KL_FUZZ_SEEDS": options.seeds,
               "KL_FUZZ_EXAMPLES": str(options.examples), "KL_FUZZ_REPORT": str(report)}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "tests/web/test_hostile_seeds.py"]
        if options.workers:
            command += ["-n", str(options.workers)]
        started = time.monotonic()
        finished = subprocess.run(command, cwd=ROOT, env=env, check=False,
                                  capture_output=True, text=True)
        elapsed = time.monotonic() - started
        rows = [json.loads(line) for line in report.read_text().splitlines()] \
            if report.exists() else []
    if not rows:
        print(finished.stdout[-3000:], finished.stderr[-3000:], sep="\n")
        return 2
    rows.sort(key=lambda row: (row["test"], row["store"], row["seed"]))
    print(f"{'TEST':<8} {'STORE':<9} {'SEED':>6} {'EXAMPLES':>9} {'5XX':>5}")
    for row in rows:
        print(f"{row['test']:<8} {row['store']:<9} {row['seed']:>6} {row['examples']:>9}"
              f" {row['5xx']:>5}")
        for request in row["requests"][:3]:
            print(f"    {request['status']} {request['method']} {request['path']}"
                  f" {request['body'][:120]!r}")
    total = sum(row["5xx"] for row in rows)
    print(f"{len(rows)} runs, {sum(row['examples'] for row in rows)} examples,"
          f" {total} answers 5xx; {elapsed:.0f} s")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
