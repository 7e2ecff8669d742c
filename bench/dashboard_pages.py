"""Every page of the dashboard for a state of 2,000 resource instances: the
time each takes on the server, first load and median, per store.

    .venv/bin/python bench/dashboard_pages.py [--resources 2000] [--rounds 10]
        [--stores memory,postgres] [--serve SECONDS]

For each store: a server (open auth mode) gets one state, C{big}, of
C{--resources} instances (in modules, with count and for_each, data
sources, dependencies as Terraform records them, sensitive attributes,
typed outputs) written as five versions -- changes, an outputs-only change,
a rollback, more changes -- plus a few small states with workspace tags and
a held lock.  Each page is fetched once (the first load: nothing of it
cached) and then C{--rounds} times over one keep-alive connection; the
median time to the last byte, on loopback, is the server's time.  The goal
is 300 ms for every page.  C{--serve} keeps the server up that many seconds
afterwards (to look at the pages, or take screenshots).
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import time
from typing import Any
from urllib.parse import quote

from servers import running

MODULES = 20
GOAL_MS = 300.0
AWS = 'provider["registry.terraform.io/hashicorp/aws"]'
BUILTIN = 'provider["terraform.io/builtin/terraform"]'


def big_state(instances: int, serial: int, generation: int) -> dict[str, Any]:
    """C{instances} instances: per module a VPC, subnets by for_each, servers
    by count (depending on the subnets and, transitively, the VPC), a data
    source, and a secret with a sensitive attribute; C{generation} changes
    one server in ten."""
    resources: list[dict[str, Any]] = []
    per_module = max(1, instances // MODULES)
    for module_index in range(MODULES):
        module = f"module.app{module_index:02d}"
        vpc = f"{module}.aws_vpc.main"
        subnets = f"{module}.aws_subnet.private"
        servers = max(1, per_module - 6)
        resources += [
            {"module": module, "mode": "data", "type": "aws_ami", "name": "base",
             "provider": AWS, "instances": [{"schema_version": 0, "attributes": {
                 "id": "ami-0abc", "name": "base-2026", "tags": {}}}]},
            {"module": module, "mode": "managed", "type": "aws_vpc", "name": "main",
             "provider": AWS, "instances": [{"schema_version": 1, "attributes": {
                 "id": f"vpc-{module_index:04x}", "cidr_block": f"10.{module_index}.0.0/16",
                 "tags": {"Name": f"app{module_index}"}}, "sensitive_attributes": []}]},
            {"module": module, "mode": "managed", "type": "aws_subnet", "name": "private",
             "provider": AWS, "instances": [
                 {"index_key": zone, "schema_version": 1, "attributes": {
                     "id": f"subnet-{module_index:04x}{zone}", "availability_zone": zone,
                     "cidr_block": f"10.{module_index}.{position}.0/24"},
                  "sensitive_attributes": [], "dependencies": [vpc]}
                 for position, zone in enumerate(("a", "b", "c"))]},
            {"module": module, "mode": "managed", "type": "aws_instance", "name": "web",
             "provider": AWS, "instances": [
                 {"index_key": index, "schema_version": 1, "attributes": {
                     "id": f"i-{module_index:03x}{index:05x}-"
                           f"{generation if index % 10 == 0 else 0}",
                     "ami": "ami-0abc", "instance_type": "t3.micro",
                     "user_data": f"#!/bin/sh\necho {index}\n",
                     "ebs_block_device": [{"device_name": "/dev/sdb", "volume_size": 20}],
                     "tags": {"Name": f"web-{index}", "Team": "ops"}},
                  "sensitive_attributes": [], "dependencies": [subnets, vpc,
                                                               f"{module}.data.aws_ami.base"]}
                 for index in range(servers)]},
            {"module": module, "mode": "managed", "type": "terraform_data", "name": "secret",
             "provider": BUILTIN, "instances": [{"schema_version": 0, "attributes": {
                 "id": f"s-{module_index}", "input": {"value": f"hunter2-{module_index}",
                                                      "type": "string"},
                 "output": {"value": f"hunter2-{module_index}", "type": "string"}},
                 "sensitive_attributes": [[{"type": "get_attr", "value": "input"}]],
                 "dependencies": [f"{module}.aws_instance.web"]}]},
        ]
    return {"version": 4, "terraform_version": "1.15.5", "serial": serial,
            "lineage": "bench-pages", "outputs": {
                "zones": {"value": ["a", "b", "c"], "type": ["tuple", ["string", "string",
                                                                      "string"]]},
                "endpoint": {"value": {"host": "db.internal", "port": 5432},
                             "type": ["object", {"host": "string", "port": "number"}]},
                "generation": {"value": generation, "type": "number"},
                "password": {"value": "s3cr3t-password", "type": "string", "sensitive": True}},
            "resources": resources}


def count_instances(doc: dict[str, Any]) -> int:
    return sum(len(resource["instances"]) for resource in doc["resources"])


class Client:
    """One keep-alive connection with the dashboard's session cookie."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        self.cookie = ""

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes, float]:
        sent = {"Accept": "text/html", **(headers or {})}
        if self.cookie:
            sent["Cookie"] = self.cookie
        started = time.perf_counter()
        self.connection.request(method, path, body=body, headers=sent)
        response = self.connection.getresponse()
        answer = response.read()
        elapsed = time.perf_counter() - started
        cookie = response.getheader("Set-Cookie")
        if cookie:
            self.cookie = cookie.split(";")[0]
        return response.status, answer, elapsed


