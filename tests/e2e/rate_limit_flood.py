#!/usr/bin/env python3
"""One token floods a flyt API: fast, complete requests on a keep-alive connection, for a bounded
time and count (loopback only). Prints a JSON summary: requests, answers by status, the
Retry-After values and error codes of the 429s.
Usage: rate_limit_flood.py --url http://127.0.0.1:PORT --token T [--path P] [--seconds S]
                           [--max-requests N]"""
import argparse
import http.client
import json
import time
import urllib.parse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--path", default="/api/v1/allocations")
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--max-requests", type=int, default=200000)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("loopback only")
    headers = {"Authorization": "Bearer " + a.token}
    statuses, retry_after, codes = {}, {}, {}
    requests = reconnects = 0
    conn = None
    deadline = time.monotonic() + a.seconds
    while requests < a.max_requests and time.monotonic() < deadline:
        if conn is None:
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
            reconnects += 1
        try:
            conn.request("GET", a.path, headers=headers)
            r = conn.getresponse()
            body = r.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = None
            statuses["error"] = statuses.get("error", 0) + 1
            continue
        requests += 1
        statuses[str(r.status)] = statuses.get(str(r.status), 0) + 1
        if r.status == 429:
            ra = r.getheader("Retry-After", "absent")
            retry_after[ra] = retry_after.get(ra, 0) + 1
            try:
                code = json.loads(body).get("code", "none")
            except ValueError:
                code = "not json"
            codes[code] = codes.get(code, 0) + 1
        if r.getheader("Connection", "").lower() == "close":
            conn.close()
            conn = None
    print(json.dumps({"requests": requests, "statuses": statuses, "retry_after": retry_after,
                      "codes": codes, "connections": reconnects}))


if __name__ == "__main__":
    main()
