"""The COPY text of a large state's projection rows: the faster line
builders of L{kilolock.store.postgres.large} write exactly the text of the
generic L{text_copy} (tab-separated fields; backslash, tab, line feed and
carriage return escaped; C{\\N} for NULL), whatever the rows hold."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kilolock.core.model import DependencyRow, ResourceRow
from kilolock.store.postgres.blocking import copy_chunks, plain_copy_text, text_copy, text_field
from kilolock.store.postgres.large import dependency_lines, resource_lines

#: Text with what COPY's text format escapes, often (no unpaired surrogate:
#: the projection's text never holds one, and UTF-8 has no form for it).
_TEXT = st.text(st.sampled_from("ab.[]\"{}:\\\t\n\r é")
                | st.characters(blacklist_categories=("Cs",)), max_size=12)

_RESOURCES = st.lists(st.builds(
    ResourceRow, address=_TEXT, module=_TEXT, mode=_TEXT, type=_TEXT, name=_TEXT,
    provider=_TEXT, index_key=st.none() | _TEXT, deposed=st.none() | _TEXT,
    attributes=_TEXT), max_size=5)
_DEPENDENCIES = st.lists(st.builds(DependencyRow, address=_TEXT, depends_on=_TEXT), max_size=5)


def _generic_resources(rows: list[ResourceRow], first: int) -> bytes:
    return b"".join(text_copy(
        (7, 9, ordinal, row.address, row.module, row.mode, row.type, row.name, row.provider,
         row.index_key, row.deposed, row.attributes)
        for ordinal, row in enumerate(rows, first)))


@given(_RESOURCES, st.integers(min_value=1, max_value=10**6))
def test_resource_lines_are_the_generic_copy_text(rows: list[ResourceRow], first: int) -> None:
    assert b"".join(copy_chunks(resource_lines(7, 9, rows, first))) == _generic_resources(
        rows, first)


@given(_DEPENDENCIES)
def test_dependency_lines_are_the_generic_copy_text(rows: list[DependencyRow]) -> None:
    assert b"".join(copy_chunks(dependency_lines(7, 9, rows))) == b"".join(text_copy(
        (7, 9, ordinal, row.address, row.depends_on) for ordinal, row in enumerate(rows, 1)))


def test_each_escaped_character_takes_the_slow_path() -> None:
    """A tab inside a name must not pass for a field separator, nor a
    backslash, line feed or carriage return go unescaped."""
    row = ResourceRow(address="a\tb", module="", mode="managed", type="t\\", name="n\n",
                      provider="p\r", index_key=None, deposed="d\t",
                      attributes='{"k":"\\"v\\""}')
    line = next(resource_lines(1, 2, [row]))
    assert line == ('1\t2\t1\ta\\tb\t\tmanaged\tt\\\\\tn\\n\tp\\r\t\\N\td\\t'
                    '\t{"k":"\\\\"v\\\\""}\n')
    assert [plain_copy_text(text, tabs) for text, tabs in [
        ("a\tb", 1), ("a\tb", 0), ("a\\b", 0), ("a\nb", 0), ("a\rb", 0), ("ab", 0)]] == [
        True, False, False, False, False, True]
    assert text_field(None) == "\\N" and text_field(True) == "t" and text_field(3) == "3"


def test_chunks_hold_whole_lines() -> None:
    """Each chunk ends at a row's end, so PostgreSQL never sees half a row
    between two COPY messages."""
    rows = [DependencyRow(address="x" * 5000, depends_on="y") for _ in range(600)]
    chunks = list(copy_chunks(dependency_lines(1, 2, rows)))
    assert len(chunks) > 1
    assert all(chunk.endswith(b"\n") for chunk in chunks)
