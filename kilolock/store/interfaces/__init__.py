"""Every store interface, one module per domain."""
