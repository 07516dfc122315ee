"""Where brain-mcp connects and which scope it stamps: `ProxyConfig`, read from the flags and
then the ``BRAIN_*`` variables, and `resolve_scope`, which fits it to the key's confinement.

The scope comes only from here, never from the model, so what an agent saves and what it
recalls share one scope by construction. The tools, the hooks and `brain ingest` read it alike.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from brain.clients import Scope
from brain.clients._base import RESTART_WINDOW
from brain.v1 import common_pb2, identity_pb2

# A tool call's deadline (BRAIN_TIMEOUT). Longer than the clients' 10 s: a call made as a
# deploy restarts the server waits for it through the whole restart window (a restart of
# the default server took 7-14 s on a loaded 2-core machine), and an agent would rather
# wait than see a failed tool call. A call to a server that stays down still fails when
# the window closes.
TOOL_TIMEOUT = 30.0

__all__ = ["DEFAULT_TARGET", "ProxyConfig", "resolve_scope"]

DEFAULT_TARGET = "127.0.0.1:50051"


@dataclass(frozen=True)
class ProxyConfig:
    """Where to connect and which scope to stamp; read from flags, then the environment."""

    target: str
    api_key: str
    user_id: str = ""
    namespace: str = ""
    session_id: str = ""
    tls: bool = False
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    timeout: float = TOOL_TIMEOUT
    restart_window: float = RESTART_WINDOW

    @property
    def scope(self) -> common_pb2.Scope:
        return Scope(user_id=self.user_id, namespace=self.namespace, session_id=self.session_id)

    @classmethod
    def from_args(cls, args: argparse.Namespace, env: Mapping[str, str]) -> ProxyConfig:
        """Flags win over the environment; unset flags fall back to `BRAIN_*` variables."""

        def pick(flag: str | None, var: str, default: str = "") -> str:
            return flag if flag is not None else env.get(var, default)

        tls_ca = pick(args.tls_ca, "BRAIN_TLS_CA") or None
        return cls(
            target=pick(args.target, "BRAIN_TARGET", DEFAULT_TARGET),
            api_key=pick(args.api_key, "BRAIN_API_KEY").strip(),
            user_id=pick(args.user_id, "BRAIN_USER_ID"),
            namespace=pick(args.namespace, "BRAIN_NAMESPACE"),
            session_id=pick(args.session_id, "BRAIN_SESSION_ID"),
            tls=env.get("BRAIN_TLS", "").lower() in {"1", "true", "yes"} or tls_ca is not None,
            tls_ca=tls_ca,
            tls_cert=pick(getattr(args, "tls_cert", None), "BRAIN_TLS_CERT") or None,
            tls_key=pick(getattr(args, "tls_key", None), "BRAIN_TLS_KEY") or None,
            timeout=float(env.get("BRAIN_TIMEOUT") or TOOL_TIMEOUT),
            restart_window=float(env.get("BRAIN_RESTART_WINDOW") or RESTART_WINDOW),
        )

    def where(self) -> str:
        """The scope in words, for messages to the model and the user."""
        where = f"namespace {self.namespace or '(default)'}, user {self.user_id or '(shared)'}"
        return where + (f", session {self.session_id}" if self.session_id else "")

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments shared by `BrainClient` and `AsyncBrainClient`."""
        return {
            "scope": self.scope,
            "tls": self.tls,
            "root_certificates": self.tls_ca,
            "certificate_chain": self.tls_cert,
            "private_key": self.tls_key,
            "restart_window": self.restart_window,
        }


# (field, setting, noun) for each scope field a key may confine.
_SCOPE_SETTINGS = (
    ("user_id", "BRAIN_USER_ID", "user"),
    ("namespace", "BRAIN_NAMESPACE", "namespace"),
    ("session_id", "BRAIN_SESSION_ID", "session"),
)


def resolve_scope(
    config: ProxyConfig, identity: identity_pb2.WhoAmIResponse
) -> tuple[ProxyConfig, list[str]]:
    """The config with unset scope fields taken from the key's confinement where it allows
    exactly one value, and a sentence for each field that still does not fit the key.

    The server would refuse every call with such a scope, so saying which setting is wrong,
    once and at start, replaces a PERMISSION_DENIED on every call.
    """
    confined = identity.confinement
    allowed = {
        "user_id": [confined.user_id] if confined.user_id else [],
        "namespace": list(confined.namespaces),
        "session_id": [confined.session_id] if confined.session_id else [],
    }
    taken: dict[str, str] = {}
    problems: list[str] = []
    for field, setting, noun in _SCOPE_SETTINGS:
        values, mine = allowed[field], getattr(config, field)
        if not values:
            continue
        listed = ", ".join(repr(v) for v in values)
        if not mine and len(values) == 1:
            taken[field] = values[0]
        elif not mine:
            problems.append(
                f"{setting} is unset, but this key is confined to {noun}s {listed}: "
                f"set {setting} to one of them"
            )
        elif mine not in values:
            fix = (
                f"set it to {values[0]!r} or unset it"
                if len(values) == 1
                else "set it to one of them"
            )
            problems.append(
                f"{setting} is {mine!r}, but this key is confined to {noun} {listed}: {fix}"
            )
    resolved = replace(
        config,
        user_id=taken.get("user_id", config.user_id),
        namespace=taken.get("namespace", config.namespace),
        session_id=taken.get("session_id", config.session_id),
    )
    if not resolved.namespace and not allowed["namespace"]:
        # A key free to use any namespace, and none set: every save would be refused
        # (a memory lives in a namespace) while recall read the whole tenant. What an
        # agent saves and what it recalls share one bucket, so one must be named.
        problems.append(
            "BRAIN_NAMESPACE is unset, and this key may use any namespace: set "
            "BRAIN_NAMESPACE to the one this agent works in (saves need one, and recall "
            "would otherwise read every namespace of the tenant)"
        )
    return resolved, problems
