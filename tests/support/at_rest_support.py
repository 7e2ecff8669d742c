"""What the tests of state at rest share: key files, key providers, stores
with keys, and SQL looks at the rows."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import psycopg2

from kilolock.atrest.keyring import KeyEncryptionKey, KeyRing, LocalKeyProvider
from kilolock.core.model import StateUpload
from kilolock.tfstate.parse import parse_state


def secret() -> bytes:
    return os.urandom(32)


def key_file_text(active: str, keys: dict[str, bytes]) -> str:
    """A key file with C{keys} (id -> 32 bytes), C{active} active."""
    parts = [f'active = "{active}"\n']
    for key_id, material in keys.items():
        encoded = base64.b64encode(material).decode()
        parts.append(f'[[keys]]\nid = "{key_id}"\nsecret = "{encoded}"\n')
    return "\n".join(parts)


def write_key_file(path: Path, active: str, keys: dict[str, bytes]) -> Path:
    path.write_text(key_file_text(active, keys))
    return path


def provider(active: str, keys: dict[str, bytes]) -> LocalKeyProvider:
    return LocalKeyProvider(KeyRing([KeyEncryptionKey(key_id, material)
                                     for key_id, material in keys.items()], active))


def upload(raw: bytes) -> StateUpload:
    return StateUpload(raw=raw, sha256=hashlib.sha256(raw).hexdigest(), parsed=parse_state(raw))


def state_with(serial: int, marker: str, sensitive: str, count: int = 20,
               lineage: str = "7b1d5c1e-0000-4000-8000-00000000aaaa") -> bytes:
    """A v4 state of C{count} resources whose attributes hold C{marker} (in
    clear) and C{sensitive} (marked sensitive), with a sensitive output
    holding C{sensitive} too and a plain one holding C{marker}."""
    resources = [{
        "mode": "managed", "type": "aws_db_instance", "name": f"db_{index}",
        "provider": 'provider["registry.terraform.io/hashicorp/aws"]',
        "instances": [{"schema_version": 1, "attributes": {
            "id": f"db-{index}-{serial}", "note": f"{marker}-{index}",
            "password": f"{sensitive}-{index}",
            "nested": {"token": f"{sensitive}-nested-{index}", "plain": "visible"}},
            "sensitive_attributes": [[{"type": "get_attr", "value": "password"}],
                                     [{"type": "get_attr", "value": "nested"},
                                      {"type": "get_attr", "value": "token"}]]}],
    } for index in range(count)]
    outputs = {"plain": {"value": f"{marker}-output", "type": "string"},
               "secret": {"value": f"{sensitive}-output", "type": "string",
                          "sensitive": True}}
    doc = {"version": 4, "terraform_version": "1.15.5", "serial": serial,
           "lineage": lineage, "outputs": outputs, "resources": resources,
           "check_results": None}
    return json.dumps(doc, indent=2).encode() + b"\n"


def query(dsn: str, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    connection = psycopg2.connect(dsn, connect_timeout=10)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(statement, params)
            return list(cursor.fetchall()) if cursor.description else []
    finally:
        connection.close()


def execute(dsn: str, statement: str, params: Any = None) -> None:
    connection = psycopg2.connect(dsn, connect_timeout=10)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(statement, params)
    finally:
        connection.close()


def version_rows(dsn: str) -> list[tuple[Any, ...]]:
    """(number, codec, payload, data_key, kek_id) of every version, by id."""
    return [(number, codec, None if payload is None else bytes(payload),
             None if data_key is None else bytes(data_key), kek_id)
            for number, codec, payload, data_key, kek_id in query(
                dsn, "SELECT number, codec, payload, data_key, kek_id FROM state_versions"
                     " ORDER BY id")]


def every_text_in_database(dsn: str) -> bytes:
    """Every value of every column of every table of the database, as
    bytes (text as UTF-8, bytea as it is, jsonb as its text): what a thief
    with a dump would see."""
    tables = [name for (name,) in query(
        dsn, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
    found = []
    for table in tables:
        for row in query(dsn, f'SELECT * FROM "{table}"'):
            for value in row:
                if isinstance(value, memoryview):
                    found.append(bytes(value))
                elif value is not None:
                    found.append(str(value).encode("utf-8", "replace"))
    return b"\n".join(found)
