#!/usr/bin/env python3
"""Client side of bench/cluster_http_bench.sh: registers synthetic nodes, takes leases, and times
allocations over HTTP against a running flyt-cluster-manager (http.client). Requests go one after
the other, so each timing is one request's end-to-end latency.

  cluster_http_client.py URL TOKEN body SNAPSHOT.json OUT.json        # heartbeat body template
  cluster_http_client.py URL TOKEN lua BODY.json NODES close|reuse      # wrk script for heartbeats
  cluster_http_client.py URL TOKEN register SNAPSHOT.json NODES       # one heartbeat per node
  cluster_http_client.py URL TOKEN heartbeats SNAPSHOT.json NODES RATE  # until killed, RATE/s, a
                                                                        # connection each (as nodes)
  cluster_http_client.py URL TOKEN hblat SNAPSHOT.json COUNT RATE      # COUNT heartbeats at RATE/s, timed
  cluster_http_client.py URL TOKEN leases COUNT                       # COUNT leases kept
  cluster_http_client.py URL TOKEN waiting COUNT                      # submit COUNT jobs that must wait
  cluster_http_client.py URL TOKEN alloc ITERATIONS [keepalive]       # POST then DELETE, timed
  cluster_http_client.py URL TOKEN refused ITERATIONS [keepalive]     # a POST that must get 409

Every request uses a new connection unless `keepalive` is given (one connection reused): the
manager's small responses stall ~40 ms on a reused connection (see docs/benchmarks.md).
"""
import http.client
import json
import sys
import time
import urllib.parse


def connect(url):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=30)


class Client:
    """keepalive: one connection for every request (reconnecting when the server closes it);
    otherwise a new connection per request, as flyt-node-manager sends its heartbeats."""

    def __init__(self, url, token, keepalive=True):
        self.url = url
        self.keepalive = keepalive
        self.headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
        if not keepalive:
            self.headers["Connection"] = "close"
        self.conn = connect(url)

    def call(self, method, path, body=None):
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        if not self.keepalive:
            self.conn.close()
            self.conn = connect(self.url)
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=data, headers=self.headers)
                r = self.conn.getresponse()
                return r.status, r.read()
            except (http.client.HTTPException, ConnectionError):
                # The server closes keep-alive connections after a while: reconnect once.
                if attempt == 1:
                    raise
                self.conn.close()
                self.conn = connect(self.url)


def heartbeat_body(snapshot_path, name):
    with open(snapshot_path) as f:
        snap = json.load(f)
    snap.pop("node", None)  # the node manager's /api/v1/gpus adds it; a heartbeat's snapshot has none
    # Each node's GPUs are its own (the manager refuses a GPU UUID two nodes report): "@NODE@" is
    # replaced by the node's name in each heartbeat (for_node).
    for g in snap.get("gpus", []):
        g["uuid"] = "GPU-@NODE@-%d" % g["index"]
    body = {"name": name, "api_url": "http://127.0.0.1:9/", "labels": {"rack": "r1"},
            "version": "0.1.0", "snapshot": snap, "events": []}
    return body


WRK_LUA = """local rest = [==[%(rest)s]==]
local token = "%(token)s"
local nodes = %(nodes)d
local close = %(close)s
local counter = 0
local next_offset = 0
function setup(thread)
  thread:set("offset", next_offset)
  next_offset = next_offset + 499
end
function init(args)
  counter = offset
end
function request()
  counter = counter + 1
  local name = string.format("node-%%04d", counter %% nodes)
  local headers = {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token}
  if close then headers["Connection"] = "close" end
  local body = ('{"name":"' .. name .. '"' .. rest):gsub("@NODE@", name)
  return wrk.format("POST", "/api/v1/nodes/heartbeat", headers, body)
end"""


def for_node(template, name):
    """The heartbeat of node `name` from a heartbeat_body template."""
    body = json.loads(json.dumps(template).replace("@NODE@", name))
    body["name"] = name
    return body


def node_name(i):
    return "node-%04d" % i


