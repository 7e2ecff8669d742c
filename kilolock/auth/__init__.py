"""Who is calling: twisted.cred checkers and realm, TLS client certificates, CI identity."""
