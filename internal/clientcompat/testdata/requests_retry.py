"""POST one intent to an API behind idem with requests and urllib3's Retry.

The key is minted once per intent and sent on every attempt; urllib3 retries the attempt on
connection errors, read timeouts and the statuses below, POST included.
"""

import json
import sys
import time
import uuid

import requests
from requests.adapters import HTTPAdapter
from urllib3.util import Retry


def idem_session():
    retry = Retry(
        total=8,
        backoff_factor=0.1,  # 0.1 s, 0.2 s, 0.4 s ... between attempts
        backoff_max=2,
        # 409: idem's "the original is still running" (it carries Retry-After).
        # Not 400 or 422: those are final.
        status_forcelist=[409, 429, 500, 502, 503, 504],
        allowed_methods=None,  # every method, POST included: the key makes it safe
        respect_retry_after_header=True,
        retry_after_max=2,  # cap the server's Retry-After (a recent urllib3: 2.7 has it)
        raise_on_status=False,  # when retries run out, return the last answer
    )
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def post_intent(session, url, body, key=None, attempt_timeout=10.0, headers=None):
    key = key or str(uuid.uuid4())  # once per intent; store it with the intent to survive restarts
    h = {"Content-Type": "application/json", "Idempotency-Key": key, **(headers or {})}
    return session.post(url, data=body, headers=h, timeout=attempt_timeout)


if __name__ == "__main__":
    url, key, body, attempt_timeout, tenant = sys.argv[1:6]
    start = time.monotonic()
    out = {}
    try:
        r = post_intent(idem_session(), url, body, key, float(attempt_timeout), {"X-API-Key": tenant})
        out = {"status": r.status_code, "body": r.text, "replayed": r.headers.get("Idempotent-Replayed") == "true",
               "attempts": 1 + len(r.raw.retries.history) if r.raw.retries else 1}
    except requests.RequestException as e:
        out = {"error": repr(e)}
    out["seconds"] = time.monotonic() - start
    print(json.dumps(out))
