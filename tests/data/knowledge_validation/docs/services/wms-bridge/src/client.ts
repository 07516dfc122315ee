/**
 * WMS client used by wms-bridge to fetch orders from a customer's warehouse
 * management system and to report their completion back.
 *
 * Each site has one connector. Push-based connectors (the customer's WMS calls us)
 * do not use this client; it is for the pull-based ones, which poll the WMS:
 * SAP EWM outbound deliveries and the generic REST connector.
 *
 * Orders read from the WMS are forwarded to the Orders API with the WMS document
 * number as `external_ref` and as the idempotency key, so polling the same document
 * twice never creates two orders.
 */

export type Priority = "standard" | "express" | "replenishment";

export interface WmsClientOptions {
  baseUrl: string;
  /** Per-request timeout. WMS servers at our customers are often slow, but a
   * request that takes longer than this is almost always hanging, not working. */
  timeoutMs?: number;
  /** How often to poll for new documents. */
  pollIntervalMs?: number;
  /** Attempts per request, including the first. */
  maxAttempts?: number;
}

export const DEFAULTS = {
  timeoutMs: 8_000, // eight seconds; raise per connector if needed, never above 20 s
  pollIntervalMs: 15_000,
  maxAttempts: 4,
  /** First backoff delay; doubles on each retry, plus up to 250 ms of jitter. */
  backoffBaseMs: 500,
} as const;

/**
 * SAP EWM has no priority field we can rely on; customers encode it in the
 * delivery's shipping condition. Codes not listed here map to "standard".
 * "10" is express at every customer so far; "40" is used by the Leipzig
 * customer for stock transfers between its own warehouses.
 */
export const EWM_SHIPPING_CONDITION_PRIORITY: Record<string, Priority> = {
  "10": "express",
  "01": "standard",
  "02": "standard",
  "40": "replenishment",
};

/**
 * Circuit breaker: after this many consecutive failed polls, stop polling for the
 * cool-down period and raise `WmsConnectorDown` in the console. Orders already
 * received keep being worked on; only new ones stop arriving.
 */
export const BREAKER_FAILURES = 6;
export const BREAKER_COOLDOWN_MS = 120_000; // two minutes without polling

export class WmsError extends Error {
  constructor(
    message: string,
    readonly status?: number,
  ) {
    super(message);
  }

  /** 5xx, 408 and 429 are retried; other 4xx mean our request is wrong and
   * retrying cannot help. */
  get retryable(): boolean {
    return this.status === undefined || this.status >= 500 || this.status === 408 || this.status === 429;
  }
}

export class WmsClient {
  private readonly opts: Required<WmsClientOptions>;
  private consecutiveFailures = 0;
  private openUntil = 0;

  constructor(opts: WmsClientOptions) {
    this.opts = {
      timeoutMs: DEFAULTS.timeoutMs,
      pollIntervalMs: DEFAULTS.pollIntervalMs,
      maxAttempts: DEFAULTS.maxAttempts,
      ...opts,
    };
  }

  get pollIntervalMs(): number {
    return this.opts.pollIntervalMs;
  }

  /** Whether the breaker lets a poll through at time `now` (milliseconds). */
  allowPoll(now: number): boolean {
    return now >= this.openUntil;
  }

  recordPoll(ok: boolean, now: number): void {
    if (ok) {
      this.consecutiveFailures = 0;
      return;
    }
    this.consecutiveFailures += 1;
    if (this.consecutiveFailures >= BREAKER_FAILURES) {
      this.openUntil = now + BREAKER_COOLDOWN_MS;
      this.consecutiveFailures = 0;
    }
  }

  /**
   * GET a path on the WMS with timeout and retries.
   *
   * Completion reports (`confirm`) are sent with the same retries, but when they
   * are exhausted the report is parked in the `wms_outbox` table and retried every
   * five minutes for up to three days, because a lost completion leaves the
   * customer's WMS believing the goods were never picked.
   */
  async get<T>(path: string): Promise<T> {
    let lastError: unknown;
    for (let attempt = 0; attempt < this.opts.maxAttempts; attempt++) {
      const controller = new AbortController();
      const timer = setTimeout(() => controller.abort(), this.opts.timeoutMs);
      try {
        const res = await fetch(new URL(path, this.opts.baseUrl), { signal: controller.signal });
        if (!res.ok) throw new WmsError(`WMS answered ${res.status}`, res.status);
        return (await res.json()) as T;
      } catch (err) {
        lastError = err;
        if (err instanceof WmsError && !err.retryable) throw err;
        const delay = DEFAULTS.backoffBaseMs * 2 ** attempt + Math.random() * 250;
        await new Promise((r) => setTimeout(r, delay));
      } finally {
        clearTimeout(timer);
      }
    }
    throw lastError;
  }
}

/** Map an EWM shipping condition to an order priority. */
export function priorityFromEwm(shippingCondition: string | undefined): Priority {
  if (!shippingCondition) return "standard";
  return EWM_SHIPPING_CONDITION_PRIORITY[shippingCondition] ?? "standard";
}

/**
 * A completion report for the WMS. `pickedQuantity` may be lower than ordered when
 * a line ended in an exception; the WMS then decides whether to backorder.
 */
export interface Completion {
  externalRef: string;
  lines: { sku: string; pickedQuantity: number }[];
  completedAt: string;
}

/** How long a parked completion report is retried before a person must look at it. */
export const OUTBOX_RETRY_INTERVAL_MS = 5 * 60_000;
export const OUTBOX_MAX_AGE_MS = 3 * 24 * 60 * 60_000;

/**
 * Whether a parked report should be retried now, or given up on and raised as
 * `WmsCompletionStuck` for the Integrations on-call. Reports are never dropped
 * silently: a stuck one stays in the outbox until someone resolves it.
 */
export function outboxAction(parkedAt: number, lastTry: number, now: number): "retry" | "wait" | "escalate" {
  if (now - parkedAt >= OUTBOX_MAX_AGE_MS) return "escalate";
  return now - lastTry >= OUTBOX_RETRY_INTERVAL_MS ? "retry" : "wait";
}
