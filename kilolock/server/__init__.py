"""The Kilolock process: twistd options, the service tree, logs, metrics."""
