"""Blocking clients closed at interpreter exit.

gRPC's channel finaliser takes the lock its connectivity-polling thread (a daemon) holds
while it polls; at interpreter exit that thread can be frozen holding it, and the
finaliser then waits forever. So at exit every client still alive (a module-level one,
closed or not) is closed and its polling thread let end first (it notices within 0.2 s).
"""

from __future__ import annotations

import atexit
import time
import weakref
from typing import Protocol

import grpc

_EXIT_WAIT_SECONDS = 5.0


class _Closable(Protocol):
    def close(self) -> None: ...


_LIVE: weakref.WeakKeyDictionary[_Closable, grpc.Channel] = weakref.WeakKeyDictionary()


def closed_at_exit(client: _Closable, channel: grpc.Channel) -> None:
    """Close ``client`` at exit if it is still alive then, and wait for ``channel``'s poller."""
    _LIVE[client] = channel


@atexit.register
def _close_at_exit() -> None:
    live = list(_LIVE.items())
    for client, _ in live:
        client.close()
    deadline = time.monotonic() + _EXIT_WAIT_SECONDS
    for _, channel in live:
        poller_stopped(channel, deadline - time.monotonic())


def poller_stopped(channel: grpc.Channel, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``channel``'s connectivity poller to end, once nothing
    subscribes to it any more (it notices between two polls, within 0.2 s); whether it has.
    grpc keeps the polling state private; without it there is nothing to wait for."""
    state = getattr(channel, "_connectivity_state", None)
    deadline = time.monotonic() + seconds
    while getattr(state, "polling", False):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True
