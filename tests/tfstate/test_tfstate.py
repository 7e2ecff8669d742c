"""Tests for L{kilolock.tfstate.parse}: parsing state bodies and projecting them.

The C{*.tfstate} fixtures under C{tests/data/states} were written by a real
Terraform 1.15.5 (C{tests/data/states/generate.py} regenerates them).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilolock.core.errors import InvalidState, InvalidText
from kilolock.core.model import ParsedState, Projection, ResourceRow
from kilolock.tfstate.parse import REDACTED, parse_state, project_state
from tests.support.paths import SAMPLE_STATES

STATES = SAMPLE_STATES

#: The sensitive variable's value in the generated fixtures.
FIXTURE_SECRET = "hunter2-planted-secret"

#: Planted in hand-written bodies; must never show up where it is not allowed.
SECRET = "s3cr3t-Pl4nted-VALUE"

PROVIDER = 'provider["terraform.io/builtin/terraform"]'


def fixture(name: str) -> bytes:
    return (STATES / name).read_bytes()


def body(**fields: Any) -> bytes:
    """A minimal valid v4 state with C{fields} merged over it."""
    doc: dict[str, Any] = {
        "version": 4,
        "terraform_version": "1.15.5",
        "serial": 7,
        "lineage": "3f1b5c2e-0000-4000-8000-000000000001",
        "outputs": {},
        "resources": [],
        "check_results": None,
    }
    doc.update(fields)
    return json.dumps(doc).encode()


def resource(name: Any = "r", instances: Any = None, **fields: Any) -> dict[str, Any]:
    res: dict[str, Any] = {
        "mode": "managed",
        "type": "terraform_data",
        "name": name,
        "provider": PROVIDER,
        "instances": [{"schema_version": 0, "attributes": {"id": "i-1"}}]
        if instances is None
        else instances,
    }
    res.update(fields)
    return res


def project(*resources: dict[str, Any], outputs: dict[str, Any] | None = None) -> Projection:
    parsed = parse_state(body(resources=list(resources), outputs=outputs or {}))
    assert parsed.projection is not None
    return parsed.projection


def attributes_of(attrs: dict[str, Any], sensitive: Any, **extra: Any) -> Any:
    """Project one instance with C{attrs} and C{sensitive_attributes}; return
    its attributes decoded."""
    instance = {"schema_version": 0, "attributes": attrs, "sensitive_attributes": sensitive}
    instance.update(extra)
    (row,) = project(resource(instances=[instance])).resources
    return json.loads(row.attributes)


def attr(name: str) -> dict[str, Any]:
    return {"type": "get_attr", "value": name}


def index(value: Any, type_: Any) -> dict[str, Any]:
    return {"type": "index", "value": {"value": value, "type": type_}}


def rows_by_address(projection: Projection) -> dict[str, ResourceRow]:
    return {row.address: row for row in projection.resources if row.deposed is None}


def real(name: str) -> ParsedState:
    return parse_state(fixture(name))


# ---------------------------------------------------------------------------
# real Terraform 1.15.5 states


def test_real_state_header() -> None:
    """A real v4 state yields its serial, lineage and terraform_version."""
    doc = json.loads(fixture("full.tfstate"))
    parsed = real("full.tfstate")
    assert parsed.serial == doc["serial"]
    assert parsed.lineage == doc["lineage"]
    assert parsed.terraform_version == "1.15.5"
    assert not parsed.encrypted


def test_real_addresses_match_terraform_state_list() -> None:
    """Instance addresses are spelled exactly as `terraform state list` prints them."""
    projection = real("full.tfstate").projection
    assert projection is not None
    listed = (STATES / "full.addresses.txt").read_text(encoding="utf-8").splitlines()
    ours = [row.address for row in projection.resources]
    assert sorted(ours) == sorted(listed)
    # The awkward keys really are in there, spelled Terraform's way.
    assert 'terraform_data.keyed["naïve $${x}"]' in ours
    assert 'terraform_data.keyed["nb\\u00a0sp"]' in ours
    assert 'terraform_data.keyed["pct %%{y}"]' in ours


def test_real_resource_row_fields() -> None:
    """Module, mode, type, name, provider and index_key come from the state as-is."""
    projection = real("full.tfstate").projection
    assert projection is not None
    rows = rows_by_address(projection)
    deep = rows['module.keyed["k1"].module.inner.terraform_data.deep[0]']
    assert (deep.module, deep.mode, deep.type, deep.name) == (
        'module.keyed["k1"].module.inner', "managed", "terraform_data", "deep")
    assert deep.provider == PROVIDER
    assert deep.index_key == "0"
    data = rows["data.terraform_remote_state.other"]
    assert (data.module, data.mode, data.type, data.index_key) == (
        "", "data", "terraform_remote_state", None)
    assert json.loads(data.attributes)["backend"] == "local"
    weird = rows['terraform_data.keyed["we\\"ird key"]']
    assert json.loads(weird.index_key or "null") == 'we"ird key'


def test_real_zero_instance_resource_has_no_row() -> None:
    """A count = 0 resource (present in the config, absent as instances) yields no row."""
    projection = real("full.tfstate").projection
    assert projection is not None
    assert all(row.name != "none" for row in projection.resources)
    assert len(projection.resources) == 15


def test_real_destroyed_state_projects_nothing() -> None:
    """The state `terraform destroy` leaves behind projects to no rows at all."""
    parsed = real("destroyed.tfstate")
    assert parsed.projection == Projection()


def test_real_sensitive_attributes_format() -> None:
    """Terraform 1.15.5 writes sensitive_attributes as lists of get_attr/index steps."""
    doc = json.loads(fixture("full.tfstate"))
    (secretive,) = [r for r in doc["resources"] if r["name"] == "secretive"]
    paths = secretive["instances"][0]["sensitive_attributes"]
    assert sorted(paths, key=json.dumps) == sorted([
        [attr("input"), attr("list"), index(1, "number")],
        [attr("input"), attr("nested"), attr("password")],
    ], key=json.dumps)
    # The dynamically-typed input is stored wrapped in {"value", "type"}.
    assert set(secretive["instances"][0]["attributes"]["input"]) == {"value", "type"}


def test_real_nested_sensitive_paths_are_redacted_through_the_wrapper() -> None:
    """Nested sensitive leaves of a dynamic attribute are redacted; siblings stay."""
    projection = real("full.tfstate").projection
    assert projection is not None
    attrs = json.loads(rows_by_address(projection)["terraform_data.secretive"].attributes)
    value = attrs["input"]["value"]
    assert value["nested"] == {"password": REDACTED, "other": "fine"}
    assert value["list"] == ["x", REDACTED]
    assert value["name"] == "visible"
    assert attrs["input"]["type"][0] == "object"
    assert FIXTURE_SECRET not in json.dumps(attrs["input"])


def test_real_unmarked_copies_are_not_redacted() -> None:
    """Only marked paths are redacted: terraform_data.output is unmarked, as Terraform shows."""
    projection = real("full.tfstate").projection
    assert projection is not None
    rows = rows_by_address(projection)
    whole = json.loads(rows["terraform_data.whole"].attributes)
    assert whole["input"] == REDACTED
    assert whole["output"]["value"] == FIXTURE_SECRET


def test_real_dependencies() -> None:
    """Each instance's dependencies become (instance address, dependency) rows."""
    projection = real("full.tfstate").projection
    assert projection is not None
    assert {(d.address, d.depends_on) for d in projection.dependencies} == {
        ("terraform_data.secretive", "terraform_data.plain"),
        ('module.keyed["k1"].module.inner.terraform_data.deep[0]',
         "module.keyed.terraform_data.m"),
        ("module.net.module.inner.terraform_data.deep[0]", "module.net.terraform_data.m"),
    }


