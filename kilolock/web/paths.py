"""Path-segment rules for state names (contract "Addressing", ADR 0018 rule 1).

twisted.web splits the path on C{/} before percent-decoding each segment, so
a C{%2F} arrives here as a C{/} inside one segment: it is refused, never
interpreted.
"""

from __future__ import annotations

from typing import Any

from attrs import frozen

from kilolock.errors import InvalidPath

MAX_SEGMENT_BYTES = 255

#: The suffix segment of the GitLab-style lock alias C{/v1/states/.../lock}.
LOCK_SUFFIX = "lock"


def validate_segment(raw: bytes) -> str:
    """Return the decoded segment as text, or raise L{InvalidPath} naming the rule."""
    if not raw:
        raise InvalidPath("empty_segment", "a path segment is empty (doubled or trailing '/')")
    if raw in (b".", b".."):
        raise InvalidPath("dot_segment", "'.' and '..' are not allowed as path segments")
    if b"/" in raw:
        raise InvalidPath("encoded_slash",
                          "a path segment contains '/' (percent-encoded as %2F); names travel"
                          " as ordinary path segments and never contain '/'")
    if b"\\" in raw:
        raise InvalidPath("backslash", "a path segment contains '\\'")
    if len(raw) > MAX_SEGMENT_BYTES:
        raise InvalidPath("segment_too_long",
                          f"a path segment is longer than {MAX_SEGMENT_BYTES} bytes of UTF-8")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidPath("invalid_utf8", "a path segment is not valid UTF-8") from None
    if any(ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F for char in text):
        raise InvalidPath("control_character",
                          "a path segment contains NUL or another control character")
    return text


@frozen
class StateAddress:
    """The validated segments of a state URL: one (C{name}) or three
    (C{workspace_id/env_public_id/state_name})."""

    segments: tuple[str, ...]

    @property
    def hosted(self) -> bool:
        return len(self.segments) == 3

    @property
    def path(self) -> str:
        return "/".join(self.segments)


def parse_state_segments(raw_segments: list[bytes],
                         allow_lock_suffix: bool) -> tuple[StateAddress, bool] | None:
    """Validate every segment and split off a trailing C{lock} alias segment.

    @return: C{(address, is_lock_alias)}, or None when the number of segments
        fits no route (the caller answers 404).
    @raise InvalidPath: when any segment breaks a rule.
    """
    segments = [validate_segment(raw) for raw in raw_segments]
    lock_alias = False
    if allow_lock_suffix and len(segments) in (2, 4) and segments[-1] == LOCK_SUFFIX:
        segments.pop()
        lock_alias = True
    if len(segments) not in (1, 3):
        return None
    return StateAddress(tuple(segments)), lock_alias


def consume_segments(path: bytes, request: Any) -> list[bytes]:
    """Take C{path} and every segment after it off the request's C{postpath}
    (a collection resource resolves all of them at once).

    @return: the raw (percent-decoded, not yet validated) segments.
    """
    remaining: list[bytes] = request.postpath or []
    if request.prepath is not None:
        request.prepath.extend(remaining)
    request.postpath = []
    return [path, *remaining]
