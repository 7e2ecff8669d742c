"""How the dashboard words values: times, ages, sizes, counts, who did
something, providers and types as Terraform writes them.  Pure functions;
the template engine escapes what they return."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from kilolock.core.events import AuditEvent
from kilolock.core.model import HeldLock
from kilolock.rules import stale
from kilolock.web.native.documents import event_detail

#: Detail keys that say what an event did rather than who did it.
_NOT_IDENTITY = frozenset({"version", "size", "versions", "terraform_version", "client",
                           "who", "operation", "restored_version", "via"})


def when(moment: datetime | None) -> str:
    return "—" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def plural(count: int, singular: str, many: str | None = None) -> str:
    """C{1 state}, C{2 states}, C{0 states} (C{many}: when not C{singular} + s)."""
    return f"{count:,} {noun(count, singular, many)}"


def noun(count: int, singular: str, many: str | None = None) -> str:
    """The word of L{plural} alone: C{state} for 1, C{states} otherwise."""
    return singular if count == 1 else (many or singular + "s")


def ago(moment: datetime | None, now: datetime) -> str:
    """How long before C{now}: C{just now}, C{5 min ago}, C{3 h ago},
    C{2 days ago} (C{in the future} for a clock ahead of this one)."""
    if moment is None:
        return "—"
    seconds = (now - moment).total_seconds()
    if seconds < -60:
        return "in the future"
    if seconds < 60:
        return "just now"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min ago"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} h ago"
    days = hours // 24
    if days < 60:
        return f"{days} days ago"
    return f"{days // 30} months ago" if days < 730 else f"{days // 365} years ago"


def age(seconds: float) -> str:
    """C{3725} → C{1 h 2 min}."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, _ = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} days"


def lock_age(lock: HeldLock, now: datetime) -> float:
    return (now - lock.acquired_at).total_seconds()


def is_stale(lock: HeldLock, now: datetime) -> bool:
    """Whether the lock is stale (L{kilolock.rules.stale})."""
    return stale.is_stale(lock, now)


def size(count: int | None) -> str:
    if count is None:
        return "—"
    if count < 1024:
        return f"{count} B"
    if count < 1024 * 1024:
        return f"{count / 1024:.1f} KiB"
    return f"{count / (1024 * 1024):.1f} MiB"


#: An event's detail as a JSON object (empty when it is not one).
detail_of = event_detail


def identity(event: AuditEvent) -> str:
    """Who did it: the event's principal, and whatever its detail says about
    the caller (a token id, a CI identity's claims...), key by key."""
    extra = [f"{key}={_scalar(value)}" for key, value in sorted(detail_of(event).items())
             if key not in _NOT_IDENTITY]
    return event.principal + (f" ({', '.join(extra)})" if extra else "")


def client(event: AuditEvent | None) -> str:
    """The client address the event recorded, or a dash."""
    value = detail_of(event).get("client")
    return value if isinstance(value, str) else "—"


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


_PROVIDER = re.compile(r'^provider\["([^"\\]+)"\](?:\.([A-Za-z0-9_-]+))?$')
_DEFAULT_REGISTRY = "registry.terraform.io/"


def provider(text: str) -> str:
    """A provider as Terraform's users name it: C{hashicorp/aws} for
    C{provider["registry.terraform.io/hashicorp/aws"]}, C{terraform} for the
    built-in C{provider["terraform.io/builtin/terraform"]}, the host kept
    for another registry, an alias after it (C{hashicorp/aws.west}); text
    of another shape as it is."""
    found = _PROVIDER.match(text)
    if found is None:
        return text
    source, alias = found.groups()
    if source.startswith("terraform.io/builtin/"):
        name = source.removeprefix("terraform.io/builtin/")
    elif source.startswith(_DEFAULT_REGISTRY):
        name = source.removeprefix(_DEFAULT_REGISTRY)
    else:
        name = source
    return f"{name}.{alias}" if alias else name


def cty_type(text: str | None) -> str:
    """A type as Terraform writes it (C{tuple([string, string])},
    C{object({name = string})}, C{map(number)}) from the JSON of the state
    (C{["tuple", ["string", "string"]]}); C{—} when absent."""
    if text is None:
        return "—"
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return _type(value, 0)


def _type(value: Any, depth: int) -> str:
    if depth > 64:
        return "…"
    if isinstance(value, str):
        return value
    if isinstance(value, list) and len(value) >= 2 and isinstance(value[0], str):
        kind, inner = value[0], value[1]
        if kind in ("list", "set", "map"):
            return f"{kind}({_type(inner, depth + 1)})"
        if kind == "tuple" and isinstance(inner, list):
            return "tuple([" + ", ".join(_type(item, depth + 1) for item in inner) + "])"
        if kind == "object" and isinstance(inner, dict):
            optional = set(value[2]) if len(value) > 2 and isinstance(value[2], list) else set()
            members = []
            for name in sorted(inner):
                member = _type(inner[name], depth + 1)
                members.append(f"{name} = optional({member})" if name in optional
                               else f"{name} = {member}")
            return "object({" + ", ".join(members) + "})"
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