def test_real_outputs() -> None:
    """Outputs keep their type and value as JSON text; a sensitive one loses its value."""
    projection = real("full.tfstate").projection
    assert projection is not None
    outputs = {row.name: row for row in projection.outputs}
    assert [row.name for row in projection.outputs] == ["obj", "plain", "secret"]
    assert json.loads(outputs["obj"].value or "") == {"a": 1, "b": [True, None]}
    assert json.loads(outputs["obj"].type or "")[0] == "object"
    assert outputs["plain"].sensitive is False
    secret = outputs["secret"]
    assert (secret.value, secret.sensitive, secret.type) == (None, True, '"string"')
    assert all(FIXTURE_SECRET not in (row.value or "") for row in projection.outputs)


def test_real_deposed_object() -> None:
    """A deposed object is its own row at the instance's address, with its deposed key."""
    doc = json.loads(fixture("deposed.tfstate"))
    deposed_key = next(i["deposed"] for i in doc["resources"][0]["instances"] if "deposed" in i)
    projection = real("deposed.tfstate").projection
    assert projection is not None
    assert [(r.address, r.index_key, r.deposed) for r in projection.resources] == [
        ("terraform_data.cbd[0]", "0", None),
        ("terraform_data.cbd[0]", "0", deposed_key),
    ]
    current, old = (json.loads(r.attributes) for r in projection.resources)
    assert current["input"]["value"] == "gen-2"
    assert old["input"]["value"] == "gen-1"


def test_projection_does_not_modify_the_document() -> None:
    """project_state leaves the document it is given untouched (redaction copies)."""
    doc = json.loads(fixture("full.tfstate"))
    before = copy.deepcopy(doc)
    project_state(doc)
    assert doc == before


# ---------------------------------------------------------------------------
# hand-written states: addresses, keys, modes, instances


def test_nested_module_address() -> None:
    """The module path is taken verbatim from the state and prefixed to the address."""
    projection = project(resource(module='module.a["x"].module.b', name="n"))
    (row,) = projection.resources
    assert row.module == 'module.a["x"].module.b'
    assert row.address == 'module.a["x"].module.b.terraform_data.n'


def test_root_module_is_empty_string() -> None:
    """A resource without a module key belongs to the root module, written as ""."""
    (row,) = project(resource(name="n")).resources
    assert (row.module, row.address, row.index_key) == ("", "terraform_data.n", None)


