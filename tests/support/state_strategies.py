"""Hypothesis strategies for Terraform v4 states and their next versions."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from tests.support.stub_client import state_body

#: Attribute values as providers write them: strings (ids, ARNs, unicode),
#: numbers, booleans, null, and small nested lists and maps.
_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**53, 2**53),
                  st.text(max_size=40), st.from_regex(r"[a-z]{2,4}-[0-9a-f]{8,17}", fullmatch=True))
values = st.recursive(_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=12)
attributes = st.dictionaries(st.from_regex(r"[a-z_]{1,16}", fullmatch=True), values,
                             min_size=1, max_size=8)


def _resource(index: int, attrs: dict[str, Any]) -> dict[str, Any]:
    return {"mode": "managed", "type": "terraform_data", "name": f"r{index}",
            "provider": 'provider["terraform.io/builtin/terraform"]',
            "instances": [{"schema_version": 0, "attributes": attrs,
                           "sensitive_attributes": []}]}


@st.composite
def histories(draw: st.DrawFn, max_resources: int = 12) -> tuple[bytes, bytes]:
    """A v4 state and its next version: the serial one higher and some
    resources' attributes replaced (possibly none, possibly all)."""
    first = draw(st.lists(attributes, min_size=1, max_size=max_resources))
    changes = draw(st.dictionaries(st.integers(0, len(first) - 1), attributes,
                                   max_size=len(first)))
    second = [changes.get(index, attrs) for index, attrs in enumerate(first)]
    serial = draw(st.integers(1, 10_000))
    return (state_body(serial, resources=[_resource(i, a) for i, a in enumerate(first)]),
            state_body(serial + 1, resources=[_resource(i, a) for i, a in enumerate(second)]))


# -- states of modules, count and for_each, deposed objects, dependencies --------
#
# For the reservation merge: a state is modelled as its instance objects by
# unit (module, mode, type, name, key), written as Terraform writes it.

PROVIDER = 'provider["terraform.io/builtin/terraform"]'
LINEAGE = "5a1f0c2e-0000-4000-8000-00000000beef"

#: (module, mode, type, name, key): an instance of a resource.
UnitId = tuple[str, str, str, str, Any]
#: An instance object: (deposed key or "", its value, its dependencies).
StateObject = tuple[str, Any, tuple[str, ...]]
#: A modelled state: every instance's objects (the current one first).
Model = dict[UnitId, tuple[StateObject, ...]]


def instance_object(value: Any, key: Any = None, *, deposed: str = "",
                    status: str = "", dependencies: tuple[str, ...] = (),
                    name: str = "x") -> dict[str, Any]:
    """An instance object with C{terraform_data}'s attributes, its fields in
    Terraform's order (statefile/version4.go, instanceObjectStateV4)."""
    item: dict[str, Any] = {}
    if key is not None:
        item["index_key"] = key
    if status:
        item["status"] = status
    if deposed:
        item["deposed"] = deposed
    item["schema_version"] = 0
    item["attributes"] = {"id": f"{name}-{key}-{deposed}", "input": value, "output": value,
                          "triggers_replace": None}
    item["sensitive_attributes"] = []
    item["identity_schema_version"] = 0
    if dependencies:
        item["dependencies"] = list(dependencies)
    return item


def resource_document(module: str, mode: str, type_: str, name: str,
                      instances: list[dict[str, Any]],
                      provider: str = PROVIDER) -> dict[str, Any]:
    """A resource, its fields in Terraform's order (resourceStateV4)."""
    document: dict[str, Any] = {"module": module} if module else {}
    document.update(mode=mode, type=type_, name=name, provider=provider, instances=instances)
    return document


def _instance_order(item: dict[str, Any]) -> tuple[int, int, str, str]:
    key, deposed = item.get("index_key"), item.get("deposed", "")
    if key is None:
        return (0, 0, "", deposed)
    if isinstance(key, int):
        return (1, key, "", deposed)
    return (2, 0, key, deposed)


def state_document(resources: list[dict[str, Any]], *, serial: int = 1,
                   lineage: str = LINEAGE, outputs: dict[str, Any] | None = None,
                   check_results: Any = None,
                   terraform_version: str = "1.15.5") -> dict[str, Any]:
    """A v4 state document in Terraform's order: resources by module, mode,
    type, name; instances by key, the current object before deposed ones."""
    ordered = sorted(resources, key=lambda r: (r.get("module", ""), r["mode"], r["type"],
                                               r["name"]))
    for resource in ordered:
        resource["instances"] = sorted(resource["instances"], key=_instance_order)
    return {"version": 4, "terraform_version": terraform_version, "serial": serial,
            "lineage": lineage, "outputs": outputs or {}, "resources": ordered,
            "check_results": check_results}


def terraform_bytes(document: dict[str, Any]) -> bytes:
    """A state document as Terraform writes it (Go's MarshalIndent layout)."""
    return json.dumps(document, indent=2, ensure_ascii=False).encode() + b"\n"


