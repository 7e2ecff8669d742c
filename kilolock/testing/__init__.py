"""Kilolock for other projects' tests: the pytest plugin and its server."""