@pytest.mark.parametrize(
    ("key", "suffix", "key_json"),
    [
        (0, "[0]", "0"),
        (12, "[12]", "12"),
        ("a", '["a"]', '"a"'),
        ("", '[""]', '""'),
        ('say "hi"', '["say \\"hi\\""]', '"say \\"hi\\""'),
        ("back\\slash", '["back\\\\slash"]', '"back\\\\slash"'),
        ("line\nfeed\ttab", '["line\\nfeed\\ttab"]', '"line\\nfeed\\ttab"'),
        ("${x} and %{y}", '["$${x} and %%{y}"]', '"${x} and %{y}"'),
        ("$ and %", '["$ and %"]', '"$ and %"'),
        ("naïve", '["naïve"]', '"na\\u00efve"'),
        ("ctl\x01", '["ctl\\u0001"]', '"ctl\\u0001"'),
        ("tag\U000e0001", '["tag\\U000e0001"]', '"tag\\udb40\\udc01"'),
    ],
)
def test_instance_keys(key: Any, suffix: str, key_json: str) -> None:
    """count/for_each keys: address suffix quoted as Terraform prints it, index_key as JSON."""
    (row,) = project(resource(name="k", instances=[{"index_key": key, "attributes": {}}])).resources
    assert row.address == "terraform_data.k" + suffix
    assert row.index_key == key_json
    assert json.loads(row.index_key) == key


def test_integral_float_key_is_an_integer() -> None:
    """An index_key of 1.0 is the integer key 1, as Terraform reads it."""
    (row,) = project(resource(name="k", instances=[{"index_key": 1.0}])).resources
    assert (row.address, row.index_key) == ("terraform_data.k[1]", "1")


def test_data_source_address() -> None:
    """Data sources get the data. prefix after the module path."""
    res = resource(mode="data", type="terraform_remote_state", name="o", module="module.m",
                   instances=[{"index_key": "k", "attributes": {}}])
    (row,) = project(res).resources
    assert row.mode == "data"
    assert row.address == 'module.m.data.terraform_remote_state.o["k"]'


@pytest.mark.parametrize("instances", [[], None, "absent"])
def test_zero_instance_resources_produce_no_rows(instances: Any) -> None:
    """A resource with empty, null or absent instances yields no resource row."""
    res = resource(name="zero")
    if instances == "absent":
        del res["instances"]
    else:
        res["instances"] = instances
    projection = project(res, resource(name="one"))
    assert [row.name for row in projection.resources] == ["one"]


def test_rows_keep_state_order() -> None:
    """Rows follow the order of resources and instances in the state."""
    projection = project(
        resource(name="b", instances=[{"index_key": 1}, {"index_key": 0}]),
        resource(name="a"),
    )
    assert [row.address for row in projection.resources] == [
        "terraform_data.b[1]", "terraform_data.b[0]", "terraform_data.a"]


def test_deposed_objects_and_deduplicated_dependencies() -> None:
    """Deposed objects are rows of their own; dependencies are deduplicated per address."""
    res = resource(name="cbd", instances=[
        {"index_key": "k", "attributes": {"v": 2}, "dependencies": ["terraform_data.x"]},
        {"index_key": "k", "deposed": "00000001", "attributes": {"v": 1},
         "dependencies": ["terraform_data.x", "terraform_data.y", "terraform_data.y"]},
    ])
    projection = project(res)
    assert [(r.address, r.deposed, r.attributes) for r in projection.resources] == [
        ('terraform_data.cbd["k"]', None, '{"v":2}'),
        ('terraform_data.cbd["k"]', "00000001", '{"v":1}'),
    ]
    assert [(d.address, d.depends_on) for d in projection.dependencies] == [
        ('terraform_data.cbd["k"]', "terraform_data.x"),
        ('terraform_data.cbd["k"]', "terraform_data.y"),
    ]


def test_empty_deposed_key_means_not_deposed() -> None:
    """deposed "" (Go's zero value) is a current object."""
    (row,) = project(resource(instances=[{"deposed": "", "attributes": {}}])).resources
    assert row.deposed is None


def test_missing_provider_and_attributes_default() -> None:
    """An instance without attributes projects {}; a resource without provider gets ""."""
    res = resource(instances=[{"schema_version": 0}])
    del res["provider"]
    (row,) = project(res).resources
    assert (row.provider, row.attributes) == ("", "{}")


def test_attributes_are_compact_sorted_json() -> None:
    """attributes is compact JSON with sorted keys (stable text for equal values)."""
    (row,) = project(resource(instances=[{"attributes": {"b": [1, {"y": 1, "x": 2}], "a": "é"}}])
                     ).resources
    assert row.attributes == '{"a":"\\u00e9","b":[1,{"x":2,"y":1}]}'


def test_unsafe_text_in_identifiers_is_replaced() -> None:
    """NUL and unpaired surrogates in names become U+FFFD; in keys, NUL is escaped."""
    raw = (b'{"version":4,"serial":1,"lineage":"l","resources":[{"mode":"managed",'
           b'"type":"t\\u0000","name":"n\\ud800","provider":"p","instances":'
           b'[{"index_key":"k\\u0000\\udfff"}]}]}')
    (row,) = parse_state(raw).projection.resources  # type: ignore[union-attr]
    assert row.type == "t\ufffd"
    assert row.name == "n\ufffd"
    assert row.address == 't\ufffd.n\ufffd["k\\u0000\ufffd"]'
    row.address.encode("utf-8")  # no lone surrogate left


def test_numbers_beyond_double_range() -> None:
    """A number too large for a double is projected as the string "Infinity"."""
    raw = (b'{"version":4,"serial":1,"lineage":"l","outputs":{"o":{"value":-1e400,'
           b'"type":"number"}},"resources":[{"mode":"managed","type":"t","name":"n",'
           b'"provider":"p","instances":[{"attributes":{"big":1e400,"n":[2]}}]}]}')
    projection = parse_state(raw).projection
    assert projection is not None
    assert projection.resources[0].attributes == '{"big":"Infinity","n":[2]}'
    assert projection.outputs[0].value == '"-Infinity"'


