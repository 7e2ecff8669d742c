"""Shared fixtures.  Fixture families live in their own modules under
tests/support/, loaded here; fixtures of one folder's tests live in that
folder's conftest.py."""

from __future__ import annotations

pytest_plugins = [
    "tests.support.fixtures_postgres",
    "tests.support.fixtures_server",
    "tests.support.fixtures_nginx",
    "pytester",
]
