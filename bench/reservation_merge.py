"""Benchmark: one view's state merged into a 50,000-resource state (~56 MB).

In process (the merge is pure, run by the store in a worker thread): a state
of 50,000 resources in 50 modules, about 1.1 KB each, laid out as Terraform
writes it; a view's state in which Terraform changed one instance
(C{module.shard_7.aws_instance.node_7}); main, the current version, in which
another view changed another instance since the view's base.  Timed, each
round:

  - the merge as the store runs it, with main's index at hand (the index
    the merge that wrote main returned) -- the steady state;
  - the same merge with main's index made from main's bytes and the
    view's base index (the store had none: main was written by a plain
    POST, or the server restarted);
  - indexing a state with no previous index (what opening a reservation
    costs when the store has no index of the current version);
  - the naive whole-document merge for comparison: base, theirs and main
    decoded whole, each instance compared canonically, the merged document
    re-encoded (merge and serialise timed apart).

    python bench/reservation_merge.py [--resources 50000] [--rounds 5]

Medians over the rounds of the CPU time of the thread running the call
(the server time it costs, which a busy machine does not inflate) and of
the wall time.  Every round checks the merged bytes: the changed instance
is the view's, the other one main's, the serial main's + 1.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from kilolock.reservations.index import StateIndex, index_state
from kilolock.reservations.merge import merge_view_post
from kilolock.reservations.model import parse_claims
from kilolock.reservations.outcome import Merged

PROVIDER = 'provider["registry.terraform.io/hashicorp/aws"]'
VIEW_CHANGES = "module.shard_7.aws_instance.node_7"
MAIN_CHANGED = "module.shard_9.aws_instance.node_9"


def document(resources: int) -> dict[str, Any]:
    """A v4 state of C{resources} instances of about 1.1 KB each."""
    filler = "x" * 192
    return {
        "version": 4, "terraform_version": "1.15.5", "serial": 1,
        "lineage": str(uuid.uuid4()),
        "outputs": {"count": {"value": resources, "type": "number"}},
        "resources": sorted(({
            "module": f"module.shard_{index % 50}", "mode": "managed",
            "type": "aws_instance", "name": f"node_{index}", "provider": PROVIDER,
            "instances": [{
                "schema_version": 1,
                "attributes": {"id": f"i-{index:012x}", "ami": "ami-0123456789abcdef0",
                               "instance_type": "t3.micro", "user_data": filler,
                               "tags": {"Name": f"node-{index}", "team": "platform"},
                               "password": "not-really"},
                "sensitive_attributes": [[{"type": "get_attr", "value": "password"}]],
                "identity_schema_version": 0,
                "dependencies": [f"module.shard_{index % 50}.aws_instance.node_{index - 50}"]
                if index >= 50 else [],
            }],
        } for index in range(resources)), key=lambda r: (r["module"], r["mode"], r["type"],
                                                          r["name"])),
        "check_results": None,
    }


def encode(doc: dict[str, Any]) -> bytes:
    """As Terraform writes a state (Go's MarshalIndent: the same layout)."""
    return json.dumps(doc, indent=2, ensure_ascii=False).encode() + b"\n"


def changed(doc: dict[str, Any], address: str, serial: int) -> dict[str, Any]:
    """C{doc} with the instance at C{address} given a new id."""
    result = copy.deepcopy(doc)
    result["serial"] = serial
    module, _, rest = address.rpartition(".aws_instance.")
    for resource in result["resources"]:
        if resource.get("module") == module and resource["name"] == rest:
            resource["instances"][0]["attributes"]["id"] += "-new"
    return result


# -- the naive merge -----------------------------------------------------------


def _instances(doc: dict[str, Any]) -> dict[tuple[Any, ...], str]:
    found = {}
    for resource in doc["resources"]:
        for instance in resource["instances"]:
            key = (resource.get("module", ""), resource["mode"], resource["type"],
                   resource["name"], instance.get("index_key"), instance.get("deposed"))
            found[key] = json.dumps(instance, sort_keys=True, separators=(",", ":"))
    return found


def naive_merge(base: bytes, theirs: bytes, main: bytes) -> dict[str, Any]:
    """Decode all three, compare every instance canonically, take the
    view's changes into main's document."""
    base_doc, theirs_doc, main_doc = json.loads(base), json.loads(theirs), json.loads(main)
    base_objects, theirs_objects = _instances(base_doc), _instances(theirs_doc)
    changed_keys = {key for key, text in theirs_objects.items()
                    if base_objects.get(key) != text}
    main_objects = _instances(main_doc)
    for key in changed_keys:
        assert main_objects.get(key) == base_objects.get(key)
    theirs_resources = {(r.get("module", ""), r["mode"], r["type"], r["name"]): r
                        for r in theirs_doc["resources"]}
    merged = []
    for resource in main_doc["resources"]:
        identity = (resource.get("module", ""), resource["mode"], resource["type"],
                    resource["name"])
        if any(key[:4] == identity for key in changed_keys):
            resource = theirs_resources[identity]
        merged.append(resource)
    main_doc["resources"] = merged
    main_doc["serial"] += 1
    return main_doc


def median_seconds(function: Callable[[], Any], rounds: int
                   ) -> tuple[tuple[float, float], Any]:
    """The median CPU time of C{function} on this thread (what the merge
    costs the server's worker thread, whatever else the machine runs) and
    the median wall time, over C{rounds} calls; and its last result."""
    cpu, wall = [], []
    result = None
    for _ in range(rounds):
        started, started_cpu = time.perf_counter(), time.thread_time()
        result = function()
        cpu.append(time.thread_time() - started_cpu)
        wall.append(time.perf_counter() - started)
    return (statistics.median(cpu), statistics.median(wall)), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--resources", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()

    base_doc = document(options.resources)
    base = encode(base_doc)
    main_bytes = encode(changed(base_doc, MAIN_CHANGED, 2))
    theirs = encode(changed(base_doc, VIEW_CHANGES, 2))
    del base_doc
    print(f"state: {options.resources} resources, {len(base) / 1e6:.1f} MB")
    write = parse_claims([VIEW_CHANGES], "write")
    base_index = index_state(base)
    main_index = index_state(main_bytes, base_index)
    stored = base_index.to_bytes()
    print(f"index: {len(stored) / 1e6:.1f} MB stored"
          f" ({len(stored) / options.resources:.0f} bytes a resource)")

    def merge_with_index() -> Merged:
        outcome = merge_view_post(theirs, main_bytes, base_index, write=write,
                                  main_index=main_index)
        assert isinstance(outcome, Merged), outcome
        return outcome

    def merge_without_index() -> Merged:
        outcome = merge_view_post(theirs, main_bytes, base_index, write=write)
        assert isinstance(outcome, Merged), outcome
        return outcome

    timings = {}
    timings["merge, main's index at hand"], merged = median_seconds(merge_with_index,
                                                                  options.rounds)
    check(merged, main_bytes)
    timings["merge, main's index made from its bytes"], merged = median_seconds(
        merge_without_index, options.rounds)
    check(merged, main_bytes)
    timings["index a state, no previous index"], _ = median_seconds(
        lambda: index_state(base), options.rounds)
    timings["index loaded from its stored bytes"], _ = median_seconds(
        lambda: StateIndex.from_bytes(stored), options.rounds)
    timings["naive: decode three, compare, merge"], naive = median_seconds(
        lambda: naive_merge(base, theirs, main_bytes), options.rounds)
    timings["naive: serialise the merged document"], _ = median_seconds(
        lambda: json.dumps(naive, indent=2).encode(), options.rounds)
    width = max(map(len, timings))
    print(f"{'':<{width}}      cpu      wall  (medians of {options.rounds})")
    for name, (cpu, wall) in timings.items():
        print(f"{name:<{width}}  {cpu:7.3f} s {wall:7.3f} s")


def check(merged: Merged, main_bytes: bytes) -> None:
    """The merged state has the view's change and main's, main's serial + 1."""
    doc = json.loads(merged.raw)
    ids = {(r["module"], r["name"]): r["instances"][0]["attributes"]["id"]
           for r in doc["resources"]}
    assert ids[("module.shard_7", "node_7")].endswith("-new")
    assert ids[("module.shard_9", "node_9")].endswith("-new")
    assert doc["serial"] == json.loads(main_bytes)["serial"] + 1
    assert [change.address for change in merged.changes] == [VIEW_CHANGES]


if __name__ == "__main__":
    sys.exit(main())
