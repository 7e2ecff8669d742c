"""Benchmark: slices of the ~120 MB state (50,000 resources in 50 modules).

In process, each round: the baseline -- json.loads of the whole state, the
module's resources picked out, json.dumps of the slice -- next to
kilolock.tfstate.slice on the same bytes: one module (1,000 resources), one
address, the outputs only, and one address projected.  Each is timed, and
its peak of Python allocations while it runs is measured (tracemalloc, in a
separate run so the timing is not slowed).  Then, per server kind, the
state is POSTed once and each round GETs it whole and GETs one module's
slice (-/slice?module=), timing both from the client.

    python bench/slice.py [--resources 50000] [--rounds 5] [--servers memory,postgres]

Medians over the rounds, and ratios against the baseline of the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from large_state import big_state
from servers import peak_rss_bytes, running

from kilolock.tfstate.address import parse_address
from kilolock.tfstate.slice import Selector, slice_document, slice_projection

MODULE = "module.shard_7"
ADDRESS = "module.shard_3.aws_instance.node_3"


def baseline(raw: bytes) -> bytes:
    """What a server without a streaming slice does: decode it all."""
    document = json.loads(raw)
    document["resources"] = [r for r in document["resources"] if r.get("module") == MODULE]
    return json.dumps(document, indent=2).encode()


def cases(raw: bytes) -> dict[str, Callable[[], Any]]:
    module = Selector(modules=(parse_address(MODULE),))
    address = Selector(addresses=(parse_address(ADDRESS),))
    return {
        "baseline: json.loads + filter + dumps": lambda: baseline(raw),
        "slice: one module (1,000 resources)": lambda: slice_document(raw, module),
        "slice: one address": lambda: slice_document(raw, address),
        "slice: outputs only": lambda: slice_document(raw, Selector(outputs=True)),
        "slice: one address, projected": lambda: slice_projection(raw, address),
    }


def peak_allocated(function: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def in_process(raw: bytes, rounds: int) -> None:
    timings: dict[str, list[float]] = {}
    peaks: dict[str, int] = {}
    for _ in range(rounds):
        for name, function in cases(raw).items():
            started = time.perf_counter()
            function()
            timings.setdefault(name, []).append(time.perf_counter() - started)
    for name, function in cases(raw).items():
        peaks[name] = peak_allocated(function)
    base = statistics.median(timings["baseline: json.loads + filter + dumps"])
    print(f"in process, {len(raw) / 2**20:.1f} MiB state, {rounds} rounds (medians):")
    for name, values in timings.items():
        median = statistics.median(values)
        print(f"  {name:42s} {median:7.3f} s  ({median / base:5.2f} x baseline)"
              f"  peak allocations {peaks[name] / 2**20:7.1f} MiB")


def over_http(kind: str, raw: bytes, rounds: int) -> None:
    import http.client

    with running(kind) as (port, pid):
        def call(method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            try:
                connection.request(method, path, body=body,
                                   headers={"Content-Type": "application/json"})
                response = connection.getresponse()
                return response.status, response.read()
            finally:
                connection.close()

        status, _ = call("POST", "/v1/states/big", raw)
        assert status == 200, status
        whole, sliced = [], []
        for _ in range(rounds):
            started = time.perf_counter()
            status, body = call("GET", "/v1/states/big")
            whole.append(time.perf_counter() - started)
            assert status == 200 and body == raw
            started = time.perf_counter()
            status, body = call("GET", f"/v1/native/states/big/-/slice?module={MODULE}")
            sliced.append(time.perf_counter() - started)
            assert status == 200 and len(json.loads(body)["resources"]) == 1000
        print(f"{kind} server, {rounds} rounds (medians): GET whole state"
              f" {statistics.median(whole):.3f} s; GET -/slice?module={MODULE}"
              f" {statistics.median(sliced):.3f} s"
              f" ({statistics.median(sliced) / statistics.median(whole):.2f} x);"
              f" server peak RSS {peak_rss_bytes(pid) / 2**20:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resources", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--servers", default="memory,postgres",
                        help="comma-separated server kinds, or '' for none")
    args = parser.parse_args()
    raw = big_state(args.resources)
    in_process(raw, args.rounds)
    for kind in filter(None, args.servers.split(",")):
        over_http(kind, raw, args.rounds)


if __name__ == "__main__":
    main()
