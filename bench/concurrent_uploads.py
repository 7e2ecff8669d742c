"""Benchmark (c): concurrent large uploads against the memory budget.

Several clients (six by default) POST a ~150 MB state each at the same time
to Kilolock on PostgreSQL (its embedded cluster, started by C{twistd -n
kilolock} in a temporary data directory), retrying a 503 after its
C{Retry-After} as Terraform does (without Terraform's limit of two retries:
the point is that every upload is eventually stored).  Meanwhile a probe
GETs C{/healthz} every 20 ms.  Reported per round: the server's peak RSS
(VmHWM) and its RSS before, right after the uploads and 5 s later, the
wall time until every upload was stored, the 503s answered, the
C{/healthz} p50/p99/max, and whether every state reads back byte-exact.

    python bench/concurrent_uploads.py [--clients 6] [--resources 62800] [--rounds 3]
                                       [--configs default,unbounded]

C{default} runs the server with its default budgets (every upload is
admitted, their bodies wait on disk and are processed one at a time);
C{tight} with a body budget of 400 MB (two uploads admitted, the others
answered 503 and retried); C{two} with a parse budget of 320 MB (two
uploads processed at once); C{unbounded} with C{--body-budget-bytes 0
--parse-budget-bytes 0} (no admission control: the baseline, measured in
the same run).  The medians of the rounds are
printed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import contextlib

from http_client import Connection, content_md5, read_response
from large_state import big_state, small_get_loop
from servers import peak_rss_bytes, rss_bytes, running

CONFIGS = {
    "default": [],
    "tight": ["--body-budget-bytes", "400000000"],
    "two": ["--parse-budget-bytes", "320000000"],
    "unbounded": ["--body-budget-bytes", "0", "--parse-budget-bytes", "0"],
}
CHUNK = 1 << 20


async def post_once(port: int, path: str, body: bytes,
                    md5: str) -> tuple[int, dict[str, str], bytes]:
    """One POST on a new connection, reading the answer while the body is
    still being sent (as Go's client does: an early 503 is seen at once)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**20)
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: Go-http-client/1.1\r\n"
            f"Content-Type: application/json\r\nContent-Md5: {md5}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    answer = asyncio.create_task(read_response(reader))
    try:
        writer.write(head)
        view = memoryview(body)
        for start in range(0, len(body), CHUNK):
            if answer.done():
                break
            writer.write(view[start:start + CHUNK])
            await writer.drain()
    except (ConnectionError, OSError):
        pass  # the server answered early and closed: the answer tells why
    try:
        return await answer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


async def upload(port: int, path: str, body: bytes) -> tuple[int, float]:
    """POST C{body} until it is stored, sleeping a 503's C{Retry-After}.
    @return: (the number of 503s, the seconds spent waiting)."""
    md5 = content_md5(body)
    refused, waited = 0, 0.0
    while True:
        try:
            status, headers, answer = await post_once(port, path, body, md5)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            refused += 1  # a connection error: Terraform retries it too
            await asyncio.sleep(1.0)
            waited += 1.0
            continue
        if status == 200:
            return refused, waited
        if status != 503:
            raise RuntimeError(f"POST {path} answered {status}: {answer[:200]!r}")
        refused += 1
        delay = float(headers.get("retry-after", "1"))
        await asyncio.sleep(delay)
        waited += delay


async def one_round(port: int, pid: int, bodies: list[bytes]) -> dict[str, float]:
    connection = await Connection.open(port)
    status, _ = await connection.request(
        "POST", "/v1/states/warmup",
        b'{"version": 4, "serial": 1, "lineage": "w", "resources": [], "outputs": {}}')
    assert status == 200, status
    await asyncio.sleep(1.0)
    before = rss_bytes(pid)
    stop = asyncio.Event()
    latencies: list[float] = []
    probe = asyncio.create_task(small_get_loop(port, stop, latencies, "/healthz"))
    await asyncio.sleep(0.5)
    started = time.monotonic()
    outcomes = await asyncio.gather(*(upload(port, f"/v1/states/big-{index}", body)
                                      for index, body in enumerate(bodies)))
    elapsed = time.monotonic() - started
    stop.set()
    await probe
    peak = peak_rss_bytes(pid)
    right_after = rss_bytes(pid)
    await asyncio.sleep(5.0)
    settled = rss_bytes(pid)
    await connection.close()  # idle for longer than the idle timeout, maybe
    connection = await Connection.open(port)
    identical = True
    for index, body in enumerate(bodies):
        status, got = await connection.request("GET", f"/v1/states/big-{index}")
        identical = identical and status == 200 and got == body
        del got
    await connection.close()
    latencies.sort()
    return {
        "peak_mb": peak / 1e6, "before_mb": before / 1e6, "after_mb": right_after / 1e6,
        "settled_mb": settled / 1e6, "elapsed_s": elapsed,
        "refused": float(sum(refused for refused, _ in outcomes)),
        "most_refused": float(max(refused for refused, _ in outcomes)),
        "identical": float(identical),
        "probe_p50_ms": 1000 * statistics.median(latencies),
        "probe_p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "probe_max_ms": 1000 * latencies[-1], "probe_n": float(len(latencies)),
    }


def report(label: str, result: dict[str, float]) -> None:
    print(f"{label}: peak RSS {result['peak_mb']:.0f} MB (before {result['before_mb']:.0f},"
          f" after {result['after_mb']:.0f}, 5 s later {result['settled_mb']:.0f});"
          f" all stored in {result['elapsed_s']:.1f} s with {result['refused']:.0f} 503s"
          f" (at most {result['most_refused']:.0f} for one upload);"
          f" byte-exact={bool(result['identical'])}; /healthz p50"
          f" {result['probe_p50_ms']:.1f} ms p99 {result['probe_p99_ms']:.1f} ms max"
          f" {result['probe_max_ms']:.1f} ms (n={result['probe_n']:.0f})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--resources", type=int, default=62_800)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--configs", default="default,tight,two,unbounded")
    args = parser.parse_args()
    template = big_state(args.resources)
    lineage = template.split(b'"lineage": "', 1)[1][:36]
    # Same size, different bytes: each client's state has its own lineage.
    bodies = [template.replace(lineage, f"{index:036d}".encode(), 1)
              for index in range(args.clients)]
    del template
    print(f"{args.clients} clients, {len(bodies[0]) / 1e6:.1f} MB each", flush=True)
    configs = args.configs.split(",")
    results: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    for round_index in range(args.rounds):
        print(f"-- round {round_index + 1}/{args.rounds}", flush=True)
        for name in configs:
            with running("postgres", CONFIGS[name]) as (port, pid):
                result = asyncio.run(one_round(port, pid, bodies))
            results[name].append(result)
            report(name, result)
    print(f"-- medians of {args.rounds} rounds")
    for name in configs:
        median = {key: statistics.median(r[key] for r in results[name])
                  for key in results[name][0]}
        median["identical"] = float(all(r["identical"] for r in results[name]))
        report(name, median)


if __name__ == "__main__":
    main()
