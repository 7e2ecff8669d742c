"""Terraform state documents, read and compared: pure, no Twisted, no I/O."""
