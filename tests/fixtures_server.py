"""Fixtures that start real Kilolock servers."""
