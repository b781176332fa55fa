#!/usr/bin/env python3
"""Probe side of bench/rate_limit_bench.sh: for SECONDS, one thread sends a node's heartbeats
(node "probe-node", every 100 ms, a new connection each, as flyt-node-manager does) and another
takes and releases a one-GPU lease every 250 ms (a new connection per request), timing each
heartbeat and each allocation end to end. Prints JSON: count, failures, median and p99 in ms of
each.

  rate_limit_probe.py URL NODE_TOKEN CLIENT_TOKEN SNAPSHOT.json SECONDS
"""
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_http_client import Client, heartbeat_body, for_node, percentile  # noqa: E402


def summary(times, failures):
    ms = [t * 1000 for t in times]
    return {"count": len(ms), "failures": failures,
            "p50_ms": round(percentile(ms, 50), 2), "p99_ms": round(percentile(ms, 99), 2)}


def main():
    url, node_token, client_token, snapshot, seconds = sys.argv[1:6]
    deadline = time.monotonic() + float(seconds)
    beat = for_node(heartbeat_body(snapshot, "probe-node"), "probe-node")
    out = {}

    def heartbeats():
        c = Client(url, node_token, keepalive=False)
        times, failures = [], 0
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            try:
                status, _ = c.call("POST", "/api/v1/nodes/heartbeat", beat)
            except OSError:
                status = 0
            times.append(time.perf_counter() - t0)
            failures += status != 200
            time.sleep(0.1)
        out["heartbeat"] = summary(times, failures)

    # The node first: the allocations need its GPUs.
    Client(url, node_token, keepalive=False).call("POST", "/api/v1/nodes/heartbeat", beat)
    alloc_times = []

    def allocations_timed():
        c = Client(url, client_token, keepalive=False)
        failures = 0
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            try:
                status, body = c.call("POST", "/api/v1/allocations", {"gpus": 1, "ttl_seconds": 600})
            except OSError:
                status, body = 0, b""
            alloc_times.append(time.perf_counter() - t0)
            if status != 201:
                failures += 1
                time.sleep(0.05)
                continue
            c.call("DELETE", "/api/v1/allocations/" + json.loads(body)["id"])
            time.sleep(0.25)  # 8 requests per second: within the client's own rate limit
        out["allocation"] = summary(alloc_times, failures)

    threads = [threading.Thread(target=heartbeats), threading.Thread(target=allocations_timed)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
