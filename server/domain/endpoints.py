"""JSON over HTTP to a model server a deployment brings (embeddings, reranking).

One place decides how such an endpoint is addressed (`/v1/...` under the server root), how
a request is sent (blocking `urllib`, run in a worker thread by the caller) and how every
failure reads, so each client of a model server only builds its body and reads its answer.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from typing import Any


class EndpointError(Exception):
    """The endpoint could not be reached or did not answer with JSON; the message says why."""


def v1_endpoint(url: str, path: str) -> str:
    """``http://host:port`` or ``http://host:port/v1`` plus ``path`` under ``/v1``."""
    root = url.rstrip("/")
    return (root if root.endswith("/v1") else root + "/v1") + "/" + path.lstrip("/")


def post_json(endpoint: str, body: Any, *, what: str, api_key: str | None, timeout: float) -> Any:
    """POST ``body`` as JSON and return the decoded answer; raises `EndpointError`.

    ``what`` names the endpoint in messages ("embedding", "rerank"); the key is sent as a
    bearer token and never appears in a message.
    """
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(endpoint, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read(300).decode(errors="replace")
        message = f"{what} endpoint {endpoint} answered HTTP {exc.code}: {detail}"
        raise EndpointError(message) from exc
    except (http.client.HTTPException, OSError) as exc:  # URLError and timeouts are OSErrors
        reason = getattr(exc, "reason", exc)
        raise EndpointError(
            f"cannot reach {what} endpoint {endpoint}: {reason}; "
            "check that the server is running and the URL is right"
        ) from exc
    except ValueError as exc:
        raise EndpointError(f"{what} endpoint {endpoint} sent invalid JSON") from exc
