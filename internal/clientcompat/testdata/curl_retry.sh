#!/bin/sh
# POST one intent with curl. One key for every attempt curl makes, and for every run of this
# script for the same intent (store the key with the intent). Prints the status (and "replayed"
# for a stored answer replayed), then the body.
# usage: curl_retry.sh URL KEY BODY ATTEMPT_SECONDS TENANT
url=$1 key=$2 body=$3 attempt=$4 tenant=$5
out=$(mktemp) hdr=$(mktemp)
trap 'rm -f "$out" "$hdr"' EXIT
for try in 1 2 3 4 5 6 7 8; do
  # --retry: timeouts, 408, 429, 500, 502, 503, 504, obeying Retry-After. --retry-all-errors:
  # resets and answers cut short as well; without --fail it never retries a 4xx.
  # --max-time bounds each attempt, --retry-max-time all of them.
  code=$(curl --silent --show-error --output "$out" --dump-header "$hdr" --write-out '%{http_code}' \
    --retry 8 --retry-all-errors --retry-max-time 30 --max-time "$attempt" \
    -H 'Content-Type: application/json' -H "Idempotency-Key: $key" -H "X-API-Key: $tenant" \
    --data "$body" "$url")
  # curl does not retry a 409. With Retry-After it is idem's "still running": come back.
  wait=$(tr -d '\r' <"$hdr" | sed -n 's/^[Rr]etry-[Aa]fter: *\([0-9][0-9]*\)$/\1/p' | tail -n 1)
  [ "$code" = 409 ] && [ -n "$wait" ] || break
  sleep $((wait < 2 ? wait : 2))
done
if grep -qi '^idempotent-replayed: *true' "$hdr"; then echo "$code replayed"; else echo "$code"; fi
cat "$out"
