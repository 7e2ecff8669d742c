"""Where the tests find the repository's files."""

from __future__ import annotations

from pathlib import Path

#: The repository's root.
REPO = Path(__file__).resolve().parents[2]
#: The tests' own folder.
TESTS = REPO / "tests"
#: The sample states the tests read (tests/data/states).
SAMPLE_STATES = TESTS / "data" / "states"
#: The documentation.
DOCS = REPO / "docs"