def percentile(values, p):
    v = sorted(values)
    if not v:
        return 0.0
    k = max(0, min(len(v) - 1, int(-(-p * len(v) // 100)) - 1))
    return v[k]


def main():
    url, token, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    keepalive = "keepalive" in args
    args = [a for a in args if a != "keepalive"]
    c = Client(url, token, keepalive)
    if cmd == "body":
        body = heartbeat_body(args[0], "NAME")
        text = json.dumps(body, separators=(",", ":"))
        with open(args[1], "w") as f:
            f.write(text)
    elif cmd == "lua":
        # wrk: each request a heartbeat of the next node name (the two threads start 499 apart).
        with open(args[0]) as f:
            body = f.read()
        prefix = '{"name":"NAME"'
        assert body.startswith(prefix) and "]==]" not in body
        print(WRK_LUA % {"rest": body[len(prefix):], "token": token, "nodes": int(args[1]),
                         "close": "true" if args[2] == "close" else "false"})
    elif cmd == "register":
        template = heartbeat_body(args[0], "")
        for i in range(int(args[1])):
            status, out = c.call("POST", "/api/v1/nodes/heartbeat", for_node(template, node_name(i)))
            if status != 200:
                sys.exit("heartbeat of %s: HTTP %d %s" % (node_name(i), status, out[:200]))
    elif cmd == "heartbeats":
        template = heartbeat_body(args[0], "")
        nodes, rate = int(args[1]), float(args[2])
        start = time.monotonic()
        i = 0
        while True:
            c.call("POST", "/api/v1/nodes/heartbeat", for_node(template, node_name(i % nodes)))
            i += 1
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    elif cmd == "hblat":
        template = heartbeat_body(args[0], "")
        count, rate = int(args[1]), float(args[2])
        lat = []
        start = time.monotonic()
        for i in range(count):
            body = for_node(template, node_name(i % 1000))
            t0 = time.perf_counter()
            status, out = c.call("POST", "/api/v1/nodes/heartbeat", body)
            lat.append((time.perf_counter() - t0) * 1000)
            if status != 200:
                sys.exit("heartbeat: HTTP %d %s" % (status, out[:200]))
            delay = start + (i + 1) / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        print(json.dumps({"n": count, "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99),
                          "max_ms": max(lat)}))
    elif cmd == "waiting":
        # An autotuner sweep (Llama-3.1-8B on vLLM, tp 1/2/4/8 × max-model-len) asking for a GPU
        # model no node has: every experiment waits, each with its own memory requirement.
        count = int(args[0])
        lens = [4096 + 128 * k for k in range((count + 3) // 4)]
        task = {"task_name": "bench-waiting", "model": {"id_or_path": "meta-llama/Llama-3.1-8B-Instruct"},
                "base_runtime": "vllm",
                "parameters": {"max-model-len": lens, "gpu-memory-utilization": [0.9]},
                "parallel_config": {"tp": [1, 2, 4, 8]},
                "scheduling": {"gpu_model": "B200", "timeout_seconds": 86400}}
        status, out = c.call("POST", "/api/v1/jobs", task)
        if status != 201:
            sys.exit("submission: HTTP %d %s" % (status, out[:300]))
        print(len(json.loads(out)["jobs"]))
    elif cmd == "leases":
        for i in range(int(args[0])):
            status, out = c.call("POST", "/api/v1/allocations",
                                 {"gpus": [1, 2, 4, 8][i % 4], "min_free_memory_mb": 20000,
                                  "policy": ["score", "binpack", "spread"][i % 3],
                                  "ttl_seconds": 86400})
            if status != 201:
                sys.exit("lease %d: HTTP %d %s" % (i, status, out[:300]))
    elif cmd in ("alloc", "refused"):
        n = int(args[0])
        post_ms, delete_ms, both_ms = [], [], []
        size = 0
        for i in range(n):
            if cmd == "alloc":
                body = {"gpus": [1, 2, 4, 8][i % 4], "min_free_memory_mb": 20000, "policy": "score"}
            else:
                body = {"gpus": 8, "min_free_memory_mb": 200000}
            t0 = time.perf_counter()
            status, out = c.call("POST", "/api/v1/allocations", body)
            t1 = time.perf_counter()
            if cmd == "refused":
                if status != 409:
                    sys.exit("expected 409, got HTTP %d %s" % (status, out[:300]))
                size = len(out)
                post_ms.append((t1 - t0) * 1000)
                continue
            if status != 201:
                sys.exit("allocation %d: HTTP %d %s" % (i, status, out[:300]))
            lease = json.loads(out)["id"]
            status, out = c.call("DELETE", "/api/v1/allocations/" + lease)
            t2 = time.perf_counter()
            if status != 200:
                sys.exit("release %s: HTTP %d %s" % (lease, status, out[:300]))
            post_ms.append((t1 - t0) * 1000)
            delete_ms.append((t2 - t1) * 1000)
            both_ms.append((t2 - t0) * 1000)
        result = {"n": n,
                  "post_p50_ms": percentile(post_ms, 50), "post_p99_ms": percentile(post_ms, 99)}
        if delete_ms:
            result.update({"delete_p50_ms": percentile(delete_ms, 50),
                           "delete_p99_ms": percentile(delete_ms, 99),
                           "both_p50_ms": percentile(both_ms, 50),
                           "both_p99_ms": percentile(both_ms, 99)})
        if size:
            result["refusal_bytes"] = size
        print(json.dumps(result))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
