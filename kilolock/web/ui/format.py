"""How the dashboard words values: times, ages, sizes, who did something.
Pure functions; the template engine escapes what they return."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from kilolock.core.events import AuditEvent
from kilolock.core.model import HeldLock
from kilolock.web.native.documents import event_detail

#: A lock held longer than this is shown as stale.
STALE_LOCK_SECONDS = 3600

#: Detail keys that say what an event did rather than who did it.
_NOT_IDENTITY = frozenset({"version", "size", "versions", "terraform_version", "client",
                           "who", "operation", "restored_version", "via"})


def when(moment: datetime | None) -> str:
    return "—" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


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
    return lock_age(lock, now) > STALE_LOCK_SECONDS


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


def json_text(text: str | None) -> str:
    """Compact JSON text shown readably (indented)."""
    if text is None:
        return "—"
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=True)
    except ValueError:
        return text
