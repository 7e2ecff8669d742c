"""Shared fixtures.  Fixture families live in their own modules, loaded here."""

from __future__ import annotations

pytest_plugins = [
    "fixtures_postgres",
    "fixtures_server",
    "pytester",
]