# ---------------------------------------------------------------------------
# outputs


def test_sensitive_output_value_is_never_projected() -> None:
    """A sensitive output keeps its type, but its value is None."""
    projection = project(outputs={
        "pw": {"value": {"password": SECRET}, "type": ["object", {"password": "string"}],
               "sensitive": True},
        "plain": {"value": [1, "two"], "type": ["tuple", ["number", "string"]]},
    })
    pw, plain = projection.outputs
    assert (pw.name, pw.value, pw.sensitive) == ("pw", None, True)
    assert pw.type == '["object",{"password":"string"}]'
    assert (plain.name, plain.value, plain.sensitive) == ("plain", '[1,"two"]', False)
    assert SECRET not in repr(projection)


def test_output_without_type_or_value() -> None:
    """An output without type gets type None; without value, the JSON null."""
    (row,) = project(outputs={"o": {}}).outputs
    assert (row.type, row.value, row.sensitive) == (None, "null", False)


# ---------------------------------------------------------------------------
# sensitive attribute paths


def test_redact_nested_object_leaf() -> None:
    """A get_attr path into nested objects redacts only that leaf."""
    attrs = {"conn": {"user": "u", "password": SECRET, "opts": {"tls": True}}, "id": "x"}
    result = attributes_of(attrs, [[attr("conn"), attr("password")]])
    assert result == {"conn": {"user": "u", "password": REDACTED, "opts": {"tls": True}},
                      "id": "x"}


def test_redact_list_element_and_map_value() -> None:
    """Index steps redact one list element (number) or one map value (string key)."""
    attrs = {"list": ["a", SECRET, "c"], "tags": {"env": "prod", "token": SECRET},
             "blocks": [{"k": "v", "secret": SECRET}]}
    result = attributes_of(attrs, [
        [attr("list"), index(1, "number")],
        [attr("tags"), index("token", "string")],
        [attr("blocks"), index(0, "number"), attr("secret")],
    ])
    assert result == {"list": ["a", REDACTED, "c"], "tags": {"env": "prod", "token": REDACTED},
                      "blocks": [{"k": "v", "secret": REDACTED}]}


def test_redact_whole_attribute() -> None:
    """A one-step path redacts the whole attribute value, whatever its shape."""
    result = attributes_of({"cfg": {"a": [SECRET]}, "id": "x"}, [[attr("cfg")]])
    assert result == {"cfg": REDACTED, "id": "x"}


def test_redact_looks_through_dynamic_value_wrappers() -> None:
    """Paths reach through {"value", "type"} wrappers of dynamic values, even nested ones."""
    inner = {"value": {"pw": SECRET, "ok": 1},
             "type": ["object", {"pw": "string", "ok": "number"}]}
    attrs = {"input": {"value": {"deep": inner, "l": [SECRET, "y"]},
                       "type": ["object", {"deep": "dynamic",
                                           "l": ["tuple", ["string", "string"]]}]}}
    result = attributes_of(attrs, [
        [attr("input"), attr("deep"), attr("pw")],
        [attr("input"), attr("l"), index(0, "number")],
    ])
    assert result["input"]["value"]["deep"]["value"] == {"pw": REDACTED, "ok": 1}
    assert result["input"]["value"]["l"] == [REDACTED, "y"]
    assert result["input"]["type"] == attrs["input"]["type"]


def test_plain_object_shaped_like_a_wrapper_is_not_unwrapped() -> None:
    """An ordinary {"type", "value"} object attribute is addressed by its own keys."""
    attrs = {"var": {"type": SECRET, "value": "shown"}}
    result = attributes_of(attrs, [[attr("var"), attr("type")]])
    assert result == {"var": {"type": REDACTED, "value": "shown"}}


def test_set_element_path_redacts_the_whole_set() -> None:
    """A set element is indexed by value, so the whole set is redacted."""
    attrs = {"ids": ["a", SECRET], "objs": [{"k": SECRET}], "other": "x"}
    result = attributes_of(attrs, [
        [attr("ids"), index(SECRET, "string")],
        [attr("objs"), index({"k": SECRET}, ["object", {"k": "string"}]), attr("k")],
    ])
    assert result == {"ids": REDACTED, "objs": REDACTED, "other": "x"}


def test_unknown_step_redacts_the_enclosing_value() -> None:
    """A step kind we do not know redacts the value it would have stepped into."""
    attrs = {"a": {"b": SECRET, "c": "x"}, "d": "y"}
    result = attributes_of(attrs, [[attr("a"), {"type": "future_step", "value": "b"}]])
    assert result == {"a": REDACTED, "d": "y"}


def test_type_mismatch_redacts_the_value_reached() -> None:
    """A path that goes deeper than the stored value redacts that value."""
    attrs = {"s": SECRET, "l": [SECRET], "keep": 1}
    result = attributes_of(attrs, [
        [attr("s"), attr("x")],
        [attr("l"), attr("x")],
    ])
    assert result == {"s": REDACTED, "l": REDACTED, "keep": 1}


def test_paths_to_absent_values_redact_nothing() -> None:
    """A path through null, a missing key or past a list's end changes nothing."""
    attrs = {"n": None, "m": {"a": 1}, "l": [1]}
    result = attributes_of(attrs, [
        [attr("n"), attr("x")],
        [attr("m"), attr("b")],
        [attr("l"), index(5, "number")],
        [attr("nope")],
    ])
    assert result == attrs


