"""Workspace tags: merging added tags into a workspace's, and the filters of
a workspace listing."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence

from attrs import frozen

from kilolock.tfe.errors import InvalidAttribute
from kilolock.tfe.model import Tag, TFEWorkspace
from kilolock.tfe.names import MAX_TAGS


def merge_tags(existing: Sequence[Tag], added: Iterable[Tag]) -> tuple[Tag, ...]:
    """C{existing} with C{added} merged in, by key, in order of first
    appearance.  A tag with a value sets that key's value; a plain tag (no
    value) adds its key and never clears the value a key already has.

    @raise InvalidAttribute: when the result would have more than L{MAX_TAGS}.
    """
    merged = {tag.key: tag.value for tag in existing}
    for tag in added:
        if tag.value or tag.key not in merged:
            merged[tag.key] = tag.value
    if len(merged) > MAX_TAGS:
        raise InvalidAttribute(f"a workspace has at most {MAX_TAGS} tags", "/data")
    return tuple(Tag(key, value) for key, value in merged.items())


def tag_detail(tags: Sequence[Tag]) -> list[str]:
    """Tags as an audit event's detail records them (C{key} or C{key=value})."""
    return [tag.key + (f"={tag.value}" if tag.value else "") for tag in tags]


@frozen
class WorkspaceFilter:
    """What a listing keeps: C{search[name]} (a substring), C{search[tags]}
    (keys that must all be present), C{search[exclude-tags]} (keys that must
    all be absent), C{search[wildcard-name]} (C{*} matches any run) and
    C{filter[tagged]} (key/value bindings that must all be present; an
    empty value matches any value of the key)."""

    name: str | None = None
    tags: tuple[str, ...] = ()
    exclude_tags: tuple[str, ...] = ()
    wildcard: str | None = None
    bindings: tuple[Tag, ...] = ()

    def keeps(self, workspace: TFEWorkspace) -> bool:
        keys = {tag.key for tag in workspace.tags}
        values = {(tag.key, tag.value) for tag in workspace.tags}
        return ((self.name is None or self.name.lower() in workspace.name.lower())
                and all(tag in keys for tag in self.tags)
                and not any(tag in keys for tag in self.exclude_tags)
                and (self.wildcard is None
                     or fnmatch.fnmatchcase(workspace.name, _glob(self.wildcard)))
                and all((binding.key, binding.value) in values if binding.value
                        else binding.key in keys for binding in self.bindings))


def _glob(pattern: str) -> str:
    """A wildcard-name pattern as an fnmatch pattern where only C{*} is special."""
    return "".join("*" if char == "*" else f"[{char}]" if char in "?[]" else char
                   for char in pattern)
