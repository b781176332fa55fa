#!/usr/bin/env python3
"""A fake flyt-cluster-manager for the client manager's end-to-end test: the remote-lease
endpoints of docs/api.md ("Remote leases") on 127.0.0.1, granting leases on one GPU server the
test started. The file named by --mode holds grant, insufficient or never_fits and is read at
each request; every request is appended to --log as a JSON line (with its Idempotency-Key).
--server @FILE reads the address of each new lease's server from FILE.
Usage: fake_remote_leases.py --port N --server ADDRESS|@FILE --mode FILE --log FILE"""
import argparse
import http.server
import json

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
p.add_argument("--server", required=True)
p.add_argument("--mode", required=True)
p.add_argument("--log", required=True)
args = p.parse_args()
count = 0


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def record(self, body):
        with open(args.log, "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path, "body": body,
                                "auth": self.headers.get("Authorization", ""),
                                "key": self.headers.get("Idempotency-Key", "")}) + "\n")

    def do_POST(self):
        global count
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        self.record(body)
        if self.path.endswith("/renew"):
            return self.answer(200, {"id": self.path.split("/")[4]})
        mode = open(args.mode).read().strip()
        if mode == "insufficient":
            return self.answer(409, {"error": "no GPU can take the share now: node-b: 2 without "
                                              "room for 64 SMs, 1 without 40000 MiB free",
                                     "code": "insufficient_gpus"})
        if mode == "never_fits":
            return self.answer(409, {"error": "no GPU of this cluster has 999999 MiB",
                                     "code": "never_fits"})
        count += 1
        server = args.server
        if server.startswith("@"):
            server = open(server[1:]).read().strip()
        self.answer(201, {"id": "rlease-%d" % count, "kind": "remote", "node": "node-a",
                          "gpu": {"uuid": "GPU-sim", "index": 0, "name": "sim"},
                          "sm_count": body.get("sm_count", 16), "memory_mb": body["memory_mb"],
                          "state": "ready", "secret": "s" * 40,
                          "server": {"address": server, "state": "running"}})

    def do_DELETE(self):
        self.record(None)
        self.answer(200, {"released": self.path.split("/")[-1]})


http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
