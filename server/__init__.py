"""The Shared Brain server: servicers, storage, retrieval, admin and evaluation tools."""

import os

# The embedded PostgreSQL is started and stopped through subprocesses; gRPC's fork
# handlers only print a warning about them. Set before grpc is first imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
# gRPC's C core writes its own notes to stderr in plain text (each failed TLS handshake,
# for one), between the server's JSON lines; its errors still show. GRPC_VERBOSITY=INFO
# brings the notes back (deploy/TLS.md). Read once, when grpc is first imported.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
