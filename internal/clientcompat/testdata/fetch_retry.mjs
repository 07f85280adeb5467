// POST one intent to an API behind idem with fetch (Node 18+), retrying with the same key.
import { randomUUID } from "node:crypto";

const RETRIED = new Set([408, 429, 500, 502, 503, 504]);

// postIntent sends body once per attempt, with one Idempotency-Key for all of them. It retries
// network errors, timeouts (attemptMs bounds one attempt, body included), 408, 429, 5xx and
// idem's 409 with Retry-After; 400 and 422 are final. It obeys Retry-After, capped by
// maxPauseMs and by the time left in budgetMs, and asks once more at the last useful moment.
export async function postIntent(url, body, { key = randomUUID(), headers = {}, attemptMs = 10_000,
  budgetMs = 30_000, maxPauseMs = 2_000, maxAttempts = 8 } = {}) {
  const deadline = Date.now() + budgetMs;
  const lastUseful = deadline - Math.min(attemptMs, budgetMs / 2);
  for (let attempt = 1; ; attempt++) {
    let res, text, err;
    try {
      res = await fetch(url, {
        method: "POST", body, signal: AbortSignal.timeout(attemptMs),
        headers: { "Content-Type": "application/json", ...headers, "Idempotency-Key": key },
      });
      text = await res.text(); // within the attempt: a body cut short is retried too
      const again = RETRIED.has(res.status) || (res.status === 409 && res.headers.has("retry-after"));
      if (!again) return { res, text, attempt };
    } catch (e) {
      err = e; // the request may or may not have arrived: the key makes a retry safe
    }
    const now = Date.now();
    if (attempt >= maxAttempts || now >= lastUseful) {
      if (res && text !== undefined && !err) return { res, text, attempt };
      throw err;
    }
    const ra = Number.parseInt(res?.headers.get("retry-after") ?? "", 10);
    const backoff = Math.random() * Math.min(maxPauseMs, 100 * 2 ** (attempt - 1));
    const pause = Math.min(Number.isNaN(ra) || err ? backoff : Math.min(ra * 1000, maxPauseMs), lastUseful - now);
    await new Promise((r) => setTimeout(r, pause));
  }
}

if (process.argv[1] === new URL(import.meta.url).pathname) {
  const [url, key, body, attemptSeconds, tenant] = process.argv.slice(2);
  const start = performance.now();
  let out;
  try {
    const { res, text, attempt } = await postIntent(url, body, {
      key, attemptMs: Number(attemptSeconds) * 1000, budgetMs: 8_000, headers: { "X-API-Key": tenant },
    });
    out = { status: res.status, body: text, replayed: res.headers.get("idempotent-replayed") === "true", attempts: attempt };
  } catch (e) {
    out = { error: String(e?.cause ?? e) };
  }
  out.seconds = (performance.now() - start) / 1000;
  console.log(JSON.stringify(out));
}