def model_document(model: Model, *, serial: int = 1, outputs: dict[str, Any] | None = None,
                   lineage: str = LINEAGE) -> dict[str, Any]:
    """The state document of a modelled state."""
    resources: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for (module, mode, type_, name, key), objects in model.items():
        items = resources.setdefault((module, mode, type_, name), [])
        for deposed, value, dependencies in objects:
            items.append(instance_object(value, key, deposed=deposed,
                                         dependencies=dependencies, name=name))
    return state_document([resource_document(*header, items)
                           for header, items in resources.items()],
                          serial=serial, outputs=outputs, lineage=lineage)


def model_bytes(model: Model, *, serial: int = 1,
                outputs: dict[str, Any] | None = None) -> bytes:
    return terraform_bytes(model_document(model, serial=serial, outputs=outputs))


#: The resources a modelled state may have: (module, mode, type, name) and
#: the keys of its instances (None: no count nor for_each).
MODEL_RESOURCES: dict[tuple[str, str, str, str], tuple[Any, ...]] = {
    ("", "managed", "terraform_data", "a"): (None,),
    ("", "managed", "terraform_data", "b"): (None,),
    ("", "managed", "terraform_data", "n"): ("x", "y", "z"),
    ("", "managed", "terraform_data", "c"): (0, 1, 2),
    ("", "data", "terraform_remote_state", "ext"): (None,),
    ("module.m", "managed", "terraform_data", "a"): (None,),
    ('module.e["p"]', "managed", "terraform_data", "r"): (None,),
    ('module.e["q"]', "managed", "terraform_data", "r"): (None,),
    ('module.e["p"].module.inner', "managed", "terraform_data", "deep"): (0,),
}

#: Every instance a modelled state may have.
MODEL_UNITS: tuple[UnitId, ...] = tuple(
    (*resource, key) for resource, keys in MODEL_RESOURCES.items() for key in keys)

#: What the dependencies of an object may name (configuration addresses).
_CONFIG_ADDRESSES = ("terraform_data.a", "terraform_data.b", "module.m.terraform_data.a",
                     "module.e.terraform_data.r", "data.terraform_remote_state.ext")

_model_values = st.one_of(st.from_regex(r"v[0-9]{1,3}", fullmatch=True),
                          st.integers(0, 1000), st.dictionaries(
                              st.sampled_from(["k", "l"]), st.integers(0, 9), max_size=2))
_deposed_keys = st.sampled_from(["0a1b2c3d", "f35c23ed"])


@st.composite
def model_objects(draw: st.DrawFn, unit: UnitId) -> tuple[StateObject, ...]:
    """An instance's objects: a current one (rarely none) and at times a
    deposed one."""
    managed = unit[1] == "managed"
    dependencies = tuple(draw(st.lists(st.sampled_from(_CONFIG_ADDRESSES), max_size=2,
                                       unique=True))) if managed else ()
    objects: list[StateObject] = []
    if not managed or draw(st.integers(0, 9)) > 0:
        objects.append(("", draw(_model_values), dependencies))
    if managed and (not objects or draw(st.integers(0, 9)) == 0):
        objects.append((draw(_deposed_keys), draw(_model_values), dependencies))
    return tuple(objects)


@st.composite
def models(draw: st.DrawFn) -> Model:
    """A modelled state: some of L{MODEL_UNITS}, each with its objects."""
    units = draw(st.lists(st.sampled_from(MODEL_UNITS), unique=True, max_size=len(MODEL_UNITS)))
    return {unit: draw(model_objects(unit)) for unit in sorted(units, key=repr)}


@st.composite
def edits(draw: st.DrawFn, model: Model, units: tuple[UnitId, ...]) -> Model:
    """C{model} with each of C{units} changed: given new objects, removed,
    or created."""
    edited = dict(model)
    for unit in units:
        if unit in edited and draw(st.integers(0, 3)) == 0:
            del edited[unit]
            continue
        new = draw(model_objects(unit))
        if new == edited.get(unit):
            new = (("", f"changed-{len(edited)}", ()),)
        edited[unit] = new
    return edited


def model_outputs(model: Model) -> dict[str, Any]:
    """Outputs as Terraform writes them, computed from a modelled state: an
    object by key of C{terraform_data.n} (merged by key when two views
    change two keys) and a list of C{terraform_data.c} (atomic)."""
    by_key = {unit[4]: str(objects[0][1]) for unit, objects in model.items()
              if unit[:4] == ("", "managed", "terraform_data", "n") and objects
              and not objects[0][0]}
    listed = [str(objects[0][1]) for unit, objects in sorted(
        ((unit, objects) for unit, objects in model.items()
         if unit[:4] == ("", "managed", "terraform_data", "c")), key=lambda pair: pair[0][4])
        if objects and not objects[0][0]]
    return {"n": {"value": by_key, "type": ["object", {key: "string" for key in by_key}]},
            "c": {"value": listed, "type": ["tuple", ["string"] * len(listed)]}}
