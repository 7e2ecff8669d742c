"""Claim patterns and grant templates: small, pure and total.

A pattern is a string where C{*} matches any run of characters except C{/},
C{**} any run including C{/}, and C{?} one character except C{/}; every other
character stands for itself, and the whole value must match.  So
C{refs/heads/*} matches C{refs/heads/main} but not C{refs/heads/feature/x}
(write C{refs/heads/**} for that), and C{repo:octo-org/*} does not match
C{repo:octo-org/app:ref:refs/heads/main} (a C{/} follows the repository).
There are no character classes and no escapes: a claim value containing C{*}
can only be matched by a wildcard.

A template is a string with C{{claim}} placeholders, rendered with the
claims of a verified token.  A rendered value must be a safe name segment
(see L{SAFE_VALUE}): a claim can never inject C{/}, C{..} or a wildcard into
a grant.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache

#: The characters with a meaning in a pattern.
WILDCARDS = frozenset("*?")
#: What a claim value must look like to be put into a template.
SAFE_VALUE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
#: A placeholder in a template: C{{claim_name}}.
PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
#: What a claim name (and so a placeholder) may be.
CLAIM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,127}")


@lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The regular expression matching exactly what C{pattern} matches."""
    parts: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**", index):
            parts.append(".*")
            index += 2
            continue
        if char == "*":
            parts.append("[^/]*")
        elif char == "?":
            parts.append("[^/]")
        else:
            parts.append(re.escape(char))
        index += 1
    return re.compile("".join(parts), re.DOTALL)


def matches(pattern: str, value: str) -> bool:
    """Whether the whole of C{value} matches C{pattern}."""
    if not WILDCARDS.intersection(pattern):
        return pattern == value
    return compile_pattern(pattern).fullmatch(value) is not None


def is_wildcard_only(pattern: str) -> bool:
    """Whether C{pattern} has no literal character, so it constrains nothing
    but (at most) the length or the absence of C{/}: C{""} is literal."""
    return bool(pattern) and set(pattern) <= WILDCARDS


def placeholders(template: str) -> tuple[str, ...]:
    """The claim names a template refers to, in order, each once.

    @raise ValueError: a brace that is not part of a C{{name}} placeholder,
        or a placeholder that is not a valid claim name."""
    names: list[str] = []
    rest = PLACEHOLDER.sub("", template)
    if "{" in rest or "}" in rest:
        raise ValueError("has a stray brace (placeholders are written {claim})")
    for name in PLACEHOLDER.findall(template):
        if not CLAIM_NAME.fullmatch(name):
            raise ValueError(f"has the placeholder {{{name}}}, which is not a claim name")
        if name not in names:
            names.append(name)
    return tuple(names)


class TemplateError(Exception):
    """A template could not be rendered with a token's claims.

    @ivar claim: the claim that was missing or unsafe."""

    def __init__(self, claim: str, problem: str) -> None:
        super().__init__(f"claim {claim!r} {problem}")
        self.claim = claim


def render(template: str, values: Mapping[str, str]) -> str:
    """C{template} with each placeholder replaced by its claim's value.

    @param values: claim values as text (see
        L{kilolock.auth.oidc.claims.claim_text}).
    @raise TemplateError: a placeholder's claim is missing, or its value is
        not a safe segment (L{SAFE_VALUE}: so never C{/}, a wildcard, C{.}
        or C{..})."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        value = values.get(name)
        if value is None:
            raise TemplateError(name, "is missing from the token")
        if not SAFE_VALUE.fullmatch(value):
            raise TemplateError(name, "is not a safe name (letters, digits, _ . -)")
        return value

    return PLACEHOLDER.sub(substitute, template)
