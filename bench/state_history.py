"""Realistic histories of one Terraform state, for the storage benchmark.

A history is what Terraform writes over time: the whole state every time,
pretty-printed with two spaces, the serial one higher, and a few resources
changed (a new id, a new timestamp, a new tag value) while everything else is
byte-identical.  The values are random (ids, ARNs, hashes) the way real ones
are, so they compress like real ones: the structure compresses well, the ids
do not.
"""

from __future__ import annotations

import json
import random
import re
import uuid
from collections.abc import Iterator
from typing import Any

AWS = 'provider["registry.terraform.io/hashicorp/aws"]'


def _hex(rng: random.Random, digits: int) -> str:
    return f"{rng.getrandbits(digits * 4):0{digits}x}"


def _stamp(rng: random.Random) -> str:
    return (f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z")


def _attributes(rng: random.Random, index: int, kind: str) -> dict[str, Any]:
    """The attributes of one instance; about 300 bytes pretty-printed."""
    ident = {"aws_instance": f"i-{_hex(rng, 17)}", "aws_s3_bucket": f"bucket-{index}",
             "aws_security_group": f"sg-{_hex(rng, 17)}",
             "aws_iam_role": f"role-{index}"}[kind]
    return {
        "arn": f"arn:aws:{kind.split('_')[1]}:eu-west-1:123456789012:{ident}",
        "id": ident,
        "created_at": _stamp(rng),
        "etag": _hex(rng, 32),
        "tags": {"Name": f"node-{index}", "revision": str(rng.randint(1, 10_000))},
    }


def _resource(rng: random.Random, index: int) -> dict[str, Any]:
    kind = ("aws_instance", "aws_s3_bucket", "aws_security_group", "aws_iam_role")[index % 4]
    return {
        "module": f"module.service_{index % 5}", "mode": "managed", "type": kind,
        "name": f"r{index}", "provider": AWS,
        "instances": [{
            "schema_version": 1,
            "attributes": _attributes(rng, index, kind),
            "sensitive_attributes": [],
            "private": "eyJzY2hlbWFfdmVyc2lvbiI6IjEifQ==",
            "dependencies": [f"module.service_{index % 5}.aws_iam_role.r{index - index % 4 + 3}"],
        }],
    }


def _render(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, indent=2).encode() + b"\n"


def history(versions: int, resources: int = 50, changed: int = 2, seed: int = 13,
            same: bool = False) -> Iterator[bytes]:
    """C{versions} successive states: each one changes C{changed} random resources
    (with C{same}, the same C{changed} resources every time: a deployment that
    bumps one service's image)."""
    rng = random.Random(seed)
    doc: dict[str, Any] = {
        "version": 4, "terraform_version": "1.15.5", "serial": 1,
        "lineage": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "outputs": {"endpoint": {"value": f"https://{_hex(rng, 12)}.example.com",
                                 "type": "string"}},
        "resources": [_resource(rng, index) for index in range(resources)],
        "check_results": None,
    }
    for _ in range(versions):
        yield _render(doc)
        doc["serial"] += 1
        for index in range(changed) if same else rng.sample(range(resources), changed):
            attributes = doc["resources"][index]["instances"][0]["attributes"]
            attributes["etag"] = _hex(rng, 32)
            attributes["created_at"] = _stamp(rng)
            attributes["tags"]["revision"] = str(rng.randint(1, 10_000))


def patched_history(first: bytes, versions: int, pattern: bytes, changed: int = 2,
                    seed: int = 17) -> Iterator[bytes]:
    """Successive versions of a large rendered state without rendering it
    again: the serial one higher and C{changed} random values matching
    C{pattern} (a regex of hex digits, e.g. the etags) replaced by new ones
    of the same length."""
    rng = random.Random(seed)
    spans = [match.span() for match in re.finditer(pattern, first)]
    serial = re.search(rb'"serial": (\d+)', first)
    assert serial is not None and spans
    current = bytearray(first)
    number = int(serial.group(1))
    for _ in range(versions):
        head = bytes(current[:serial.start(1)])
        yield head + str(number).encode() + bytes(current[serial.end(1):])
        number += 1
        for start, end in rng.sample(spans, changed):
            current[start:end] = _hex(rng, end - start).encode()


def write_cycle_history(versions: int, changed: int = 2, seed: int = 13) -> Iterator[bytes]:
    """The 50-resource state of C{bench/write_cycle.py} (18.7 KB, one-space
    indent, short ids, no other values) over C{versions} versions, with the
    ids of C{changed} random resources replaced each time."""
    rng = random.Random(seed)
    doc: dict[str, Any] = {
        "version": 4, "terraform_version": "1.15.5", "serial": 1,
        "lineage": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "outputs": {"count": {"value": 50, "type": "number"}},
        "resources": [{
            "mode": "managed", "type": "terraform_data", "name": f"item_{index}",
            "provider": 'provider["terraform.io/builtin/terraform"]',
            "instances": [{"schema_version": 0, "attributes": {
                "id": _hex(rng, 12), "input": None, "output": None, "triggers_replace": None},
                "sensitive_attributes": []}],
        } for index in range(50)],
        "check_results": None,
    }
    for _ in range(versions):
        yield json.dumps(doc, indent=1).encode() + b"\n"
        doc["serial"] += 1
        for index in rng.sample(range(50), changed):
            doc["resources"][index]["instances"][0]["attributes"]["id"] = _hex(rng, 12)