@pytest.mark.parametrize("sensitive", [
    [[]],  # an empty path: the whole object
    {"not": "a list"},
    "garbage",
    [{"not": "a path"}],
    [[{"type": "get_attr", "value": 3}]],
])
def test_unreadable_sensitive_attributes_redact_everything(sensitive: Any) -> None:
    """An empty path or an unreadable sensitive_attributes redacts every attribute value."""
    result = attributes_of({"a": SECRET, "b": {"c": SECRET}}, sensitive)
    assert result == {"a": REDACTED, "b": REDACTED}


@pytest.mark.parametrize("sensitive", [None, []])
def test_no_sensitive_attributes_redacts_nothing(sensitive: Any) -> None:
    """Null or empty sensitive_attributes leave the attributes as they are."""
    assert attributes_of({"a": "x"}, sensitive) == {"a": "x"}


def test_redacts_legacy_flat_attributes() -> None:
    """attributes_flat (pre-0.12 flatmap) is used when attributes is absent, and redacted."""
    instance = {
        "attributes_flat": {"id": "i", "tags.%": "2", "tags.env": "prod",
                            "tags.token": SECRET, "pw": SECRET, "list.#": "1",
                            "list.0": SECRET, "pwx": "kept"},
        "sensitive_attributes": [[attr("tags"), index("token", "string")], [attr("pw")],
                                 [attr("list"), index(0, "number")]],
    }
    (row,) = project(resource(instances=[instance])).resources
    assert json.loads(row.attributes) == {
        "id": "i", "tags.%": "2", "tags.env": "prod", "tags.token": REDACTED, "pw": REDACTED,
        "list.#": "1", "list.0": REDACTED, "pwx": "kept"}


def test_attributes_win_over_flat_attributes() -> None:
    """When both are present, attributes is projected (as Terraform reads it)."""
    (row,) = project(resource(instances=[{"attributes": {"a": 1},
                                          "attributes_flat": {"b": "2"}}])).resources
    assert row.attributes == '{"a":1}'


# ---------------------------------------------------------------------------
# OpenTofu encrypted envelope


def envelope(**fields: Any) -> bytes:
    doc: dict[str, Any] = {
        "serial": 9,
        "lineage": "lin-1",
        "meta": {"key_provider.pbkdf2.k": "eyJzYWx0Ijo="},
        "encrypted_data": "c2VjcmV0",
        "encryption_version": "v0",
    }
    doc.update(fields)
    return json.dumps({k: v for k, v in doc.items() if v is not ...}).encode()


def test_encrypted_envelope_is_accepted_unprojected() -> None:
    """An OpenTofu envelope gives serial and lineage and no projection."""
    parsed = parse_state(envelope())
    assert parsed == ParsedState(serial=9, lineage="lin-1", projection=None)
    assert parsed.encrypted


def test_encrypted_envelope_with_null_meta() -> None:
    """meta may be null (no key provider stored metadata)."""
    assert parse_state(envelope(meta=None)).encrypted


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (envelope(serial=...), "the encrypted state has no integer serial"),
        (envelope(serial=SECRET), "no integer serial (serial is a string)"),
        (envelope(lineage=...), "the encrypted state has no lineage"),
        (envelope(lineage=[SECRET]), "lineage must be a string, not an array"),
        (envelope(encrypted_data={"x": SECRET}), "encrypted_data of an encrypted state must be"),
        (envelope(encrypted_data=...), "encrypted_data of an encrypted state must be"),
        (envelope(encryption_version=""), "encryption_version of an encrypted state must"),
        (envelope(encryption_version=...), "encryption_version of an encrypted state must"),
        (envelope(meta=...), "the encrypted state has no meta object"),
        (envelope(meta=SECRET), "meta of an encrypted state must be a JSON object, not a string"),
    ],
)
def test_bad_encrypted_envelopes(raw: bytes, message: str) -> None:
    """A broken envelope is rejected naming the field, never echoing content."""
    with pytest.raises(InvalidState) as caught:
        parse_state(raw)
    assert message in caught.value.message
    assert SECRET not in str(caught.value)


# ---------------------------------------------------------------------------
# bad bodies


def state_with(resources: Any = None, **fields: Any) -> bytes:
    doc: dict[str, Any] = {"version": 4, "serial": 1, "lineage": "l", "resources": resources or []}
    doc.update(fields)
    return json.dumps({k: v for k, v in doc.items() if v is not ...}).encode()


