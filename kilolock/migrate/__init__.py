"""C{kilolock-migrate}: schema upgrades, row jobs and offline recovery."""
