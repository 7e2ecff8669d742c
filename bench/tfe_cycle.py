"""The TFE lane's write cycle next to the HTTP lane's, on one server.

HTTP lane (what the http backend sends): LOCK -> POST ?ID= -> UNLOCK.
TFE lane (what the cloud {} block sends): actions/lock -> POST state-versions
-> PUT the raw state -> PUT the JSON state -> GET the version ->
actions/unlock.  One client, a 50-resource (~15 KB) state, cycles per
second; medians of several rounds, and the ratio TFE/HTTP, for the memory
and PostgreSQL stores (each lane on its own workspace of the same server).

    python bench/tfe_cycle.py [--seconds 5] [--rounds 3] [--servers memory,postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from http_client import Connection
from servers import running
from write_cycle import client_loop, state_template


def _path(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + "?" + parts.query


async def http_cycles(port: int, name: str, template: str, deadline: float) -> int:
    """Benchmark (a)'s client: LOCK -> POST ?ID= -> UNLOCK."""
    return await client_loop(port, name, template, deadline, floor=False)


async def tfe_cycles(port: int, name: str, template: str, deadline: float) -> int:
    connection = await Connection.open(port)
    try:
        create = json.dumps({"data": {"type": "workspaces", "attributes": {"name": name}}})
        status, body = await connection.request(
            "POST", "/api/v2/organizations/default/workspaces", create.encode(), md5=False)
        if status != 201:
            raise RuntimeError(f"creating the workspace answered {status}")
        base = f"/api/v2/workspaces/{json.loads(body)['data']['id']}"
        serial, cycles = 1, 0
        while time.monotonic() < deadline:
            state = template.replace("{serial}", str(serial)).encode()
            version = json.dumps({"data": {"type": "state-versions", "attributes": {
                "serial": serial, "md5": hashlib.md5(state).hexdigest(),
                "lineage": "bench", "json-state-outputs": "e30="}}}).encode()
            status, _ = await connection.request("POST", f"{base}/actions/lock", b"{}", False)
            status_create, answer = await connection.request(
                "POST", f"{base}/state-versions", version, md5=False)
            if (status, status_create) != (200, 201):
                raise RuntimeError(f"lock/create answered {status}/{status_create}")
            created = json.loads(answer)["data"]
            for method, target, payload in (
                    ("PUT", _path(created["attributes"]["hosted-state-upload-url"]), state),
                    ("PUT", _path(created["attributes"]["hosted-json-state-upload-url"]),
                     b'{"format_version":"1.0"}'),
                    ("GET", f"/api/v2/state-versions/{created['id']}", b""),
                    ("POST", f"{base}/actions/unlock", b"")):
                status, _ = await connection.request(method, target, payload, md5=False)
                if status != 200:
                    raise RuntimeError(f"{method} {target} answered {status}")
            serial += 1
            cycles += 1
    finally:
        await connection.close()
    return cycles


async def rate(cycle: object, port: int, name: str, seconds: float, template: str) -> float:
    started = time.monotonic()
    count = await cycle(port, name, template, started + seconds)  # type: ignore[operator]
    return float(count) / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--servers", default="memory,postgres")
    args = parser.parse_args()
    template = state_template()
    print(f"state {len(template.encode())} bytes; {args.rounds} rounds of {args.seconds:g} s")
    for kind in args.servers.split(","):
        with running(kind) as (port, _pid):
            results: dict[str, list[float]] = {"http": [], "tfe": []}
            for index in range(args.rounds):
                for lane, cycle in (("http", http_cycles), ("tfe", tfe_cycles)):
                    results[lane].append(asyncio.run(rate(
                        cycle, port, f"bench-{lane}-{index}", args.seconds, template)))
            http = statistics.median(results["http"])
            tfe = statistics.median(results["tfe"])
            print(f"{kind:9s} http lane {http:8.1f} cycles/s   tfe lane {tfe:8.1f} cycles/s"
                  f"   tfe/http {tfe / http:.2f}")


if __name__ == "__main__":
    main()
