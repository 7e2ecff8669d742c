"""The dashboard's speed and page weight, next to the JSON API serving the
same data, in the same run, on one server per store.

    .venv/bin/python bench/dashboard.py [--states 10000] [--resources 5000]
        [--rounds 20] [--stores memory,postgres]

For each store: a server (open auth mode) gets C{--states} small states and
one state of C{--resources} resources (in modules, with dependencies, two
versions); then each page is fetched C{--rounds} times over one keep-alive
connection and the median time to the last byte is reported, with the
page's size in bytes.  The JSON rows are the native API's answers for the
same data: the whole list of states (the API does not page), one state's
summary plus its resources.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import statistics
import time
from typing import Any

from http_client import Connection
from servers import running

MODULES = 25


def small_state(serial: int) -> bytes:
    return json.dumps({"version": 4, "terraform_version": "1.15.5", "serial": serial,
                       "lineage": "bench-lineage", "outputs": {},
                       "resources": [{"mode": "managed", "type": "terraform_data",
                                      "name": "one", "provider": "provider[\"terraform.io/"
                                      "builtin/terraform\"]",
                                      "instances": [{"schema_version": 0,
                                                     "attributes": {"id": f"id-{serial}"}}]}]},
                      indent=2).encode()


def big_state(resources: int, serial: int) -> bytes:
    """C{resources} instances in L{MODULES} modules, each depending on the
    one before it in its module."""
    blocks = []
    for index in range(resources):
        module = f"module.m{index % MODULES}"
        previous = f"{module}.aws_instance.r{index - MODULES}" if index >= MODULES else None
        blocks.append({
            "module": module, "mode": "managed", "type": "aws_instance", "name": f"r{index}",
            "provider": "provider[\"registry.terraform.io/hashicorp/aws\"]",
            "instances": [{"schema_version": 1, "attributes": {
                "id": f"i-{index:08x}-{serial}", "ami": "ami-12345678",
                "instance_type": "t3.micro", "tags": {"Name": f"web-{index}"}},
                "sensitive_attributes": [],
                "dependencies": [previous] if previous else []}]})
    return json.dumps({"version": 4, "terraform_version": "1.15.5", "serial": serial,
                       "lineage": "bench-big", "outputs": {
                           "count": {"value": resources, "type": "number"},
                           "password": {"value": "x", "type": "string", "sensitive": True}},
                       "resources": blocks}, indent=2).encode()


async def populate(port: int, states: int, resources: int) -> None:
    async def writer(start: int, step: int) -> None:
        connection = await Connection.open(port)
        for number in range(start, states, step):
            status, _ = await connection.request("POST", f"/v1/states/app-{number:05d}",
                                                 small_state(number + 1))
            assert status == 200, status
        await connection.close()

    await asyncio.gather(*(writer(start, 4) for start in range(4)))
    connection = await Connection.open(port)
    for serial in (1, 2):
        status, _ = await connection.request("POST", "/v1/states/big",
                                             big_state(resources, serial))
        assert status == 200, status
    await connection.close()


class Client:
    """One keep-alive connection with the dashboard's session cookie."""

    def __init__(self, port: int) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        self.cookie = ""

    def get(self, path: str) -> tuple[int, bytes, float]:
        headers = {"Accept": "text/html"}
        if self.cookie:
            headers["Cookie"] = self.cookie
        started = time.perf_counter()
        self.connection.request("GET", path, headers=headers)
        response = self.connection.getresponse()
        body = response.read()
        elapsed = time.perf_counter() - started
        cookie = response.getheader("Set-Cookie")
        if cookie:
            self.cookie = cookie.split(";")[0]
        return response.status, body, elapsed


def measure(client: Client, path: str, rounds: int) -> tuple[float, int]:
    """(median milliseconds, bytes) of C{rounds} GETs of C{path}."""
    samples = []
    size = 0
    for _ in range(rounds):
        status, body, elapsed = client.get(path)
        assert status == 200, (path, status, body[:200])
        samples.append(elapsed)
        size = len(body)
    return statistics.median(samples) * 1000, size


PAGES = [
    ("states page, first 50 by name", "/ui/"),
    ("states page, 50 most recently changed", "/ui/?sort=updated&dir=desc"),
    ("states page, filtered by name", "/ui/?q=app-09"),
    ("states page, last page", "/ui/?page=200"),
    ("JSON: all states (/v1/native/states)", "/v1/native/states"),
    ("state page (5,000 resources)", "/ui/states/big"),
    ("state page, filtered to one module", "/ui/states/big?module=module.m3"),
    ("JSON: state summary + resources", "/v1/native/states/big/-/resources?limit=10000"),
    ("history page", "/ui/states/big/-/history"),
    ("diff page (5,000 changed)", "/ui/states/big/-/diff"),
    ("JSON: diff", "/v1/native/states/big/-/diff"),
    ("audit trail page", "/ui/audit"),
    ("audit trail, a page deep in the chain", "/ui/audit?before=5001"),
    ("audit chain verification (/ui/audit/verify)", "/ui/audit/verify"),
    ("JSON: chain verification", "/v1/native/events/verify"),
    ("search page (type, 200 shown)", "/ui/search?type=terraform_data"),
]


def bench(kind: str, states: int, resources: int, rounds: int) -> list[dict[str, Any]]:
    results = []
    with running(kind) as (port, _):
        asyncio.run(populate(port, states, resources))
        client = Client(port)
        client.get("/ui/")  # the session
        for label, path in PAGES:
            count = rounds if "diff" not in label and "history" not in label else max(
                3, rounds // 5)
            median, size = measure(client, path, count)
            results.append({"store": kind, "page": label, "path": path, "ms": median,
                            "bytes": size, "rounds": count})
            print(f"{kind:8} {label:42} {median:9.1f} ms {size:>10,} B", flush=True)
        summary_ms, _ = measure(client, "/v1/native/states/big", rounds)
        print(f"{kind:8} {'JSON: state summary alone':42} {summary_ms:9.1f} ms", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--states", type=int, default=10000)
    parser.add_argument("--resources", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--stores", default="memory,postgres")
    options = parser.parse_args()
    for kind in options.stores.split(","):
        bench(kind, options.states, options.resources, options.rounds)


if __name__ == "__main__":
    main()
