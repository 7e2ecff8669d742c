"""The snapshot policy's settings against bytes per version and read time.

For each setting of L{kilolock.atrest.compression.CompressionPolicy}
(snapshot_ratio, max_versions_since, delta_level, level), --states histories
of --versions versions of the realistic 41 KB state (bench/state_history.py,
2 random resources of 50 changed per version) are stored as the write path
stored them before chains (bench/storage.py's policy_history with chains
off: the newest snapshot offered to every write; bench/storage.py measures
the policy with chains), then every version is read back (its snapshot
decoded, then its delta, each checked against its sha256).  Printed: the
stored payload per version (plain), the share of snapshots, and the medians
of encode and read time per version in microseconds (a read always decodes
one snapshot and at most one delta, so the setting moves its time little).

    python bench/snapshot_policy.py [--versions 200] [--states 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from state_history import history
from storage import policy_history

from kilolock.atrest.compression import DEFAULT_POLICY, CompressionPolicy

SETTINGS = [
    CompressionPolicy(snapshot_ratio=ratio, max_versions_since=since, delta_level=delta,
                      level=level)
    for ratio, since, delta, level in (
        (0.1, 64, 1, 3), (0.15, 64, 1, 3), (0.2, 64, 1, 3), (0.25, 64, 1, 3), (0.3, 64, 1, 3),
        (0.4, 64, 1, 3), (0.5, 64, 1, 3), (0.7, 64, 1, 3), (0.3, 16, 1, 3), (0.2, 64, 3, 3),
        (0.3, 64, 3, 3), (0.3, 64, 9, 3), (0.3, 64, 19, 3), (0.2, 64, 1, 9), (0.2, 64, 1, 19))
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", type=int, default=200)
    parser.add_argument("--states", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    histories = [list(history(args.versions, seed=seed)) for seed in range(args.states)]
    print(f"{args.states} x {args.versions} versions of a {len(histories[0][0]):,}-byte state,"
          f" 2 random resources of 50 changed per version; medians of {args.rounds} rounds")
    print("| snapshot_ratio | max_versions_since | delta_level | level | payload bytes per"
          " version | snapshots | encode us | read us |")
    print("|---|---|---|---|---|---|---|---|")
    for policy in SETTINGS:
        sizes: list[int] = []
        snapshots = 0
        encodes: list[float] = []
        reads: list[float] = []
        for round_ in range(args.rounds):
            for raws in histories:
                stored, encode_times, decode_times, snaps, _ = policy_history(
                    raws, policy, False, chains=False)
                encodes.append(statistics.median(encode_times))
                reads.append(statistics.median(decode_times))
                if round_ == 0:
                    sizes += stored
                    snapshots += snaps
        mark = " (default)" if policy == DEFAULT_POLICY else ""
        print(f"| {policy.snapshot_ratio}{mark} | {policy.max_versions_since}"
              f" | {policy.delta_level} | {policy.level} | {statistics.mean(sizes):,.0f}"
              f" | {snapshots / len(sizes):.0%} | {statistics.median(encodes) * 1e6:.0f}"
              f" | {statistics.median(reads) * 1e6:.0f} |")


if __name__ == "__main__":
    main()
