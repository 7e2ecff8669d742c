"""Server-side prepared statements for the state lane's hot statements.

PostgreSQL parses, analyses and plans every simple-protocol statement anew;
for the write cycle's statements (a lock, a write, an unlock) that is about
a third of the server's CPU (measured: 3.1-3.4 ms of PostgreSQL CPU per
cycle as text, 2.2-2.3 ms prepared).  txpostgres speaks only the simple
protocol, so the statements are prepared with SQL: C{PREPARE name AS ...}
once per session, outside any transaction, then run as C{EXECUTE name(...)}
with the values interpolated by psycopg2 as before.

A L{PreparedSQL} is also the plain statement (a C{str} with C{%(name)s}
placeholders): a cursor that has not prepared it -- a blocking connection,
a session whose PREPARE failed -- runs the text as it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["PreparedSQL", "prepare_statements_sql"]

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


class PreparedSQL(str):
    """An SQL statement with C{%(name)s} placeholders that sessions prepare
    under C{name}.

    @ivar name: the prepared statement's name (unique per statement).
    @ivar parameters: the placeholder names in order of first appearance:
        C{$1}, C{$2}, ... of the prepared statement.
    @ivar prepare: the C{PREPARE} statement.
    @ivar execute_sql: C{EXECUTE name(%s, ...)}, for L{arguments}.
    """

    name: str
    parameters: tuple[str, ...]
    prepare: str
    execute_sql: str

    def __new__(cls, name: str, sql: str) -> PreparedSQL:
        statement = super().__new__(cls, sql)
        statement.name = name
        statement.parameters = tuple(dict.fromkeys(_PLACEHOLDER.findall(sql)))
        numbers = {parameter: index for index, parameter in enumerate(statement.parameters, 1)}
        # Without parameters psycopg2 sends the PREPARE text as it is: "%%" is "%".
        positional = _PLACEHOLDER.sub(lambda match: f"${numbers[match.group(1)]}", sql)
        statement.prepare = f"PREPARE {name} AS {positional.replace('%%', '%')}"
        placeholders = ", ".join(["%s"] * len(statement.parameters))
        statement.execute_sql = f"EXECUTE {name}({placeholders})" if placeholders \
            else f"EXECUTE {name}"
        return statement

    def arguments(self, params: Mapping[str, Any]) -> list[Any]:
        """The values of L{execute_sql}'s placeholders, from the named C{params}."""
        return [params[parameter] for parameter in self.parameters]


def prepare_statements_sql(statements: Iterable[PreparedSQL]) -> str:
    """One simple query that prepares every statement (a session's first)."""
    return "; ".join(statement.prepare for statement in statements)
