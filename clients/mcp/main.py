"""brain-mcp: a stdio MCP server that forwards typed tools to the Shared Brain gRPC API.

    brain-mcp                 serve MCP over stdin/stdout (what an MCP host launches)
    brain-mcp hook recall     prompt-submit hook: print a context block for the prompt on stdin
    brain-mcp hook capture    stop/session-end hook: propose the session's "remember this"
                              moments as candidates for human review

Where to connect, which key to use and which bucket to act in come only from the environment
(or the flags that override it), never from the model, so what an agent saves and what it
recalls share one scope by construction:

    BRAIN_TARGET      host:port of brain-server (default 127.0.0.1:50051)
    BRAIN_API_KEY     the agent's API key (required)
    BRAIN_USER_ID     scope.user_id stamped on every call (unset: the key's user, if it fixes one)
    BRAIN_NAMESPACE   scope.namespace (unset: the key's namespace, if it allows exactly one)
    BRAIN_SESSION_ID  scope.session_id (optional)
    BRAIN_TLS_CA      path to a PEM root CA; turns TLS on (BRAIN_TLS=1 uses the system roots;
                      BRAIN_TLS_CERT + BRAIN_TLS_KEY add a client certificate for mTLS)
    BRAIN_TIMEOUT     per-call deadline in seconds for tools (default 30)
    BRAIN_RESTART_WINDOW    seconds after a lost connection during which tool calls wait for
                            the server to come back, within BRAIN_TIMEOUT (default 15)
    BRAIN_HOOK_TIMEOUT      deadline of `hook recall` (default 2)
    BRAIN_HOOK_TOKEN_BUDGET token budget of `hook recall` (default: the server's)

The server is `proxy`, the hooks `hooks`, the settings and the scope `config`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from brain.authz import CommandParser, add_version_argument
from brain.clients._base import check_api_key
from brain.clients.mcp.config import ProxyConfig
from brain.clients.mcp.hooks import hook_capture, hook_recall
from brain.clients.mcp.proxy import serve

__all__ = ["main"]


def _parser() -> CommandParser:
    p = CommandParser(
        prog="brain-mcp",
        description="Stdio MCP server (and prompt hook) for Shared Brain. "
        "Configuration comes from BRAIN_* environment variables; flags override them.",
    )
    p.add_argument("--target", help="host:port of brain-server [BRAIN_TARGET]")
    p.add_argument(
        "--api-key", help="API key [BRAIN_API_KEY]; prefer the variable (flags show in ps)"
    )
    p.add_argument("--user-id", help="scope user [BRAIN_USER_ID]")
    p.add_argument("--namespace", help="scope namespace [BRAIN_NAMESPACE]")
    p.add_argument("--session-id", help="scope session [BRAIN_SESSION_ID]")
    p.add_argument("--tls-ca", help="PEM root CA file; enables TLS [BRAIN_TLS_CA]")
    add_version_argument(p)
    sub = p.add_subparsers(dest="command")
    hook = sub.add_parser("hook", help="run as a coding-agent hook")
    hook.add_argument(
        "hook",
        choices=["recall", "capture"],
        help="recall: print context for the prompt; capture: propose the session's "
        '"remember this" moments for review',
    )
    return p


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `brain-mcp` console script."""
    args = _parser().parse_args(argv)
    env = os.environ
    config = ProxyConfig.from_args(args, env)
    debug = env.get("BRAIN_MCP_DEBUG", "") not in {"", "0"}
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if debug else logging.WARNING,
        format="brain-mcp %(levelname)s %(message)s",
    )
    if args.command == "hook" and args.hook == "capture":
        if said := hook_capture(config, sys.stdin.read(), env):
            sys.stderr.write(said + "\n")
        return
    if args.command == "hook":
        context = hook_recall(config, sys.stdin.read(), env)
        if context:
            sys.stdout.write(context.rstrip("\n") + "\n")
        return
    if not config.api_key:
        sys.exit("brain-mcp: set BRAIN_API_KEY to an API key (mint one with `brain-admin keys`)")
    try:
        check_api_key(config.api_key)
    except ValueError as exc:
        sys.exit(f"brain-mcp: BRAIN_API_KEY is not a usable key: {exc}")
    asyncio.run(serve(config))


if __name__ == "__main__":
    main()
