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

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from attrs import define

from kilolock.atrest.stored import StoredPayload
from kilolock.core.model import DependencyRow, Projection, ResourceRow, StateUpload, StateVersion
from kilolock.store.postgres import statements
from kilolock.store.postgres.blocking import (
    binary_copy,
    copy_chunks,
    plain_copy_text,
    text_copy,
    text_field,
)

__all__ = ["LARGE_PROJECTION_ROWS", "LARGE_TRANSFER_BYTES", "LARGE_UPLOAD_BYTES", "BulkWrite",
           "copy_dependencies_and_outputs", "copy_projection_txn", "copy_resources",
           "copy_version_row", "copy_version_txn", "dependency_lines", "next_version_id_txn",
           "read_payload_txn", "resource_lines"]

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


async def next_version_id_txn(cursor: Any, state_id: int, now: datetime) -> int:
    """Touch the state's row and draw the id of its next version row."""
    await cursor.execute(statements.TOUCH_STATE_AND_NEXT_VERSION_ID,
                         {"state": state_id, "now": now})
    (version_id,) = cursor.fetchone()
    return int(version_id)


def copy_version_row(cursor: Any, version_id: int, state_id: int, version: StateVersion,
                     prepared: BulkWrite) -> None:
    """Insert version row C{version_id} with a binary COPY: the payload goes
    in as it is (a full snapshot: large states are never deltas)."""
    cursor.copy_in(statements.COPY_VERSION, binary_copy([(
        ("int8", version_id), ("int8", state_id), ("int4", version.number),
        ("int8", version.serial), ("text", version.lineage), ("text", version.sha256),
        ("int8", version.size), ("bytea", prepared.stored.payload),
        ("text", prepared.stored.codec.value), ("bytea", prepared.stored.data_key),
        ("text", prepared.stored.key_id), ("timestamptz", version.created_at),
        ("text", version.principal), ("bool", version.projected),
        ("int4", prepared.resource_count),
    )]))


async def copy_version_txn(cursor: Any, state_id: int, version: StateVersion,
                           prepared: BulkWrite) -> int:
    """Insert a version with a binary COPY (a blocking transaction's
    cursor).  @return: the new row's id."""
    version_id = await next_version_id_txn(cursor, state_id, version.created_at)
    copy_version_row(cursor, version_id, state_id, version, prepared)
    return version_id


def copy_resources(cursor: Any, state_id: int, version_id: int,
                   resources: Iterable[ResourceRow], first: int = 1) -> None:
    """COPY resource rows, their ordinals counting from C{first}."""
    cursor.copy_in(statements.COPY_RESOURCES,
                   copy_chunks(resource_lines(state_id, version_id, resources, first)))


def resource_lines(state_id: int, version_id: int, resources: Iterable[ResourceRow],
                   first: int = 1) -> Iterator[str]:
    """The COPY text of resource rows (L{text_copy}'s text, 50,000 rows of
    a large state in about a quarter less time): the six names are joined and
    checked for escapes at once, and escaped one by one only when one
    needs it."""
    head = f"{state_id}\t{version_id}\t"
    for ordinal, row in enumerate(resources, first):
        names = f"{row.address}\t{row.module}\t{row.mode}\t{row.type}\t{row.name}\t{row.provider}"
        if not plain_copy_text(names, 5):
            names = "\t".join(text_field(name) for name in (
                row.address, row.module, row.mode, row.type, row.name, row.provider))
        attributes = row.attributes
        if not plain_copy_text(attributes):
            attributes = text_field(attributes)
        yield (f"{head}{ordinal}\t{names}\t{text_field(row.index_key)}"
               f"\t{text_field(row.deposed)}\t{attributes}\n")


def dependency_lines(state_id: int, version_id: int,
                     dependencies: Iterable[DependencyRow]) -> Iterator[str]:
    """The COPY text of dependency rows (L{text_copy}'s text in a third of
    the time): each row's two texts checked for escapes at once."""
    head = f"{state_id}\t{version_id}\t"
    for ordinal, row in enumerate(dependencies, 1):
        pair = f"{row.address}\t{row.depends_on}"
        if not plain_copy_text(pair, 1):
            pair = f"{text_field(row.address)}\t{text_field(row.depends_on)}"
        yield f"{head}{ordinal}\t{pair}\n"


def copy_dependencies_and_outputs(cursor: Any, state_id: int, version_id: int,
                                  projection: Projection) -> None:
    """COPY the projection's dependency and output rows."""
    cursor.copy_in(statements.COPY_DEPENDENCIES,
                   copy_chunks(dependency_lines(state_id, version_id, projection.dependencies)))
    cursor.copy_in(
        statements.COPY_OUTPUTS,
        text_copy((state_id, version_id, ordinal, row.name,
                   row.type, row.value, row.sensitive)
                  for ordinal, row in enumerate(projection.outputs, 1)))


async def copy_projection_txn(cursor: Any, state_id: int, version_id: int,
                              prepared: BulkWrite) -> None:
    """Replace the state's projection rows with one COPY per table
    (a blocking transaction's cursor); ordinals count from 1 like the
    pool's statement's WITH ORDINALITY."""
    await cursor.execute(statements.DROP_PROJECTION, {"state": state_id})
    copy_resources(cursor, state_id, version_id, prepared.projection.resources)
    copy_dependencies_and_outputs(cursor, state_id, version_id, prepared.projection)