BAD_BODIES = [
    ("empty", b"", "the body is empty"),
    ("whitespace", b" \r\n\t ", "the body is empty"),
    ("not json", b'{"version": 4, "serial": "' + SECRET.encode() + b'"',
     "the body is not valid JSON"),
    ("not json text", SECRET.encode(), "the body is not valid JSON (error at line 1, column 1)"),
    ("nan", b'{"version": 4, "serial": NaN, "lineage": "' + SECRET.encode() + b'"}',
     "the body is not valid JSON"),
    ("invalid utf-8", b'{"lineage": "' + SECRET.encode() + b'\xff\xfe"}',
     "the body is not valid UTF-8"),
    ("encoded surrogate", b'{"lineage": "\xed\xa0\x80' + SECRET.encode() + b'"}',
     "the body is not valid UTF-8"),
    ("utf-16", '{"version": 4}'.encode("utf-16"), "the body is not valid UTF-8"),
    ("bom", b"\xef\xbb\xbf" + state_with(lineage=SECRET), "byte order mark"),
    ("array", json.dumps([SECRET]).encode(), "the body must be a JSON object, not an array"),
    ("string", json.dumps(SECRET).encode(), "the body must be a JSON object, not a string"),
    ("null", b"null", "the body must be a JSON object, not null"),
    ("no version", state_with(version=..., lineage=SECRET), "the body has no state version"),
    ("version 3", state_with(version=3, lineage=SECRET),
     "state version 3 is not supported; Kilolock accepts Terraform state version 4"),
    ("version huge", state_with(version=10**30),
     "state version (out of range) is not supported"),
    ("version string", state_with(version="4"),
     "the state version must be the integer 4, not a string"),
    ("version float", state_with(version=4.0), "the state version must be the integer 4"),
    ("version bool", state_with(version=True), "must be the integer 4, not a boolean"),
    ("missing serial", state_with(serial=..., lineage=SECRET), "the state has no integer serial"),
    ("serial string", state_with(serial=SECRET), "no integer serial (serial is a string)"),
    ("serial numeric string", state_with(serial="3"), "no integer serial (serial is a string)"),
    ("serial bool", state_with(serial=True), "no integer serial (serial is a boolean)"),
    ("serial float", state_with(serial=1.5), "no integer serial (serial is a number"),
    ("serial integral float", state_with(serial=2.0), "no integer serial (serial is a number"),
    ("serial null", state_with(serial=None), "no integer serial (serial is null)"),
    ("serial negative", state_with(serial=-1), "serial must not be negative"),
    ("serial too big", state_with(serial=2**63), "serial is too large"),
    ("missing lineage", state_with(lineage=...), "the state has no lineage"),
    ("lineage number", state_with(lineage=5), "lineage must be a string, not an integer"),
    ("lineage object", state_with(lineage={"x": SECRET}),
     "lineage must be a string, not a JSON object"),
    ("resources not a list", state_with(resources={"r": SECRET}),
     "resources must be a list, not a JSON object"),
    ("resources string", state_with(resources=SECRET), "resources must be a list, not a string"),
    ("outputs not an object", state_with(outputs=[SECRET]),
     "outputs must be a JSON object, not an array"),
    ("resource not an object", state_with([SECRET]),
     "resources[0] must be a JSON object, not a string"),
    ("bad mode", state_with([resource(mode=SECRET)]),
     'resources[0].mode must be "managed" or "data"'),
    ("no type", state_with([resource(type=None)]), "resources[0] has no string type"),
    ("name not text", state_with([resource(name=[SECRET])]), "resources[0] has no string name"),
    ("module not text", state_with([resource(module={"m": SECRET})]),
     "resources[0].module must be a string, not a JSON object"),
    ("provider not text", state_with([resource(provider=1)]),
     "resources[0].provider must be a string, not an integer"),
    ("instances not a list", state_with([resource(), resource(instances={"i": SECRET})]),
     "resources[1].instances must be a list, not a JSON object"),
    ("instance not an object", state_with([resource(instances=[SECRET])]),
     "resources[0].instances[0] must be a JSON object, not a string"),
    ("index_key bool", state_with([resource(instances=[{"index_key": True}])]),
     "resources[0].instances[0].index_key must be an integer or a string, not a boolean"),
    ("index_key object", state_with([resource(instances=[{"index_key": {"k": SECRET}}])]),
     "index_key must be an integer or a string, not a JSON object"),
    ("index_key fraction", state_with([resource(instances=[{"index_key": 1.5}])]),
     "index_key must be an integer or a string"),
    ("deposed not text", state_with([resource(instances=[{}, {"deposed": 7}])]),
     "resources[0].instances[1].deposed must be a string, not an integer"),
    ("attributes not an object",
     state_with([resource(instances=[{"attributes": [SECRET]}])]),
     "resources[0].instances[0].attributes must be a JSON object, not an array"),
    ("flat attributes not an object",
     state_with([resource(instances=[{"attributes_flat": SECRET}])]),
     "resources[0].instances[0].attributes_flat must be a JSON object, not a string"),
    ("dependencies not strings",
     state_with([resource(instances=[{"dependencies": [{"d": SECRET}]}])]),
     "resources[0].instances[0].dependencies must be a list of strings"),
    ("dependencies not a list",
     state_with([resource(instances=[{"dependencies": SECRET}])]),
     "resources[0].instances[0].dependencies must be a list of strings"),
    ("output not an object", state_with(outputs={"a": {"value": 1}, SECRET: SECRET}),
     "outputs entry 1 (counting from 0) must be a JSON object, not a string"),
    ("output sensitive not bool",
     state_with(outputs={SECRET: {"value": SECRET, "sensitive": "true"}}),
     "outputs entry 0 (counting from 0): sensitive must be true or false, not a string"),
]


@pytest.mark.parametrize(("raw", "message"), [case[1:] for case in BAD_BODIES],
                         ids=[case[0] for case in BAD_BODIES])
def test_bad_bodies_are_rejected_without_echoing_content(raw: bytes, message: str) -> None:
    """Every malformed body raises InvalidState (400) naming the problem, not the content."""
    with pytest.raises(InvalidState) as caught:
        parse_state(raw)
    error = caught.value
    assert message in error.message
    assert (error.status, error.code) == (400, "invalid_state")
    assert SECRET not in str(error)
    assert SECRET not in repr(error.args)


