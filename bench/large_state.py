"""Benchmark (b): one very large state (~120 MB, 50,000 resources).

POST it, then GET it back, while a second client GETs a small state every
20 ms.  Reports wall times, the server's peak RSS, the p99 of the small GETs,
and checks that the GET returns exactly the bytes written.  The floor,
measured in the same run on the same PostgreSQL: the same bytes inserted and
selected in one transaction with psycopg 3 binary parameters.

    python bench/large_state.py [--resources 50000] [--servers memory,postgres] [--rounds 3]

C{--servers postgres,postgres-encrypted} compares encryption at rest off
and on in the same run (rounds alternate the two), with the median ratio;
C{--servers postgres-baseline,postgres} compares the code of another tree
(C{KL_BENCH_BASELINE_TREE}, see C{servers.py}) with this one the same way.

Each round starts fresh servers (so the peak RSS is that round's); with
several rounds the medians are printed at the end.  The PostgreSQL is an
embedded cluster in a temporary directory (Kilolock gets its URL with
--database), stopped before the directory is removed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from http_client import Connection
from servers import BASELINE, ENCRYPTED, peak_rss_bytes, running

PROVIDER = 'provider["registry.terraform.io/hashicorp/aws"]'


def big_state(resources: int) -> bytes:
    """A v4 state of C{resources} instances of about 2.4 KB each."""
    filler = "x" * 1500
    doc = {
        "version": 4, "terraform_version": "1.15.5", "serial": 1,
        "lineage": str(uuid.uuid4()), "outputs": {},
        "resources": [{
            "module": f"module.shard_{index % 50}", "mode": "managed",
            "type": "aws_instance", "name": f"node_{index}", "provider": PROVIDER,
            "instances": [{
                "schema_version": 1,
                "attributes": {"id": f"i-{index:012x}", "ami": "ami-0123456789abcdef0",
                               "instance_type": "t3.micro", "user_data": filler,
                               "tags": {"Name": f"node-{index}", "team": "platform"},
                               "password": "not-really"},
                "sensitive_attributes": [[{"type": "get_attr", "value": "password"}]],
                "dependencies": [f"module.shard_{index % 50}.aws_instance.node_{index - 1}"]
                if index else [],
            }],
        } for index in range(resources)],
        "check_results": None,
    }
    return json.dumps(doc, indent=2).encode() + b"\n"


def floor_times(dsn: str, body: bytes) -> tuple[float, float]:
    """Insert and select C{body} in one transaction each with psycopg 3 binary
    parameters.  @return: (insert seconds, select seconds)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=False) as connection:
        connection.execute("CREATE TEMP TABLE floor (id bigserial, raw bytea)")
        connection.commit()
        started = time.monotonic()
        connection.execute("INSERT INTO floor (raw) VALUES (%b)", [body], binary=True)
        connection.commit()
        insert = time.monotonic() - started
        started = time.monotonic()
        row = connection.execute("SELECT raw FROM floor", binary=True).fetchone()
        connection.commit()
        select = time.monotonic() - started
        assert row is not None and bytes(row[0]) == body
    return insert, select


def copy_floor_times(dsn: str, body: bytes) -> tuple[float, float]:
    """A second reference, not the issue's floor: the same bytes through
    psycopg2 on a blocking connection with a binary COPY in and out (what
    Kilolock's large-state path uses).  @return: (insert s, select s)."""
    import io
    import struct

    import psycopg2

    connection = psycopg2.connect(dsn)
    try:
        cursor = connection.cursor()
        cursor.execute("CREATE TEMP TABLE copy_floor (raw bytea)")
        connection.commit()
        stream = (b"PGCOPY\n\xff\r\n\x00" + struct.pack("!IIhi", 0, 0, 1, len(body)) + body
                  + struct.pack("!h", -1))
        started = time.monotonic()
        cursor.copy_expert("COPY copy_floor FROM STDIN (FORMAT binary)", io.BytesIO(stream),
                           size=1 << 20)
        connection.commit()
        insert = time.monotonic() - started
        del stream
        sink = io.BytesIO()
        started = time.monotonic()
        cursor.copy_expert("COPY copy_floor TO STDOUT (FORMAT binary)", sink)
        raw = sink.getbuffer()[25:-2].tobytes()
        connection.commit()
        select = time.monotonic() - started
        assert raw == body
    finally:
        connection.close()
    return insert, select


async def small_get_loop(port: int, stop: asyncio.Event, latencies: list[float],
                         path: str = "/v1/states/small") -> None:
    """GET C{path} every 20 ms until C{stop}, appending each latency."""
    connection = await Connection.open(port)
    try:
        while not stop.is_set():
            started = time.monotonic()
            status, _ = await connection.request("GET", path)
            latencies.append(time.monotonic() - started)
            if status != 200:
                raise RuntimeError(f"GET {path} answered {status}")
            await asyncio.sleep(0.02)
    finally:
        await connection.close()


