"""The state lane's SQL, each statement named, in the order a client uses
them: the audit chain every mutation ends with, LOCK, a write (small, then
large), UNLOCK, DELETE, then the reads.

The hot statements of the write cycle are L{PreparedSQL}: every pooled
session prepares them (L{PREPARE_STATEMENTS}) and runs them as C{EXECUTE};
anywhere else they run as text.  Values are always parameters; the
statements built at call time (L{select_matches}, L{select_events}) join
only constant fragments.
The tenants' SQL stands beside its use in L{kilolock.store.postgres.tenants}.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kilolock.rules.resources import ResourceQuery, attribute_steps, like_pattern
from kilolock.store.postgres.prepared import PreparedSQL, prepare_statements_sql
from kilolock.store.postgres.rows import EVENT_COLUMNS, VERSION_COLUMNS

# ---------------------------------------------------------------------------
# The state lane's mutations: functions of the schema (006_write_path.sql),
# each one statement and one round trip, with the lock order described there.

# Append an event to the tenant's chain (NULLs when the tenant does not exist).
APPEND_EVENT = PreparedSQL(
    "kl_append_event_sql",
    "SELECT * FROM kl_append_event(%(tenant)s, %(kind)s, %(path)s, %(principal)s, %(at)s,"
    " %(lock_id)s, %(serial)s, %(sha256)s, %(detail)s, %(prefix)s, %(suffix)s)")

# The tenant of a first event, when it has none yet.
CREATE_TENANT = "INSERT INTO tenants (id) VALUES (%s) ON CONFLICT (id) DO NOTHING"

# LOCK: (taken, holder's ID, holder's info).
LOCK = PreparedSQL(
    "kl_lock_sql",
    "SELECT * FROM kl_lock(%(tenant)s, %(path)s, %(lock_id)s, %(info)s, %(at)s,"
    " %(principal)s, %(kind)s, %(detail)s, %(prefix)s, %(suffix)s, %(token_digest)s)")

# UNLOCK: (released, holder's info, acquired at, principal, token digest).
UNLOCK = PreparedSQL(
    "kl_unlock_sql",
    "SELECT * FROM kl_unlock(%(tenant)s, %(path)s, %(lock_id)s, %(info)s, %(at)s,"
    " %(principal)s, %(kind)s, %(detail)s, %(prefix)s, %(suffix)s)")

# A write of a state below the large-transfer threshold: (outcome, the
# holder's ID and info, then a version's columns) rows.
WRITE_STATE = PreparedSQL(
    "kl_write_state_sql",
    "SELECT * FROM kl_write_state(%(tenant)s, %(path)s, %(lock_id)s, %(number)s, %(serial)s,"
    " %(lineage)s, %(sha256)s, %(size)s, %(at)s, %(principal)s, %(projected)s,"
    " %(resource_count)s, %(codec)s, %(payload)s, %(data_key)s, %(kek_id)s, %(base_number)s,"
    " %(base_sha256)s,"
    " %(digests)s, %(resources)s, %(dependencies)s, %(outputs)s, %(kind)s,"
    " %(detail_head)s, %(detail_tail)s, %(prefix_head)s, %(prefix_tail)s, %(suffix)s)")

# Who holds the lock (also what GET of a lock reads).
LOCK_HOLDER = (
    "SELECT l.info, l.acquired_at, l.principal, l.token_digest FROM locks l"
    " JOIN states s ON s.id = l.state_id WHERE s.tenant_id = %s AND s.path = %s"
)

# ---------------------------------------------------------------------------
# A large write's checks (the blocking path, where round trips cost little)

# A state's row (and its tenant's) for a first write.
CREATE_STATE_ROW = "SELECT kl_create_state(%(tenant)s, %(path)s, %(now)s)"

# A state's row, held until the transaction ends against a delete (which
# locks it FOR UPDATE), while writers and lockers go on.
SHARE_STATE_ROW = ("SELECT id FROM states WHERE tenant_id = %(tenant)s AND path = %(path)s"
                   " FOR SHARE")

# Writers of one state are serialised on its row.
LOCK_STATE_ROW = "SELECT id FROM states WHERE tenant_id = %(tenant)s AND path = %(path)s FOR UPDATE"

# What a write checks once its state row is locked: the lock (FOR SHARE: an
# UNLOCK waits for the write) and the versions with the serial plus the
# current one; one row per version (or one row of NULLs), each with the lock.
LOCK_AND_CANDIDATES = f"""
SELECT l.lock_id, l.info, {VERSION_COLUMNS}
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT lock_id, info FROM locks WHERE state_id = %(state)s FOR SHARE
) l ON true
LEFT JOIN LATERAL (
    SELECT * FROM state_versions
    WHERE state_id = %(state)s
      AND (serial = %(serial)s
           OR number = (SELECT max(number) FROM state_versions WHERE state_id = %(state)s))
) v ON true
ORDER BY v.number
"""  # noqa: S608 - constant fragments

# ---------------------------------------------------------------------------
# A large write (the blocking path: kilolock.store.postgres.large)

# The state row touched and the new version's id drawn before its COPY.
TOUCH_STATE_AND_NEXT_VERSION_ID = (
    "WITH touched AS (UPDATE states SET updated_at = %(now)s WHERE id = %(state)s)"
    " SELECT nextval(pg_get_serial_sequence('state_versions', 'id'))"
)

COPY_VERSION = (
    "COPY state_versions (id, state_id, number, serial, lineage, sha256, size, payload, codec,"
    " data_key, kek_id, created_at, principal, projected, resource_count)"
    " FROM STDIN (FORMAT binary)"
)

# The projection's rows go (and with them the digests that let a later write
# keep a table): every table is copied anew.
DROP_PROJECTION = (
    "DELETE FROM resources WHERE state_id = %(state)s;"
    " DELETE FROM resource_dependencies WHERE state_id = %(state)s;"
    " DELETE FROM outputs WHERE state_id = %(state)s;"
    " UPDATE states SET projection_digests = NULL WHERE id = %(state)s"
)

COPY_RESOURCES = (
    "COPY resources (state_id, version_id, ordinal, address, module, mode, type, name,"
    " provider, index_key, deposed, attributes) FROM STDIN"
)

COPY_DEPENDENCIES = (
    "COPY resource_dependencies (state_id, version_id, ordinal, address, depends_on)"
    " FROM STDIN"
)

COPY_OUTPUTS = (
    "COPY outputs (state_id, version_id, ordinal, name, type, value, sensitive) FROM STDIN"
)

# ---------------------------------------------------------------------------
# DELETE

# The lock, on a state row this transaction has locked (FOR SHARE, as
# LOCK_AND_CANDIDATES).
HELD_LOCK = "SELECT lock_id, info FROM locks WHERE state_id = %s FOR SHARE"

COUNT_VERSIONS = "SELECT count(*) FROM state_versions WHERE state_id = %s"

DELETE_STATE = "DELETE FROM states WHERE id = %s"

# ---------------------------------------------------------------------------
# Reads

# A version's stored payload and its chain's (for a delta, its base's, and
# so on back to a full snapshot), oldest first; the walk stops early at a
# delta whose base is one of %(known)s (versions whose raw bytes the reader
# holds).  Per row: codec, payload (hex text when shorter than %(limit)s,
# LARGE_TRANSFER_BYTES; else NULL, and the row's id reads it on the blocking
# path: PAYLOAD_BY_ID), size, sha256, serial, id, wrapped data key, number;
# when and why the version was pruned (a tombstone: codec 'pruned'); its
# base's number and sha256.  No row: no such version.  Each step of the
# walk is a lookup of state_versions_number; a base is an earlier version
# (the walk refuses any other, so a damaged base_number cannot loop it).
_STORED_CHAIN = """
WITH RECURSIVE target AS (
    SELECT v.id, v.state_id, v.number, v.base_number, v.codec
    FROM states s JOIN state_versions v ON v.state_id = s.id
    WHERE s.tenant_id = %(tenant)s AND s.path = %(path)s {which}
), chain (id, state_id, number, base_number, codec, depth) AS (
    SELECT id, state_id, number, base_number, codec, 0 FROM target
    UNION ALL
    SELECT b.id, b.state_id, b.number, b.base_number, b.codec, c.depth + 1
    FROM chain c JOIN state_versions b ON b.state_id = c.state_id AND b.number = c.base_number
    WHERE c.codec = 'zstd-delta' AND NOT c.base_number = ANY(%(known)s::integer[])
      AND c.base_number < c.number
)
SELECT v.codec, CASE WHEN octet_length(v.payload) < %(limit)s THEN v.payload END,
       v.size, v.sha256, v.serial, v.id, v.data_key, v.number, v.pruned_at, v.prune_reason,
       v.base_number, b.sha256