def populate(client: Client, instances: int) -> int:
    """The big state's five versions, small tagged states, a held lock;
    @return: how many instances the big state holds."""
    doc = {}
    for serial, generation in ((1, 1), (2, 2)):
        doc = big_state(instances, serial, generation)
        status, body, _ = client.request("POST", "/v1/states/big", json.dumps(doc).encode())
        assert status == 200, body
    outputs_only = dict(doc, serial=3, outputs={**doc["outputs"], "generation": {
        "value": 3, "type": "number"}})
    status, body, _ = client.request("POST", "/v1/states/big",
                                     json.dumps(outputs_only).encode())
    assert status == 200, body
    status, body, _ = client.request("POST", "/v1/native/states/big/-/rollback",
                                     json.dumps({"version": 1}).encode(),
                                     {"Content-Type": "application/json"})
    assert status == 200, body
    doc = big_state(instances, 5, 5)
    status, body, _ = client.request("POST", "/v1/states/big", json.dumps(doc).encode())
    assert status == 200, body
    for name, tags in (("network", ["network", "team=ops"]), ("billing", ["team=finance"]),
                       ("dns", [])):
        document = {"data": {"type": "workspaces", "attributes": {"name": name},
                             "relationships": {"tag-bindings": {"data": [
                                 {"type": "tag-bindings", "attributes": {
                                     "key": tag.partition("=")[0],
                                     "value": tag.partition("=")[2]}} for tag in tags]}}}}
        status, body, _ = client.request("POST", "/api/v2/organizations/default/workspaces",
                                         json.dumps(document).encode(),
                                         {"Content-Type": "application/vnd.api+json",
                                          "Authorization": "Bearer open"})
        assert status == 201, body
        small = big_state(MODULES, 1, 1)
        small["resources"] = small["resources"][:5]
        status, body, _ = client.request("POST", f"/v1/states/{name}",
                                         json.dumps(small).encode())
        assert status == 200, body
    lock = json.dumps({"ID": "bench-lock", "Operation": "OperationTypeApply",
                       "Who": "ci@runner-7", "Version": "1.15.5",
                       "Created": "2026-01-01T00:00:00Z"}).encode()
    status, body, _ = client.request("LOCK", "/v1/states/network", lock)
    assert status == 200, body
    return count_instances(doc)


PAGES = [
    ("states page", "/ui/"),
    ("states page, filtered by tag and lock", "/ui/?tag=team&lock=locked"),
    ("state page (summary, resources, outputs, graph)", "/ui/states/big"),
    ("state page, filtered to one module", "/ui/states/big?module=module.app03"),
    ("resource page (an instance, its history)",
     "/ui/states/big/-/resource?address=" + quote('module.app03.aws_instance.web[7]')),
    ("resource page (a resource of many instances)",
     "/ui/states/big/-/resource?address=" + quote("module.app03.aws_instance.web")),
    ("resource page in an old version",
     "/ui/states/big/-/resource?version=2&address=" + quote("module.app03.aws_instance.web[0]")),
    ("history page", "/ui/states/big/-/history"),
    ("version page (version 2)", "/ui/states/big/-/versions/2"),
    ("version as JSON (version 2, masked)", "/ui/states/big/-/versions/2/json"),
    ("diff page (versions 4 and 5)", "/ui/states/big/-/diff?from=4&to=5"),
    ("diff page (versions 1 and 2)", "/ui/states/big/-/diff?from=1&to=2"),
    ("audit trail page", "/ui/audit"),
    ("search page", "/ui/search?type=aws_instance"),
]


def bench(kind: str, instances: int, rounds: int, serve: float) -> list[dict[str, Any]]:
    results = []
    with running(kind) as (port, _):
        client = Client(port)
        held = populate(client, instances)
        client.request("GET", "/ui/")  # the session
        print(f"{kind}: state 'big' holds {held:,} resource instances, five versions",
              flush=True)
        for label, path in PAGES:
            status, body, first = client.request("GET", path)
            assert status == 200, (path, status, body[:300])
            samples = []
            for _ in range(rounds):
                status, body, elapsed = client.request("GET", path)
                assert status == 200, (path, status)
                samples.append(elapsed)
            median = statistics.median(samples) * 1000
            results.append({"store": kind, "page": label, "path": path,
                            "first_ms": first * 1000, "median_ms": median,
                            "bytes": len(body)})
            flag = "" if median <= GOAL_MS else "  over the goal"
            print(f"{kind:8} {label:52} first {first * 1000:7.1f} ms  median {median:7.1f} ms"
                  f" {len(body):>10,} B{flag}", flush=True)
        if serve:
            print(f"serving http://127.0.0.1:{port}/ui/ for {serve:g} s", flush=True)
            time.sleep(serve)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--resources", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--stores", default="memory,postgres")
    parser.add_argument("--serve", type=float, default=0.0)
    options = parser.parse_args()
    everything = []
    for kind in options.stores.split(","):
        everything += bench(kind, options.resources, options.rounds, options.serve)
    over = [result for result in everything if result["median_ms"] > GOAL_MS]
    print(f"{len(over)} of {len(everything)} pages over {GOAL_MS:g} ms (median)")
    sys.exit(0)


if __name__ == "__main__":
    main()
