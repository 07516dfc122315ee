"""The listening port: refused when another process already listens on it.

gRPC binds with SO_REUSEADDR, and the workers of ``--workers N`` with SO_REUSEPORT; a second
brain-server started on a port the first holds would otherwise join the first's reuse-port
group (same user), and the kernel would split connections between two servers and two
databases. A plain bind (SO_REUSEADDR only, so connections in TIME_WAIT after a restart do
not count) fails on a port anyone listens on, reuse-port group or not.
"""

from __future__ import annotations

import socket


def split(listen: str) -> tuple[str, int, socket.AddressFamily]:
    """(host, port, family) of ``host:port`` (``[v6]:port``; an empty host is every address)."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return host, int(port), family


def ensure_free(listen: str) -> None:
    """Raise OSError (one line for the operator) when ``listen`` is taken or not valid."""
    refused = OSError(f"cannot listen on {listen}: the address is in use or not valid")
    try:
        host, port, family = split(listen)
    except ValueError as exc:
        raise refused from exc
    if port == 0:
        return
    probe = socket.socket(family, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
    except OSError as exc:
        raise refused from exc
    finally:
        probe.close()
