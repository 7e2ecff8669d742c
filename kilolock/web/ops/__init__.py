"""What operators and clients probe: health, readiness, metrics, discovery."""
