"""How long a status message may be.

A refusal often repeats what the caller sent (an unknown update-mask path, a name that is
not allowed). gRPC carries the message in a header, percent-encoded, and a client refuses
a response whose headers pass 8 KiB: a long enough bad argument made the caller see
RESOURCE_EXHAUSTED ("received metadata size exceeds soft limit") instead of the
INVALID_ARGUMENT that names it. Every status message is cut to at most `MAX_MESSAGE_BYTES`
of UTF-8 (at most three times that once percent-encoded).
"""

from __future__ import annotations

MAX_MESSAGE_BYTES = 1024
_CUT = " [cut]"


def bounded(message: str) -> str:
    """``message``, or its beginning marked ``[cut]`` when its UTF-8 is too long."""
    data = message.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_MESSAGE_BYTES:
        return message
    head = data[: MAX_MESSAGE_BYTES - len(_CUT)].decode("utf-8", "ignore")
    return head + _CUT
