"""Benchmark (a): Terraform's write cycle LOCK -> POST ?ID= -> UNLOCK.

Each client owns one state and repeats the cycle with an increasing serial
and a 50-resource (~15 KB) state.  Cycles per second at 1, 8 and 32
concurrent clients, for the memory and PostgreSQL stores, next to the
framework floor (a twisted.web server that reads the body and answers 200)
measured in the same run.  Medians of several rounds; ratios against the floor.

    python bench/write_cycle.py [--seconds 5] [--rounds 3] [--clients 1,8,32]
                                [--servers floor,memory,postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from http_client import Connection
from servers import running

PROVIDER = 'provider["terraform.io/builtin/terraform"]'


def state_template(resources: int = 50) -> str:
    """A v4 state with a C{{serial}} placeholder, pretty-printed like Terraform."""
    doc = {
        "version": 4, "terraform_version": "1.15.5", "serial": 999_999_999,
        "lineage": str(uuid.uuid4()), "outputs": {"count": {"value": resources,
                                                             "type": "number"}},
        "resources": [{
            "mode": "managed", "type": "terraform_data", "name": f"item_{index}",
            "provider": PROVIDER,
            "instances": [{
                "schema_version": 0,
                "attributes": {"id": uuid.uuid4().hex[:12], "input": None, "output": None,
                               "triggers_replace": None},
                "sensitive_attributes": [],
            }],
        } for index in range(resources)],
        "check_results": None,
    }
    # Terraform pretty-prints with two spaces; compact separators keep the
    # 50-resource state near the 15 KB the benchmark is specified with.
    return json.dumps(doc, indent=1).replace("999999999", "{serial}") + "\n"


def lock_info(lock_id: str) -> bytes:
    return json.dumps({"ID": lock_id, "Operation": "OperationTypeApply", "Info": "",
                       "Who": "bench@host", "Version": "1.15.5",
                       "Created": "2026-11-29T23:05:20.206526015Z", "Path": ""}).encode()


async def client_loop(port: int, name: str, template: str, deadline: float,
                      floor: bool) -> int:
    connection = await Connection.open(port)
    path = f"/v1/states/{name}"
    serial = 1
    cycles = 0
    try:
        while time.monotonic() < deadline:
            lock_id = str(uuid.uuid4())
            info = lock_info(lock_id)
            body = template.replace("{serial}", str(serial)).encode()
            for method, target, payload in (("LOCK", path, info),
                                            ("POST", f"{path}?ID={lock_id}", body),
                                            ("UNLOCK", path, info)):
                status, _ = await connection.request(method, target, payload)
                if status != 200:
                    raise RuntimeError(f"{method} answered {status}")
            serial += 1
            cycles += 1
    finally:
        await connection.close()
    return cycles


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of the processes (those still alive)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def server_processes(pid: int) -> list[int]:
    """The server and, for the PostgreSQL store, the processes of its
    embedded cluster (which lives in the server's working directory)."""
    scratch = os.readlink(f"/proc/{pid}/cwd")
    found = [pid]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == pid:
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "postgres" in command and scratch in command:
            found.append(int(entry.name))
    return found


def postgres_children(pids: list[int]) -> list[int]:
    """The postmasters' children (backends come and go)."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent in pids[1:]:
            children.append(int(entry.name))
    return children


async def measure(port: int, clients: int, seconds: float, template: str, tag: str,
                  floor: bool) -> float:
    deadline = time.monotonic() + seconds
    started = time.monotonic()
    counts = await asyncio.gather(*(
        client_loop(port, f"bench-{tag}-{index}", template, deadline, floor)
        for index in range(clients)))
    return sum(counts) / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--servers", default="floor,memory,postgres")
    args = parser.parse_args()
    client_counts = [int(n) for n in args.clients.split(",")]
    servers = args.servers.split(",")
    template = state_template()
    print(f"state size: {len(template.replace('{serial}', '1').encode())} bytes, 50 resources")
    results: dict[tuple[str, int], float] = {}
    #: Server CPU (the server process, plus its PostgreSQL's) per cycle.
    cpu_ms: dict[tuple[str, int], float] = {}
    for server in servers:
        with running(server) as (port, pid):
            for clients in client_counts:
                rounds = []
                costs = []
                for round_index in range(args.rounds):
                    tag = f"{clients}-{round_index}-{uuid.uuid4().hex[:6]}"
                    asyncio.run(measure(port, clients, 1.0, template, "warm" + tag,
                                        server == "floor"))
                    processes = server_processes(pid)
                    processes += postgres_children(processes)
                    before = cpu_seconds(processes)
                    started = time.monotonic()
                    rate = asyncio.run(measure(port, clients, args.seconds, template, tag,
                                               server == "floor"))
                    cycles = rate * (time.monotonic() - started)
                    rounds.append(rate)
                    costs.append(1000 * (cpu_seconds(processes) - before) / max(cycles, 1))
                results[(server, clients)] = statistics.median(rounds)
                cpu_ms[(server, clients)] = statistics.median(costs)
                median = results[(server, clients)]
                print(f"{server:9s} clients={clients:3d} cycles/s median={median:8.1f}"
                      f"  rounds={', '.join(f'{r:.1f}' for r in rounds)}"
                      f"  server CPU ms/cycle median={cpu_ms[(server, clients)]:.3f}",
                      flush=True)
    print()
    print_table(servers, client_counts, results, "{:.1f}", floor_first=False)
    print()
    print("Server CPU per cycle (ms; PostgreSQL's backends included), and the floor's")
    print("CPU per cycle divided by it (a ratio that a busy machine disturbs less):")
    print()
    print_table(servers, client_counts, cpu_ms, "{:.3f}", floor_first=True)


def print_table(servers: list[str], client_counts: list[int],
                values: dict[tuple[str, int], float], number: str, floor_first: bool) -> None:
    """A Markdown table: one row per client count, a column per server, then
    each server against the floor (server/floor, or floor/server when
    C{floor_first}: for costs, where less is better)."""
    others = [s for s in servers if s != "floor"]
    ratio_names = [f"floor/{s}" if floor_first else f"{s}/floor" for s in others]
    print("| clients | " + " | ".join(servers) + " | " + " | ".join(ratio_names) + " |")
    print("|---" * (1 + len(servers) + len(others)) + "|")
    for clients in client_counts:
        row = [number.format(values[(s, clients)]) for s in servers]
        floor = values.get(("floor", clients))
        ratios = [("-" if not floor else
                   f"{floor / values[(s, clients)]:.2f}" if floor_first else
                   f"{values[(s, clients)] / floor:.2f}")
                  for s in others]
        print(f"| {clients} | " + " | ".join(row) + " | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main()