@pytest.mark.parametrize("raw", [
    b"[" * 100_000 + SECRET.encode(),
    b'{"version": 4, "serial": 1, "lineage": "' + SECRET.encode() + b'", "outputs":'
    + b'{"o": {"value": ' + b"[" * 600 + b"1e400" + b"]" * 600 + b"}}}",
], ids=["unclosed", "600 levels"])
def test_a_body_too_deep_is_refused_with_its_rule(raw: bytes) -> None:
    """Nesting beyond the limit is InvalidText too_deep (400), not an
    internal error, whether or not the rest would parse; nothing echoed."""
    with pytest.raises(InvalidText) as caught:
        parse_state(raw)
    assert (caught.value.status, caught.value.code) == (400, "too_deep")
    assert SECRET not in str(caught.value)


def test_project_state_rejects_bad_shapes_directly() -> None:
    """project_state validates what it is given even without parse_state."""
    with pytest.raises(InvalidState, match="resources must be a list"):
        project_state({"resources": SECRET})


# ---------------------------------------------------------------------------
# accepted variations


def test_serial_bounds_accepted() -> None:
    """Serial 0 and the largest signed 64-bit serial are both accepted."""
    assert parse_state(state_with(serial=0)).serial == 0
    assert parse_state(state_with(serial=2**63 - 1)).serial == 2**63 - 1


@pytest.mark.parametrize("value", [..., None])
def test_absent_or_null_resources_and_outputs_are_empty(value: Any) -> None:
    """Absent or null resources/outputs (Go decodes null as empty) project to nothing."""
    raw = json.dumps({k: v for k, v in {"version": 4, "serial": 1, "lineage": "",
                                        "resources": value, "outputs": value}.items()
                      if v is not ...}).encode()
    parsed = parse_state(raw)
    assert (parsed.serial, parsed.lineage, parsed.projection) == (1, "", Projection())


def test_terraform_version_optional() -> None:
    """A missing or non-string terraform_version reads as None; extra keys are ignored."""
    assert parse_state(state_with(terraform_version=...)).terraform_version is None
    assert parse_state(state_with(terraform_version=1)).terraform_version is None
    assert parse_state(state_with(check_results=[{"x": 1}], extra=1)).projection == Projection()


# ---------------------------------------------------------------------------
# piecewise decoding of large bodies


@pytest.mark.parametrize(
    "text",
    [
        "{}",
        " { } ",
        '{"a": []}',
        '{"a":[ ]}',
        '{"resources": [{"x": 1}, {"y": [2, 3]}], "outputs": {"o": {"value": [1]}}}',
        '\n{\n  "version": 4,\n  "resources": [\n    {"a": "b"},\n    [1, [2]]\n  ]\n}\n',
        '{"k": 1, "k": [2]}',
        "[1, 2, 3]",
        '"just a string"',
        '{"nested": {"list": [1, 2]}, "list": ["a", {"b": null}, true, false, 1.5e3]}',
    ],
)
def test_piecewise_decoding_equals_json_loads(text: str) -> None:
    """Large bodies are decoded element by element with json.loads' exact result."""
    from kilolock.tfstate.parse import _decode_piecewise

    assert _decode_piecewise(text) == json.loads(text)


@pytest.mark.parametrize(
    "text",
    ['{"a": [1, 2', '{"a": [1 2]}', '{"a" 1}', '{a: 1}', '{"a": 1} x', '{"a": 1,}',
     '{"a": [1,]}', '{"a": NaN}', '{"a": 1', '{"a": [1]]'],
)
def test_piecewise_decoding_rejects_what_json_loads_rejects(text: str) -> None:
    """Malformed JSON fails the piecewise decoder as it fails json.loads."""
    from kilolock.tfstate.parse import _decode_piecewise

    with pytest.raises(ValueError):
        _decode_piecewise(text)