FROM chain c JOIN state_versions v ON v.id = c.id
LEFT JOIN state_versions b ON b.state_id = v.state_id AND b.number = v.base_number
ORDER BY c.depth DESC
"""
CURRENT_STORED_VERSION = PreparedSQL(
    "kl_current_chain_sql", _STORED_CHAIN.format(which="ORDER BY v.number DESC LIMIT 1"))
STORED_VERSION = PreparedSQL(
    "kl_stored_version_sql", _STORED_CHAIN.format(which="AND v.number = %(number)s"))

PAYLOAD_BY_ID = "SELECT payload FROM state_versions WHERE id = %s"

# One row per state of a tenant (%(path)s: SUMMARY_OF_PATH narrows it to one).
SUMMARIES = """
SELECT s.path, s.updated_at,
       (SELECT count(*) FROM state_versions c WHERE c.state_id = s.id),
       l.info, l.acquired_at, l.principal, l.token_digest, v.resource_count,
       v.number, v.serial, v.lineage, v.sha256, v.size, v.created_at, v.principal, v.projected
FROM states s
LEFT JOIN LATERAL (
    SELECT * FROM state_versions WHERE state_id = s.id ORDER BY number DESC LIMIT 1
) v ON true
LEFT JOIN locks l ON l.state_id = s.id
WHERE s.tenant_id = %(tenant)s
"""
SUMMARY_OF_PATH = " AND s.path = %(path)s"
SUMMARY_ORDER = ' ORDER BY s.path COLLATE "C"'

# Every version, tombstones with when and why they were pruned.
VERSIONS = (
    f"SELECT {VERSION_COLUMNS}, v.pruned_at, v.prune_reason"  # noqa: S608 - constant columns
    " FROM state_versions v JOIN states s ON s.id = v.state_id"
    " WHERE s.tenant_id = %s AND s.path = %s ORDER BY v.number"
)

# The projection's three tables are read in one snapshot.
READ_ONLY_SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"

CURRENT_PROJECTED = (
    "SELECT s.id, v.projected FROM state_versions v JOIN states s ON s.id = v.state_id"
    " WHERE s.tenant_id = %s AND s.path = %s ORDER BY v.number DESC LIMIT 1"
)

SELECT_RESOURCES = (
    "SELECT address, module, mode, type, name, provider, index_key::text, deposed,"
    " attributes::text FROM resources WHERE state_id = %s ORDER BY ordinal"
)
SELECT_DEPENDENCIES = (
    "SELECT address, depends_on FROM resource_dependencies WHERE state_id = %s ORDER BY ordinal"
)
SELECT_OUTPUTS = (
    "SELECT name, type::text, value::text, sensitive FROM outputs WHERE state_id = %s"
    " ORDER BY ordinal"
)

_SELECT_MATCHES = (
    "SELECT s.path, v.number, r.address, r.module, r.mode, r.type, r.name, r.provider,"
    " r.index_key::text, r.deposed, r.attributes::text FROM resources r"
    " JOIN states s ON s.id = r.state_id"
    " JOIN LATERAL (SELECT max(number) AS number FROM state_versions"
    " WHERE state_id = s.id) v ON true"
)


def select_matches(query: ResourceQuery) -> tuple[str, dict[str, Any]]:
    """A resource search: the statement and its parameters.  Each criterion
    of C{query} that is set adds its condition; only these constant
    fragments are joined, every value is a parameter."""
    conditions = ["s.tenant_id = %(tenant)s"]
    params: dict[str, Any] = {"limit": query.limit}
    address = None if query.address is None else like_pattern(query.address)
    for condition, name, value in (
            # resources_type indexes hashtext(type); the type itself decides.
            ("hashtext(r.type) = hashtext(%(type)s) AND r.type = %(type)s", "type",
             query.type),
            ("r.module = %(module)s", "module", query.module),
            ("r.address LIKE %(address)s ESCAPE '\\'", "address", address),
            ("s.path = %(state)s", "state", query.state_path),
            ("starts_with(s.path, %(prefix)s)", "prefix", query.path_prefix)):
        if value is not None:
            conditions.append(condition)
            params[name] = value
    if query.attribute is not None:
        conditions.append(
            "jsonb_typeof(r.attributes #> %(steps)s::text[]) IN ('string', 'number', 'boolean')"
            " AND r.attributes #>> %(steps)s::text[] = %(value)s")
        params["steps"] = attribute_steps(query.attribute[0])
        params["value"] = query.attribute[1]
    return (_SELECT_MATCHES + " WHERE " + " AND ".join(conditions)
            + ' ORDER BY s.path COLLATE "C", r.ordinal LIMIT %(limit)s'), params


def select_events(state_path: str | None, kinds: list[str] | None, since: datetime | None,
                  until: datetime | None) -> str:
    """The events of a tenant (C{%(tenant)s}) in chain order, narrowed by
    the filters that are set (their values are the parameters C{%(path)s},
    C{%(kinds)s}, C{%(since)s} and C{%(until)s})."""
    conditions = ["tenant_id = %(tenant)s"]
    for condition, value in (("state_path = %(path)s", state_path),
                             ("kind = ANY(%(kinds)s::text[])", kinds),
                             ("at >= %(since)s", since),
                             ("at < %(until)s", until)):
        if value is not None:
            conditions.append(condition)
    return (f"SELECT {EVENT_COLUMNS} FROM events e"  # noqa: S608 - constant fragments
            f" WHERE {' AND '.join(conditions)} ORDER BY e.seq")


#: What every pooled session prepares once the schema is current.
PREPARE_STATEMENTS = prepare_statements_sql([
    LOCK, WRITE_STATE, UNLOCK, APPEND_EVENT, CURRENT_STORED_VERSION, STORED_VERSION])
