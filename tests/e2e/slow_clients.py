#!/usr/bin/env python3
"""Slow clients against one HTTP server, and probes that must keep answering meanwhile.

Opens --connections connections from --from (another loopback address) to --target, each sending
one byte of a never-ending request head every second; a connection the server closes is opened
again half a second later. Meanwhile, every --every seconds, each --probe URL is fetched (with its
bearer token) and must answer 200 within --limit seconds; --reachable URL,TOKEN (a manager's
/api/v1/nodes) must also list every node as reachable. Runs for --seconds, then prints one JSON
line: probes, failures (with what failed), the slowest probe, the most connections open at once
(as the flood saw them, and as the server's /metrics counted them) and the answers the server gave the slow clients (by status line).
Usage: slow_clients.py --target 127.0.0.1:PORT --seconds 8 --probe URL[,TOKEN] ...
"""
import argparse
import json
import select
import socket
import threading
import time
import urllib.request

HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4096


def flood(args, stop, stats):
    host, port = args.target.rsplit(":", 1)
    port = int(port)
    conns = {}  # socket -> bytes sent
    retry_at = [0.0] * args.connections
    slots = [None] * args.connections
    while not stop.is_set():
        now = time.monotonic()
        for i in range(args.connections):
            if slots[i] is None and now >= retry_at[i]:
                s = socket.socket()
                s.settimeout(1)
                try:
                    s.bind((getattr(args, "from"), 0))
                    s.connect((host, port))
                    s.setblocking(False)
                    slots[i] = s
                    conns[s] = 0
                except OSError as e:
                    stats["errors"][str(e)] = stats["errors"].get(str(e), 0) + 1
                    s.close()
                    retry_at[i] = now + 0.5
        stats["max_open"] = max(stats["max_open"], len(conns))
        # One byte each; a closed (or answered) connection is dropped and opened again later.
        for i, s in enumerate(slots):
            if s is None:
                continue
            dead = False
            try:
                r, _, _ = select.select([s], [], [], 0)
                if r:
                    data = s.recv(4096)
                    if data:
                        line = data.split(b"\r\n", 1)[0].decode(errors="replace")
                        stats["answers"][line] = stats["answers"].get(line, 0) + 1
                    dead = True
                else:
                    sent = conns[s]
                    s.send(HEAD[sent % len(HEAD):sent % len(HEAD) + 1])
                    conns[s] = sent + 1
            except OSError:
                dead = True
            if dead:
                conns.pop(s, None)
                s.close()
                slots[i] = None
                retry_at[i] = time.monotonic() + 0.5
        stop.wait(1.0)
    for s in conns:
        s.close()


def fetch(url, token, limit):
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    started = time.monotonic()
    with urllib.request.urlopen(req, timeout=limit) as res:
        body = res.read()
        return res.status, body, time.monotonic() - started


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--target", required=True)
    p.add_argument("--from", default="127.0.0.2")
    p.add_argument("--connections", type=int, default=220)
    p.add_argument("--seconds", type=float, default=8)
    p.add_argument("--every", type=float, default=0.5)
    p.add_argument("--limit", type=float, default=1.0)
    p.add_argument("--probe", action="append", default=[])
    p.add_argument("--reachable", default="")
    args = p.parse_args()

    stop = threading.Event()
    stats = {"max_open": 0, "answers": {}, "errors": {}}
    t = threading.Thread(target=flood, args=(args, stop, stats), daemon=True)
    t.start()
    time.sleep(2)  # let the flood build up
    probes, failures, slowest, server_open = 0, [], 0.0, 0
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        for spec in args.probe + ([args.reachable] if args.reachable else []):
            url, _, token = spec.partition(",")
            probes += 1
            try:
                status, body, took = fetch(url, token, args.limit)
                slowest = max(slowest, took)
                for line in body.decode(errors="replace").splitlines():
                    if "_http_connections_open " in line and not line.startswith("#"):
                        server_open = max(server_open, int(float(line.split()[-1])))
                if status != 200 or took > args.limit:
                    failures.append(f"{url}: {status} in {took:.2f} s")
                elif spec == args.reachable:
                    nodes = json.loads(body)["nodes"]
                    bad = [n["name"] for n in nodes if n["state"] != "reachable"]
                    if bad or not nodes:
                        failures.append(f"unreachable: {bad or 'no nodes'}")
            except Exception as e:  # a time-out or a refused connection
                failures.append(f"{url}: {e}")
        time.sleep(args.every)
    stop.set()
    t.join(timeout=5)
    print(json.dumps({"probes": probes, "failures": failures[:20], "failed": len(failures),
                      "slowest_s": round(slowest, 3), "max_open": stats["max_open"],
                      "server_open_max": server_open,
                      "answers": stats["answers"], "connect_errors": stats["errors"]}))


if __name__ == "__main__":
    main()
