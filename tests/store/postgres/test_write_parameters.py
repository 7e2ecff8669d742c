"""The projection parameters of a write (L{WriteParameters}): the resources
travel as one JSON array whose exact text the database digests, so that a
table is replaced only when its text changed.  The text is pinned here
against a reference built field by field with C{json.dumps}: a change of the
text would make every state's next write replace its rows for nothing."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kilolock.store.postgres.codecs import WriteParameters, _digest
from kilolock.web.body import prepare_upload


def upload_of(resources: list[dict[str, Any]]) -> Any:
    document = {"version": 4, "terraform_version": "1.15.5", "serial": 3, "lineage": "l",
                "outputs": {"o": {"value": "v", "type": "string"}}, "resources": resources}
    return prepare_upload(json.dumps(document).encode())


def reference_text(upload: Any) -> str:
    """The resources JSON as it was always built: each field C{json.dumps}'d
    (ASCII, escapes), index key and attributes as the projection's JSON."""
    rows = []
    for row in upload.parsed.projection.resources:
        fields = [("address", json.dumps(row.address)), ("module", json.dumps(row.module)),
                  ("mode", json.dumps(row.mode)), ("type", json.dumps(row.type)),
                  ("name", json.dumps(row.name)), ("provider", json.dumps(row.provider)),
                  ("index_key", "null" if row.index_key is None else row.index_key),
                  ("deposed", json.dumps(row.deposed)), ("attributes", row.attributes)]
        rows.append("{" + ",".join(f'"{name}":{value}' for name, value in fields) + "}")
    return "[" + ",".join(rows) + "]"


def literal_text(parameters: WriteParameters) -> str:
    quoted = parameters.resources.getquoted().decode()
    assert quoted[0] == quoted[-1] == "'"
    return quoted[1:-1].replace("''", "'")


def resource(name: str, type_: str = "t", *, module: str | None = None,
             instances: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"mode": "managed", "type": type_, "name": name,
                             "provider": 'provider["registry.terraform.io/x/y"]',
                             "instances": instances or [{"attributes": {"id": "1"}}]}
    if module is not None:
        found["module"] = module
    return found


def test_awkward_text_is_the_reference_text() -> None:
    upload = upload_of([
        resource("it's", "ty\"pe", module='module.m["k\'"]', instances=[
            {"index_key": "k\u00e9'\u2028", "attributes": {"a": "v'\u00e9\u0000"}},
            {"index_key": 7, "attributes": {}, "deposed": "dep'osed"},
            {"attributes": None}]),
        resource("caf\u00e9\U0001f600"),
    ])
    parameters = WriteParameters.of(upload)
    text = literal_text(parameters)
    assert text == reference_text(upload)
    assert parameters.digests[0] == _digest([text])
    rows = json.loads(text)
    assert [(row["name"], row["index_key"], row["deposed"]) for row in rows] == [
        ("it's", "k\u00e9'\u2028", None), ("it's", 7, "dep'osed"), ("it's", None, None),
        ("caf\u00e9\U0001f600", None, None)]
    assert rows[0]["attributes"] == {"a": "v'\u00e9\ufffd"}  # NUL made jsonb-safe
    assert parameters.resource_count == 4


def test_no_resources_is_an_empty_array() -> None:
    parameters = WriteParameters.of(upload_of([]))
    assert (literal_text(parameters), parameters.resource_count) == ("[]", 0)


@settings(max_examples=60, deadline=None)
@given(names=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=4),
       key=st.one_of(st.none(), st.integers(0, 9), st.text(max_size=8)))
def test_any_text_is_the_reference_text(names: list[str], key: int | str | None) -> None:
    instance: dict[str, Any] = {"attributes": {"name": names[0]}}
    if key is not None:
        instance["index_key"] = key
    upload = upload_of([resource(name, name[::-1], instances=[dict(instance)])
                        for name in names])
    assert literal_text(WriteParameters.of(upload)) == reference_text(upload)
