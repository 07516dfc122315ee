"""The Shared Brain server: servicers, storage, retrieval, admin and evaluation tools."""

import os

# The embedded PostgreSQL is started and stopped through subprocesses; gRPC's fork
# handlers only print a warning about them. Set before grpc is first imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