def test_large_state_is_parsed_piecewise_with_the_same_projection() -> None:
    """A state over the piecewise threshold parses to the same result as a small one."""
    from kilolock.tfstate import parse

    resources = [{"mode": "managed", "type": "terraform_data", "name": f"r{i}",
                  "provider": 'provider["terraform.io/builtin/terraform"]',
                  "instances": [{"attributes": {"id": str(i), "pad": "p" * 300},
                                 "sensitive_attributes": []}]} for i in range(4000)]
    body = json.dumps({"version": 4, "serial": 3, "lineage": "l", "resources": resources,
                       "outputs": {}}, indent=2).encode()
    assert len(body) > parse.PIECEWISE_THRESHOLD
    parsed = parse.parse_state(body)
    expected = parse.project_state(json.loads(body))
    assert parsed.serial == 3
    assert parsed.projection == expected
    truncated = body[: len(body) // 2]
    with pytest.raises(InvalidState, match="not valid JSON"):
        parse.parse_state(truncated)


def _resource(name: str, id_: object) -> str:
    return json.dumps({"mode": "managed", "type": "t", "name": name, "provider": "p",
                       "instances": [{"attributes": {"id": id_}, "dependencies": ["t.x"]}]})


_A, _B, _C = _resource("a", 1), _resource("b", 2), _resource("c", 3)


@pytest.mark.parametrize(
    ("text", "streams"),
    [
        ('{"version": 4, "serial": 1, "lineage": "l", "resources": [' + _A + ", " + _B + "]}",
         True),
        ('{"resources": [' + _A + '], "version": 4, "serial": 1, "lineage": "l"}', False),
        ('{"version": 4, "resources": [' + _A + '], "serial": 1, "lineage": "l",'
         ' "resources": [' + _B + ", " + _C + "]}", True),
        ('{"version": 4, "resources": [], "serial": 1, "lineage": "l"}', True),
        ('{"version": "4", "resources": [' + _A + '], "serial": 1, "lineage": "l"}', False),
        ('{"version": 4, "encrypted_data": "x", "resources": [' + _A + "]}", False),
    ],
)
def test_resources_projected_while_decoding_equal_the_whole_document(
        text: str, streams: bool) -> None:
    """A v4 state's resources projected element by element during the decode
    (version first) give project_state's rows for the whole document; other
    orders and envelopes keep the plain array; a repeated key: the last wins."""
    from kilolock.tfstate.parse import _decode_piecewise
    from kilolock.tfstate.projection import StreamedResources

    streamed = StreamedResources()
    doc = _decode_piecewise(text, streamed)
    assert (doc["resources"] is streamed.marker) is streams
    whole = json.loads(text)
    assert {k: v for k, v in doc.items() if k != "resources"} == {
        k: v for k, v in whole.items() if k != "resources"}
    if "encrypted_data" not in whole and whole.get("version") == 4:
        assert project_state(doc, streamed) == project_state(whole)


def _streamed_and_whole(text: str) -> tuple[Projection, Projection]:
    """The projection of a state decoded piecewise with its resources
    streamed (the large path: attributes of float-free resources encoded
    by msgspec), and of the whole document decoded at once."""
    from kilolock.tfstate.parse import JSON_DECODER, _decode_piecewise
    from kilolock.tfstate.projection import StreamedResources

    streamed = StreamedResources()
    doc = _decode_piecewise(text, streamed)
    assert doc["resources"] is streamed.marker
    return project_state(doc, streamed), project_state(JSON_DECODER.decode(text))


def _state_with(attributes: list[str], sensitive: str = "[]") -> str:
    instances = ", ".join(
        '{"attributes": ' + text + ', "sensitive_attributes": ' + sensitive + "}"
        for text in attributes)
    return ('{"version": 4, "serial": 1, "lineage": "l", "resources": [{"mode": "managed",'
            ' "type": "t", "name": "n", "provider": "p", "instances": [' + instances + "]}]}")


@pytest.mark.parametrize(
    "attributes",
    [
        ['{"id": 1, "n": [2, {"b": true, "a": null}]}'],
        ['{"f": 1.5}', '{"i": 10}', '{"e": 1e5, "z": -0.0}'],
        ['{"big": 1e400, "small": -1e400}', '{"tiny": 1e-400}'],
        ['{"int": 123456789012345678901234567890}'],
        [r'{"caf\u00e9": "\u00fc", "raw": "日本"}'],
        [r'{"nul": "a\u0000b", "lone": "\ud800", "pair": "\ud83d\ude00"}'],
        ['{"k": 1, "k": 2.5}', '{"k": 2.5, "k": 1}'],
        [r'{"ctl": "\u001f\u007f/\\\"", "sep": "\u2028"}'],
    ],
)
def test_streamed_resources_project_as_the_whole_document(attributes: list[str]) -> None:
    """Resources decoded while streaming, each encoded by msgspec when it
    holds no float and by compact_json otherwise, project exactly as the
    whole document does: floats, infinities, huge integers, non-ASCII text,
    NUL and lone surrogates, duplicate keys, escapes."""
    streamed, whole = _streamed_and_whole(_state_with(attributes))
    assert streamed == whole


def test_streamed_sensitive_paths_are_redacted_as_in_the_whole_document() -> None:
    streamed, whole = _streamed_and_whole(_state_with(
        ['{"password": "p", "n": 1}', '{"password": 2.5, "n": 1}'],
        '[[{"type": "get_attr", "value": "password"}]]'))
    assert streamed == whole
    assert REDACTED in streamed.resources[0].attributes


_LEAF = (st.none() | st.booleans() | st.integers() | st.text()
         | st.floats(allow_nan=False, allow_infinity=False))
_VALUES = st.recursive(_LEAF, lambda children: st.lists(children, max_size=4)
                       | st.dictionaries(st.text(max_size=8), children, max_size=4),
                       max_leaves=20)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=8), _VALUES, max_size=5), min_size=1,
                max_size=4))
def test_any_streamed_attributes_project_as_the_whole_document(
        attributes: list[dict[str, Any]]) -> None:
    """Any attributes (with or without floats, any text): the streamed
    projection equals the whole document's."""
    streamed, whole = _streamed_and_whole(_state_with([json.dumps(a) for a in attributes]))
    assert streamed == whole


def test_a_bad_resource_in_a_large_state_is_named_by_position() -> None:
    """Projecting while decoding still reports a malformed resource by its index."""
    from kilolock.tfstate import parse

    good = json.loads(_resource("a", "x" * 2000))
    resources = [good] * 700 + [{"mode": "managed", "type": 3}] + [good]
    body = json.dumps({"version": 4, "serial": 1, "lineage": "l",
                       "resources": resources}).encode()
    assert len(body) > parse.PIECEWISE_THRESHOLD
    with pytest.raises(InvalidState, match=r"resources\[700\] has no string type"):
        parse.parse_state(body)
