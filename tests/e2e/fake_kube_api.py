#!/usr/bin/env python3
"""A fake Kubernetes API server for flyt's e2e tests: HTTPS with the given certificate, one Node.

It answers what the node manager's annotation publisher asks, as the Kubernetes API documents:
  GET   /api/v1/nodes/<name>  -> the Node (metadata.labels with NVIDIA GPU feature discovery's
                                 nvidia.com/gpu.* labels, metadata.annotations as patched so far)
  PATCH /api/v1/nodes/<name>  -> applies a JSON merge patch (RFC 7386) of metadata.annotations and
                                 answers the Node; only with Content-Type
                                 application/merge-patch+json (415 otherwise)
Every request must carry "Authorization: Bearer <the token file's current content>" (401 Status
otherwise); another node is 404, another path 404, a patch that touches anything but
metadata.annotations 422. Each request is appended to --log as one JSON line (method, path,
content_type, body, answer status), so a test can check exactly what was sent.

Usage: fake_kube_api.py --port P --cert C --key K --token-file F --node NAME --log FILE
"""
import argparse
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--cert", required=True)
ap.add_argument("--key", required=True)
ap.add_argument("--token-file", required=True)
ap.add_argument("--node", required=True)
ap.add_argument("--log", required=True)
args = ap.parse_args()

lock = threading.RLock()
node = {
    "kind": "Node", "apiVersion": "v1",
    "metadata": {
        "name": args.node, "resourceVersion": "1",
        "labels": {"kubernetes.io/hostname": args.node,
                   "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                   "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.count": "5"},
        "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
    },
}


def status(code, reason, message):
    return code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": message, "reason": reason, "code": code}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):  # quiet
        pass

    def answer(self, code, body, req_body=b""):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        with lock, open(args.log, "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path,
                                "content_type": self.headers.get("Content-Type"),
                                "body": req_body.decode("utf-8", "replace"),
                                "status": code}) + "\n")

    def handle_one(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        with open(args.token_file) as f:
            token = f.read().strip()
        if self.headers.get("Authorization") != "Bearer " + token:
            return self.answer(*status(401, "Unauthorized", "Unauthorized"), body)
        prefix = "/api/v1/nodes/"
        if not self.path.startswith(prefix):
            return self.answer(*status(404, "NotFound", "the server could not find the requested resource"), body)
        name = self.path[len(prefix):]
        if name != args.node:
            return self.answer(*status(404, "NotFound", f'nodes "{name}" not found'), body)
        if self.command == "GET":
            with lock:
                return self.answer(200, node, body)
        if self.command != "PATCH":
            return self.answer(*status(405, "MethodNotAllowed", "method not allowed"), body)
        if self.headers.get("Content-Type") != "application/merge-patch+json":
            return self.answer(*status(415, "UnsupportedMediaType",
                                       "the body of the request was in an unknown format"), body)
        try:
            patch = json.loads(body)
        except ValueError as e:
            return self.answer(*status(400, "BadRequest", f"invalid JSON: {e}"), body)
        if set(patch) != {"metadata"} or set(patch["metadata"]) != {"annotations"}:
            return self.answer(*status(422, "Invalid", "only metadata.annotations may be patched here"), body)
        with lock:
            ann = node["metadata"]["annotations"]
            for k, v in patch["metadata"]["annotations"].items():
                if v is None:
                    ann.pop(k, None)
                elif isinstance(v, str):
                    ann[k] = v
                else:
                    return self.answer(*status(422, "Invalid", f"annotation {k} must be a string"), body)
            node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
            return self.answer(200, node, body)

    do_GET = do_PATCH = do_PUT = do_POST = do_DELETE = handle_one


server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(args.cert, args.key)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
