// A small client-side cache for API responses in the dashboard.
//
// Entries expire after a time-to-live; stale entries are still served while a refresh
// runs in the background ("stale-while-revalidate"), so lists feel instant when users
// navigate back and forth.

export interface CacheOptions {
  /** Milliseconds an entry is fresh. */
  ttlMs: number;
  /** Milliseconds after expiry during which a stale entry may still be served. */
  staleMs: number;
  /** Entries kept at most; the least recently used is evicted first. */
  maxEntries: number;
}

export const DEFAULT_OPTIONS: CacheOptions = {
  ttlMs: 30_000,
  staleMs: 5 * 60_000,
  maxEntries: 200,
};

interface Entry<T> {
  value: T;
  storedAt: number;
}

export class ResponseCache<T> {
  private entries = new Map<string, Entry<T>>();
  private inflight = new Map<string, Promise<T>>();

  constructor(
    private readonly options: CacheOptions = DEFAULT_OPTIONS,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * The cached value for `key`, fetching it with `load` when missing or too old.
   * Concurrent calls for the same key share one request.
   */
  async get(key: string, load: () => Promise<T>): Promise<T> {
    const entry = this.entries.get(key);
    const age = entry ? this.now() - entry.storedAt : Infinity;
    if (entry && age <= this.options.ttlMs) {
      this.touch(key, entry);
      return entry.value;
    }
    if (entry && age <= this.options.ttlMs + this.options.staleMs) {
      void this.refresh(key, load).catch(() => undefined); // keep serving the stale value
      this.touch(key, entry);
      return entry.value;
    }
    return this.refresh(key, load);
  }

  /** Drop every entry whose key starts with `prefix`, e.g. after a mutation. */
  invalidate(prefix: string): void {
    for (const key of [...this.entries.keys()]) {
      if (key.startsWith(prefix)) this.entries.delete(key);
    }
  }

  private refresh(key: string, load: () => Promise<T>): Promise<T> {
    const running = this.inflight.get(key);
    if (running) return running;
    const promise = load()
      .then((value) => {
        this.store(key, value);
        return value;
      })
      .finally(() => this.inflight.delete(key));
    this.inflight.set(key, promise);
    return promise;
  }

  private store(key: string, value: T): void {
    this.entries.delete(key);
    this.entries.set(key, { value, storedAt: this.now() });
    while (this.entries.size > this.options.maxEntries) {
      // Maps iterate in insertion order: the first key is the least recently used.
      const oldest = this.entries.keys().next().value as string;
      this.entries.delete(oldest);
    }
  }

  private touch(key: string, entry: Entry<T>): void {
    this.entries.delete(key);
    this.entries.set(key, entry);
  }
}

/** Cache keys include the account so switching accounts never shows another's data. */
export function cacheKey(accountId: string, path: string, query = ""): string {
  return `${accountId}:${path}?${query}`;
}
