"""Retention: the policy rule, its values and the background service."""
