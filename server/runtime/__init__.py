"""The brain-server process: configuration, startup, the embedded PostgreSQL and its supervisor."""
