"""Kilolock: a Terraform/OpenTofu remote state server on Twisted."""

__version__ = "0.1.0"