async def run_server(port: int, body: bytes, small: bytes) -> dict[str, float]:
    writer = await Connection.open(port)
    status, _ = await writer.request("POST", "/v1/states/small", small)
    assert status == 200, status
    stop = asyncio.Event()
    latencies: list[float] = []
    sampler = asyncio.create_task(small_get_loop(port, stop, latencies))
    await asyncio.sleep(0.5)
    started = time.monotonic()
    status, answer = await writer.request("POST", "/v1/states/big", body)
    post = time.monotonic() - started
    if status != 200:
        raise RuntimeError(f"big POST answered {status}: {answer[:200]!r}")
    started = time.monotonic()
    status, got = await writer.request("GET", "/v1/states/big")
    get = time.monotonic() - started
    stop.set()
    await sampler
    await writer.close()
    latencies.sort()
    return {
        "post_s": post, "get_s": get, "identical": float(got == body),
        "small_p50_ms": 1000 * statistics.median(latencies),
        "small_p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "small_max_ms": 1000 * latencies[-1], "small_n": float(len(latencies)),
    }


def report(kind: str, result: dict[str, float], insert: float, select: float,
           size: int, copy: tuple[float, float]) -> None:
    print(f"{kind}: POST {result['post_s']:.2f} s ({result['post_s'] / insert:.2f}x insert"
          f" floor, {result['post_s'] / copy[0]:.2f}x COPY), GET {result['get_s']:.2f} s"
          f" ({result['get_s'] / select:.2f}x select floor, {result['get_s'] / copy[1]:.2f}x"
          f" COPY), identical={bool(result['identical'])}, peak RSS"
          f" {result['rss'] / 1e6:.0f} MB ({result['rss'] / size:.2f}x state), small GET p50"
          f" {result['small_p50_ms']:.1f} ms p99 {result['small_p99_ms']:.1f} ms max"
          f" {result['small_max_ms']:.1f} ms (n={int(result['small_n'])})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resources", type=int, default=50_000)
    parser.add_argument("--servers", default="memory,postgres")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    body = big_state(args.resources)
    small = json.dumps({"version": 4, "serial": 1, "lineage": "s", "resources": [],
                        "outputs": {}}).encode()
    size = len(body)
    kinds = args.servers.split(",")
    print(f"state: {size / 1e6:.1f} MB, {args.resources} resources")
    from kilolock.store.postgres.embedded import EmbeddedPostgres

    floors: list[tuple[float, float]] = []
    copy_floors: list[tuple[float, float]] = []
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="kilolock-bench-pg-") as scratch:
        cluster = EmbeddedPostgres(Path(scratch) / "data", database="bench")
        try:
            dsn = cluster.start_blocking()
            for round_index in range(args.rounds):
                print(f"-- round {round_index + 1}/{args.rounds}")
                insert, select = floor_times(dsn, body)
                floors.append((insert, select))
                print(f"floor (psycopg 3, binary): insert {insert:.2f} s, select {select:.2f} s")
                copy_floors.append(copy_floor_times(dsn, body))
                print(f"reference (psycopg2, blocking, binary COPY): insert"
                      f" {copy_floors[-1][0]:.2f} s, select {copy_floors[-1][1]:.2f} s")
                for kind in kinds if round_index % 2 == 0 else kinds[::-1]:
                    on_database = kind in ("postgres", ENCRYPTED, BASELINE)
                    extra = ["--database", dsn] if on_database else []
                    with running(kind, extra) as (port, pid):
                        result = asyncio.run(run_server(port, body, small))
                        result["rss"] = float(peak_rss_bytes(pid))
                    results[kind].append(result)
                    report(kind, result, insert, select, size, copy_floors[-1])
                    if on_database:
                        empty_bench_database(dsn)
        finally:
            cluster.stop_blocking()
    if args.rounds > 1:
        insert = statistics.median(f[0] for f in floors)
        select = statistics.median(f[1] for f in floors)
        print(f"-- medians of {args.rounds} rounds")
        print(f"floor (psycopg 3, binary): insert {insert:.2f} s, select {select:.2f} s")
        copy = (statistics.median(f[0] for f in copy_floors),
                statistics.median(f[1] for f in copy_floors))
        print(f"reference (psycopg2, blocking, binary COPY): insert {copy[0]:.2f} s,"
              f" select {copy[1]:.2f} s")
        for kind in kinds:
            median = {name: statistics.median(r[name] for r in results[kind])
                      for name in results[kind][0]}
            median["identical"] = float(all(r["identical"] for r in results[kind]))
            report(kind, median, insert, select, size, copy)
    for other in (ENCRYPTED, BASELINE):
        if "postgres" not in kinds or other not in kinds:
            continue
        for name in ("post_s", "get_s"):
            ratios = [theirs[name] / ours[name] for ours, theirs
                      in zip(results["postgres"], results[other], strict=True)]
            print(f"{other}/postgres {name[:-2].upper()}: median ratio"
                  f" {statistics.median(ratios):.2f} (rounds: "
                  + ", ".join(f"{ratio:.2f}" for ratio in ratios) + ")")


def empty_bench_database(dsn: str) -> None:
    """Drop Kilolock's tables (the next round starts from a blank database)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("DROP SCHEMA public CASCADE")
        connection.execute("CREATE SCHEMA public")


if __name__ == "__main__":
    main()
