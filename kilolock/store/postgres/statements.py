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

from kilolock.model import ResourceQuery
from kilolock.resource_query import attribute_steps, like_pattern
from kilolock.store.postgres.prepared import PreparedSQL, prepare_statements_sql
from kilolock.store.postgres.rows import EVENT_COLUMNS, VERSION_COLUMNS

# ---------------------------------------------------------------------------
# Every mutation: the tenant's audit chain

# The chain head is locked (FOR NO KEY UPDATE, the lock an UPDATE of the
# row takes: it serialises appends but, unlike FOR UPDATE, not the
# foreign-key checks of rows inserted for the tenant meanwhile; only the
# last step modifies the row), the event linked and hashed, the head moved.
# Nothing is appended when the tenant does not exist.
APPEND_EVENT_STEPS = """
head AS (
    SELECT chain_seq + 1 AS seq, chain_head AS prev FROM tenants
    WHERE id = %(tenant)s FOR NO KEY UPDATE
), appended AS (
    INSERT INTO events (tenant_id, seq, kind, state_path, principal, at, lock_id, serial,
                        sha256, detail, prev_hash, hash)
    SELECT %(tenant)s, head.seq, %(kind)s, %(path)s, %(principal)s, %(at)s, %(lock_id)s,
           %(serial)s, %(sha256)s, %(detail)s, head.prev,
           encode(sha256(convert_to(head.prev || %(prefix)s || head.seq || %(suffix)s,
                                    'UTF8')), 'hex')
    FROM head
    RETURNING seq, prev_hash, hash
), moved AS (
    UPDATE tenants SET chain_seq = appended.seq, chain_head = appended.hash
    FROM appended WHERE tenants.id = %(tenant)s
)
"""

# One statement for an event; no row comes back when the tenant does not exist.
APPEND_EVENT = PreparedSQL(
    "kl_append_event",
    f"WITH {APPEND_EVENT_STEPS} SELECT seq, prev_hash, hash FROM appended")  # noqa: S608

# The tenant of a first event, when it has none yet.
CREATE_TENANT = "INSERT INTO tenants (id) VALUES (%s) ON CONFLICT (id) DO NOTHING"

# ---------------------------------------------------------------------------
# LOCK

# One statement: ON CONFLICT DO NOTHING makes it atomic against concurrent
# LOCKs in any process; no row comes back when the state is missing or locked.
TAKE_LOCK = PreparedSQL("kl_take_lock", """
INSERT INTO locks (state_id, lock_id, info, acquired_at, principal, token_digest)
SELECT id, %(lock_id)s, %(info)s, %(now)s, %(principal)s, %(token_digest)s::text
FROM states WHERE tenant_id = %(tenant)s AND path = %(path)s
ON CONFLICT (state_id) DO NOTHING
RETURNING state_id
""")

# A LOCK of an existing, unlocked state and its event, in one statement: the
# event is appended (the tenant's chain head locked) only if the lock was
# taken; a row comes back only then.
TAKE_LOCK_AND_RECORD = PreparedSQL("kl_take_lock_and_record", f"""
WITH taken AS ({TAKE_LOCK}),
{APPEND_EVENT_STEPS.replace(
    "WHERE id = %(tenant)s FOR NO KEY UPDATE",
    "WHERE id = %(tenant)s AND EXISTS (SELECT 1 FROM taken) FOR NO KEY UPDATE")}
SELECT state_id FROM taken
""")  # noqa: S608 - constant fragments

# Why TAKE_LOCK took nothing: the state's row (none: it does not exist yet)
# and the lock's id and info (NULL: nobody holds it any more).
STATE_AND_LOCK = (
    "SELECT s.id, l.lock_id, l.info FROM states s"
    " LEFT JOIN locks l ON l.state_id = s.id"
    " WHERE s.tenant_id = %s AND s.path = %s"
)

# A state's row (and its tenant's) for a first LOCK or write.
CREATE_STATE_ROW = (
    "INSERT INTO tenants (id) VALUES (%(tenant)s) ON CONFLICT (id) DO NOTHING;"
    " INSERT INTO states (tenant_id, path, created_at, updated_at)"
    " VALUES (%(tenant)s, %(path)s, %(now)s, %(now)s)"
    " ON CONFLICT (tenant_id, path) DO NOTHING"
)

# ---------------------------------------------------------------------------
# A write (POST)

# Writers of one state are serialised on its row.
LOCK_STATE_ROW = PreparedSQL(
    "kl_lock_state_row",
    "SELECT id FROM states WHERE tenant_id = %(tenant)s AND path = %(path)s FOR UPDATE")

# What a write checks once its state row is locked: the lock (FOR SHARE: an
# UNLOCK waits for the write) and the versions with the serial plus the
# current one; one row per version (or one row of NULLs), each with the lock
# and the digests of the state's projection rows.
LOCK_AND_CANDIDATES = PreparedSQL("kl_lock_and_candidates", f"""
SELECT l.lock_id, l.info, d.projection_digests, {VERSION_COLUMNS}
FROM (SELECT projection_digests FROM states WHERE id = %(state)s) AS d
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
""")  # noqa: S608 - constant fragments

