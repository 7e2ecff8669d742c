"""What the dashboard reads out of a stored version, once per process.

Versions never change, so a version's projection and the values it marks
sensitive (L{VersionRead}), and the fingerprint of each of its instance
objects (L{fingerprints}, for a resource's history), are kept in bounded
caches of the L{kilolock.web.ui.base.Dashboard}, by the version's number and
digest.  Parsing runs in a thread for large versions (the reactor keeps
serving).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import msgspec
from attrs import frozen

from kilolock.core.errors import (
    EncryptedState,
    InvalidText,
    VersionNotFound,
    VersionPruned,
    VersionTooDeep,
)
from kilolock.core.model import Projection, StateKey, StateVersion
from kilolock.core.text import clean_text
from kilolock.tfstate.diff import load_document
from kilolock.tfstate.projection import keyed_address, project_state, resource_base
from kilolock.web.body import in_thread_if_large
from kilolock.web.lane import StateLane
from kilolock.web.ui.secrets import sensitive_values_of

#: Parsed versions kept (each holds its rows: a few MB for thousands of
#: resources).
PARSED_KEPT = 6
#: Versions whose fingerprints are kept (a digest per instance object).
FINGERPRINTS_KEPT = 400

_TOO_DEEP = "this version nests too deeply for the server to read"

#: A cache key: the tenant, the state's path, the version's number and digest.
CacheKey = tuple[str, str, int, str]


@frozen
class VersionRead:
    """A version as the pages show it: its projection (None for an
    OpenTofu encrypted envelope) and the values it marks sensitive."""

    version: StateVersion
    projection: Projection | None
    secrets: frozenset[str]


def _parse(raw: bytes) -> tuple[Projection | None, frozenset[str]]:
    try:
        doc = load_document(raw)
    except EncryptedState:
        return None, frozenset()
    try:
        return project_state(doc), sensitive_values_of(doc)
    except (RecursionError, InvalidText):
        raise VersionTooDeep(_TOO_DEEP) from None


#: A fingerprint's key: C{("resource", address, deposed key)} for an
#: instance object, C{("output", name, None)} for an output.
FingerprintKey = tuple[str, str, str | None]


def _fingerprints(raw: bytes) -> dict[FingerprintKey, int] | None:
    """A digest of each instance object's attributes (and of each output's
    value and sensitivity): equal digests, no difference the diff would
    report (L{kilolock.tfstate.diff}).  Digests are Python's own string
    hashes: they are compared within this process only.  None: an OpenTofu
    encrypted envelope, nothing in it readable."""
    try:
        doc = load_document(raw)
    except EncryptedState:
        return None
    found: dict[FingerprintKey, int] = {}
    for resource in doc.get("resources") or []:
        if not isinstance(resource, dict):
            continue
        try:
            base = resource_base(resource)
        except ValueError:
            continue
        for instance in resource.get("instances") or []:
            if not isinstance(instance, dict):
                continue
            try:
                address = keyed_address(base, instance)
            except ValueError:
                continue
            deposed = instance.get("deposed")
            attributes = instance.get("attributes")
            if attributes is None:
                attributes = instance.get("attributes_flat")
            found[("resource", address, clean_text(deposed)
                   if isinstance(deposed, str) and deposed else None)] = hash(
                _encode(attributes if attributes is not None else {}))
    for name, output in (doc.get("outputs") or {}).items():
        if isinstance(output, dict):
            found[("output", name, None)] = hash(_encode([output.get("value"),
                                                          bool(output.get("sensitive"))]))
    return found


def _encode(value: Any) -> bytes:
    """C{value} as JSON text with sorted keys: equal for equal values of
    equal JSON types (C{1}, C{1.0} and C{true} differ), whatever the order
    of their keys.  msgspec's encoder; the standard library's for text
    UTF-8 cannot hold (an unpaired surrogate)."""
    try:
        return msgspec.json.encode(value, order="sorted")
    except (UnicodeEncodeError, TypeError, ValueError):
        return json.dumps(value, sort_keys=True, ensure_ascii=False).encode(
            "utf-8", "surrogatepass")


def _remember(cache: OrderedDict[CacheKey, Any], key: CacheKey, value: Any, kept: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > kept:
        cache.popitem(last=False)


def _cache_key(key: StateKey, version: StateVersion) -> CacheKey:
    return (key.tenant, key.path, version.number, version.sha256)


async def read_version(lane: StateLane, cache: OrderedDict[CacheKey, Any], key: StateKey,
                       version: StateVersion) -> VersionRead:
    """Version C{version} of the state at C{key}, parsed (once per process).

    @raise VersionNotFound: its bytes are gone (the store raises its own
        error for a tombstone).
    """
    cache_key = _cache_key(key, version)
    if cache_key in cache:
        cache.move_to_end(cache_key)
        found: VersionRead = cache[cache_key]
        return found
    raw = await lane.store.read_version(key, version.number)
    if raw is None:
        raise VersionNotFound(f"the state has no version {version.number}")
    projection, secrets = await in_thread_if_large(lane.reactor, len(raw), _parse, raw)
    read = VersionRead(version, projection, secrets)
    _remember(cache, cache_key, read, PARSED_KEPT)
    return read


async def fingerprints(lane: StateLane, cache: OrderedDict[CacheKey, Any], key: StateKey,
                       version: StateVersion) -> dict[FingerprintKey, int] | None:
    """The fingerprints of version C{version} (L{_fingerprints}), once per
    process; None for a version unreadable (encrypted, or only its
    tombstone left)."""
    cache_key = _cache_key(key, version)
    if cache_key in cache:
        cache.move_to_end(cache_key)
        known: dict[FingerprintKey, int] | None = cache[cache_key]
        return known
    try:
        raw = await lane.store.read_version(key, version.number)
    except (VersionNotFound, VersionPruned):
        raw = None
    found = None if raw is None else await in_thread_if_large(lane.reactor, len(raw),
                                                               _fingerprints, raw)
    _remember(cache, cache_key, found, FINGERPRINTS_KEPT)
    return found
