"""What every layer shares: the values, the text they accept, typed errors,
audit events and their chain, conditions."""
