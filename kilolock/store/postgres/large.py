"""Large states: how big is big, and the transactions of the blocking path.

A state of at least L{LARGE_TRANSFER_BYTES} is written on a blocking
connection in a thread (L{kilolock.store.postgres.blocking}: why), by the
transactions here: its compressed payload goes in with a binary COPY, its
projection with one COPY per table; a payload of that size (an old
uncompressed row, or one zstd does not shrink) comes back as a binary
result.  Smaller
thresholds move CPU work on big values (quoting, decoding) off the reactor
thread.  The thresholds are read when a call runs: tests lower them.
"""

from __future__ import annotations

from typing import Any

from attrs import define

from kilolock.atrest.stored import StoredPayload
from kilolock.model import Projection, StateUpload, StateVersion
from kilolock.store.postgres import statements
from kilolock.store.postgres.blocking import binary_copy, text_copy
from kilolock.store.postgres.codecs import jsonb_safe

__all__ = ["LARGE_PROJECTION_ROWS", "LARGE_TRANSFER_BYTES", "LARGE_UPLOAD_BYTES", "BulkWrite",
           "copy_projection_txn", "copy_version_txn", "read_payload_txn"]

#: Uploads at least this big are prepared for the database in a thread.
LARGE_UPLOAD_BYTES = 1 << 20
#: Projections with more rows than this are decoded in a thread.
LARGE_PROJECTION_ROWS = 2000
#: Writes of states at least this big, and reads of them, run on a blocking
#: connection in a thread.
LARGE_TRANSFER_BYTES = 8 << 20


async def read_payload_txn(cursor: Any, version_id: int) -> bytes | None:
    """The payload of version row C{version_id}, selected in binary on a
    psycopg 3 connection (a blocking transaction's cursor: see
    L{kilolock.store.postgres.blocking.BlockingCursor.select_bytea}); None
    when the version is gone."""
    payload: bytes | None = cursor.select_bytea(statements.PAYLOAD_BY_ID, (version_id,))
    return payload


@define
class BulkWrite:
    """What a write on the blocking path sends with COPY: the state's
    payload (compressed) and the projection's rows."""

    stored: StoredPayload
    projection: Projection
    resource_count: int

    @classmethod
    def of(cls, upload: StateUpload, stored: StoredPayload) -> BulkWrite:
        projection = upload.parsed.projection or Projection()
        return cls(stored, projection, len(projection.resources))


async def copy_version_txn(cursor: Any, state_id: int, version: StateVersion,
                           prepared: BulkWrite) -> int:
    """Insert a version with a binary COPY (a blocking transaction's
    cursor): the payload goes in as it is (a full snapshot: large states
    are never deltas).  @return: the new row's id."""
    await cursor.execute(statements.TOUCH_STATE_AND_NEXT_VERSION_ID,
                         {"state": state_id, "now": version.created_at})
    (version_id,) = cursor.fetchone()
    cursor.copy_in(statements.COPY_VERSION, binary_copy([(
        ("int8", version_id), ("int8", state_id), ("int4", version.number),
        ("int8", version.serial), ("text", version.lineage), ("text", version.sha256),
        ("int8", version.size), ("bytea", prepared.stored.payload),
        ("text", prepared.stored.codec.value), ("timestamptz", version.created_at),
        ("text", version.principal), ("bool", version.projected),
        ("int4", prepared.resource_count),
    )]))
    return int(version_id)


async def copy_projection_txn(cursor: Any, state_id: int, version_id: int,
                              prepared: BulkWrite) -> None:
    """Replace the state's projection rows with one COPY per table
    (a blocking transaction's cursor); ordinals count from 1 like the
    pool's statement's WITH ORDINALITY."""
    await cursor.execute(statements.DROP_PROJECTION, {"state": state_id})
    projection = prepared.projection
    cursor.copy_in(
        statements.COPY_RESOURCES,
        text_copy((state_id, version_id, ordinal, row.address, row.module, row.mode, row.type,
                   row.name, row.provider,
                   None if row.index_key is None else jsonb_safe(row.index_key),
                   row.deposed, jsonb_safe(row.attributes))
                  for ordinal, row in enumerate(projection.resources, 1)))
    cursor.copy_in(
        statements.COPY_DEPENDENCIES,
        text_copy((state_id, version_id, ordinal, row.address, row.depends_on)
                  for ordinal, row in enumerate(projection.dependencies, 1)))
    cursor.copy_in(
        statements.COPY_OUTPUTS,
        text_copy((state_id, version_id, ordinal, row.name,
                   None if row.type is None else jsonb_safe(row.type),
                   None if row.value is None else jsonb_safe(row.value), row.sensitive)
                  for ordinal, row in enumerate(projection.outputs, 1)))