# The rows arrive as three JSON arrays of objects (see
# kilolock.store.postgres.codecs.WriteParameters); WITH ORDINALITY numbers
# them in state order.  %(version)s is the new version's id (an expression).
PROJECTION_STEPS = """
dropped_resources AS (
    DELETE FROM resources WHERE state_id = %(state)s AND %(replace_resources)s),
dropped_dependencies AS (
    DELETE FROM resource_dependencies WHERE state_id = %(state)s AND %(replace_dependencies)s),
dropped_outputs AS (
    DELETE FROM outputs WHERE state_id = %(state)s AND %(replace_outputs)s),
new_resources AS (
    INSERT INTO resources (state_id, version_id, ordinal, address, module, mode, type, name,
                           provider, index_key, deposed, attributes)
    SELECT %(state)s, %(version)s, r.ordinal, r.address, r.module, r.mode, r.type, r.name,
           r.provider, r.index_key, r.deposed, r.attributes
    FROM ROWS FROM (jsonb_to_recordset(%(resources)s::jsonb) AS (
        address text, module text, mode text, type text, name text, provider text,
        index_key jsonb, deposed text, attributes jsonb
    )) WITH ORDINALITY AS r (address, module, mode, type, name, provider, index_key,
                             deposed, attributes, ordinal)
),
new_dependencies AS (
    INSERT INTO resource_dependencies (state_id, version_id, ordinal, address, depends_on)
    SELECT %(state)s, %(version)s, d.ordinal, d.address, d.depends_on
    FROM ROWS FROM (jsonb_to_recordset(%(dependencies)s::jsonb) AS (
        address text, depends_on text
    )) WITH ORDINALITY AS d (address, depends_on, ordinal)
),
new_outputs AS (
    INSERT INTO outputs (state_id, version_id, ordinal, name, type, value, sensitive)
    SELECT %(state)s, %(version)s, o.ordinal, o.name, o.type::jsonb, o.value::jsonb,
           o.sensitive
    FROM ROWS FROM (jsonb_to_recordset(%(outputs)s::jsonb) AS (
        name text, type text, value text, sensitive boolean
    )) WITH ORDINALITY AS o (name, type, value, sensitive, ordinal)
)
"""

# A write after its checks, in one statement: the version and its
# projection (replacing the tables that changed).  Data-modifying steps all
# run, whatever the final SELECT reads.  The event follows in a statement of
# its own (APPEND_EVENT), sent in the same round trip.
WRITE_VERSION = PreparedSQL("kl_write_version", f"""
WITH touched AS (
    UPDATE states SET updated_at = %(at)s, projection_digests = %(digests)s
    WHERE id = %(state)s),
new_version AS (
    INSERT INTO state_versions (state_id, number, serial, lineage, sha256, size, raw_state,
                                created_at, principal, projected, resource_count)
    VALUES (%(state)s, %(number)s, %(serial)s, %(lineage)s, %(sha256)s, %(size)s, %(raw)s,
            %(at)s, %(principal)s, %(projected)s, %(resource_count)s)
    RETURNING id
),
{PROJECTION_STEPS.replace("%(version)s", "(SELECT id FROM new_version)")}
SELECT id FROM new_version
""")  # noqa: S608 - constant fragments

# ---------------------------------------------------------------------------
# A large write (the blocking path: kilolock.store.postgres.large)

# The state row touched and the new version's id drawn before its COPY.
TOUCH_STATE_AND_NEXT_VERSION_ID = (
    "WITH touched AS (UPDATE states SET updated_at = %(now)s WHERE id = %(state)s)"
    " SELECT nextval(pg_get_serial_sequence('state_versions', 'id'))"
)

COPY_VERSION = (
    "COPY state_versions (id, state_id, number, serial, lineage, sha256, size, raw_state,"
    " created_at, principal, projected, resource_count) FROM STDIN (FORMAT binary)"
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
# UNLOCK

# An owner release (lock_id given) or a force release (NULL), in one statement.
RELEASE_LOCK = PreparedSQL(
    "kl_release_lock",
    "DELETE FROM locks l USING states s"
    " WHERE l.state_id = s.id AND s.tenant_id = %(tenant)s AND s.path = %(path)s"
    " AND (%(lock_id)s::text IS NULL OR l.lock_id = %(lock_id)s)"
    " RETURNING l.info, l.acquired_at, l.principal, l.token_digest")

# Who holds the lock (also what GET of a lock reads).
LOCK_HOLDER = (
    "SELECT l.info, l.acquired_at, l.principal, l.token_digest FROM locks l"
    " JOIN states s ON s.id = l.state_id WHERE s.tenant_id = %s AND s.path = %s"
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

# A version's raw state as hex text when it is smaller than the first
# parameter (LARGE_TRANSFER_BYTES), else NULL; and the version's id, by
# which a large one is read on the blocking path (RAW_STATE_BY_ID).
CURRENT_RAW_STATE = (
    "SELECT CASE WHEN v.size < %s THEN v.raw_state END, v.id FROM state_versions v"
    " JOIN states s ON s.id = v.state_id"
    " WHERE s.tenant_id = %s AND s.path = %s ORDER BY v.number DESC LIMIT 1"
)

VERSION_RAW_STATE = (
    "SELECT CASE WHEN v.size < %s THEN v.raw_state END, v.id FROM state_versions v"
    " JOIN states s ON s.id = v.state_id"
    " WHERE s.tenant_id = %s AND s.path = %s AND v.number = %s"
)

RAW_STATE_BY_ID = "SELECT raw_state FROM state_versions WHERE id = %s"

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

VERSIONS = (
    f"SELECT {VERSION_COLUMNS} FROM state_versions v"  # noqa: S608 - constant columns
    " JOIN states s ON s.id = v.state_id"
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
            ("r.type = %(type)s", "type", query.type),
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
    return (f"SELECT {EVENT_COLUMNS} FROM events"  # noqa: S608 - constant fragments
            f" WHERE {' AND '.join(conditions)} ORDER BY seq")


#: What every pooled session prepares once the schema is current.
PREPARE_STATEMENTS = prepare_statements_sql([
    LOCK_STATE_ROW, TAKE_LOCK, RELEASE_LOCK, APPEND_EVENT, WRITE_VERSION,
    LOCK_AND_CANDIDATES, TAKE_LOCK_AND_RECORD])
