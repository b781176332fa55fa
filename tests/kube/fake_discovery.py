#!/usr/bin/env python3
"""A Kubernetes API server's discovery endpoints only, on 127.0.0.1, for `kubectl apply
--dry-run=client`: kubectl maps each manifest's kind to its resource through discovery even in a
client-side dry run. It knows the kinds of deploy/kubernetes/; every object GET is 404 (nothing
exists yet). Writes its port to the file named by argv[1]."""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KINDS = {
    "v1": [("namespaces", "Namespace", False), ("serviceaccounts", "ServiceAccount", True),
           ("configmaps", "ConfigMap", True), ("services", "Service", True),
           ("nodes", "Node", False)],
    "apps/v1": [("daemonsets", "DaemonSet", True)],
    "rbac.authorization.k8s.io/v1": [("clusterroles", "ClusterRole", False),
                                     ("clusterrolebindings", "ClusterRoleBinding", False)],
    "monitoring.coreos.com/v1": [("servicemonitors", "ServiceMonitor", True)],
    "admissionregistration.k8s.io/v1": [
        ("validatingadmissionpolicies", "ValidatingAdmissionPolicy", False),
        ("validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", False)],
}


def resource_list(gv):
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
            "resources": [{"name": n, "singularName": "", "namespaced": ns, "kind": k,
                           "verbs": ["create", "delete", "get", "list", "patch", "update"]}
                          for n, k, ns in KINDS[gv]]}


ROUTES = {
    "/api": {"kind": "APIVersions", "versions": ["v1"],
             "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                             "serverAddress": "127.0.0.1"}]},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": gv.split("/")[0],
         "versions": [{"groupVersion": gv, "version": gv.split("/")[1]}],
         "preferredVersion": {"groupVersion": gv, "version": gv.split("/")[1]}}
        for gv in KINDS if "/" in gv]},
    "/version": {"major": "1", "minor": "32", "gitVersion": "v1.32.0"},
}
for gv in KINDS:
    ROUTES["/api/v1" if gv == "v1" else "/apis/" + gv] = resource_list(gv)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = ROUTES.get(self.path.split("?")[0])
        code = 200
        if body is None:
            code = 404
            body = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "NotFound", "message": "not found", "code": 404}
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os  # noqa: E402
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
