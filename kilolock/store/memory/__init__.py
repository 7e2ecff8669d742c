"""The memory store: the executable specification of the store interfaces, one module per domain."""
