"""Path-segment rules: every name in a URL (a state's, a tenant's, a token's)
is one ordinary path segment, checked by L{validate_segment} in every tree.

twisted.web splits the path on C{/} before percent-decoding each segment, so
a C{%2F} arrives here as a C{/} inside one segment: it is refused, never
interpreted.
"""

from __future__ import annotations

from kilolock.core.errors import InvalidPath

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


def state_segments(text: str) -> tuple[str, ...] | None:
    """The validated segments of a state named in text (a query parameter):
    C{name} or C{workspace_id/env_public_id/state_name}.

    @return: the segments, or None when there are neither one nor three.
    @raise InvalidPath: when a segment breaks a rule.
    """
    segments = tuple(validate_segment(part.encode()) for part in text.split("/"))
    return segments if len(segments) in (1, 3) else None
