// The dashboard's API client: every request to the Heron API goes through `apiFetch`.
//
// It adds the session token, the account header and a request id; it turns error
// responses into `ApiError`; and it refreshes an expired session once before giving up.

import { ResponseCache, cacheKey } from "./cache";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly param?: string,
    readonly requestId?: string,
  ) {
    super(message);
  }
}

const BASE_URL = "/api/v2";
// Requests slower than this are aborted; the user sees a retry button.
const TIMEOUT_MS = 15_000;

let sessionToken: string | null = null;
let accountId: string | null = null;

export function setSession(token: string, account: string): void {
  sessionToken = token;
  accountId = account;
}

function requestId(): string {
  return crypto.randomUUID();
}

export async function apiFetch<T>(path: string, init: RequestInit = {}, retried = false): Promise<T> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), TIMEOUT_MS);
  const id = requestId();
  try {
    const response = await fetch(BASE_URL + path, {
      ...init,
      signal: controller.signal,
      headers: {
        ...init.headers,
        Authorization: `Bearer ${sessionToken ?? ""}`,
        "Heron-Account": accountId ?? "",
        "X-Request-Id": id,
        "Content-Type": "application/json",
      },
    });
    if (response.status === 401 && !retried) {
      // The session expired: refresh it once, then repeat the request.
      await refreshSession();
      return apiFetch<T>(path, init, true);
    }
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      const error = body.error ?? {};
      throw new ApiError(response.status, error.code ?? "unknown", error.message ?? response.statusText, error.param, id);
    }
    return (await response.json()) as T;
  } finally {
    clearTimeout(timer);
  }
}

async function refreshSession(): Promise<void> {
  const response = await fetch("/auth/refresh", { method: "POST", credentials: "include" });
  if (!response.ok) {
    // The refresh cookie is gone too: send the user to the login page.
    window.location.assign("/login?expired=1");
    throw new ApiError(401, "session_expired", "Your session has expired.");
  }
  const body = await response.json();
  sessionToken = body.token;
}

const listCache = new ResponseCache<unknown>();

/** GET through the response cache; mutations call `invalidateLists` afterwards. */
export function cachedGet<T>(path: string, query = ""): Promise<T> {
  const key = cacheKey(accountId ?? "", path, query);
  return listCache.get(key, () => apiFetch<T>(`${path}?${query}`)) as Promise<T>;
}

export function invalidateLists(pathPrefix: string): void {
  listCache.invalidate(`${accountId ?? ""}:${pathPrefix}`);
}
