#!/usr/bin/env python3
"""Checks what deploy/kubernetes/ promises, on the objects `kubectl apply --dry-run=client -o json`
printed (argv[1]); argv[2] is deploy/kubernetes/. Prints each problem; exit 1 if any."""
import json
import sys

problems = []


def check(ok, what):
    if not ok:
        problems.append(what)


doc = json.load(open(sys.argv[1]))
items = doc["items"] if doc.get("kind") == "List" else [doc]
by_kind = {}
for item in items:
    by_kind.setdefault(item["kind"], []).append(item)

for kind in ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap",
             "DaemonSet", "Service", "ServiceMonitor"]:
    check(len(by_kind.get(kind, [])) == 1, "expected one %s, got %d" % (kind, len(by_kind.get(kind, []))))

role = by_kind["ClusterRole"][0]
check(role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}],
      "the ClusterRole must grant exactly nodes: get, patch, not %s" % json.dumps(role["rules"]))
binding = by_kind["ClusterRoleBinding"][0]
sa = by_kind["ServiceAccount"][0]["metadata"]
check(binding["roleRef"]["name"] == role["metadata"]["name"] and
      binding["roleRef"]["name"] != "cluster-admin", "the binding must name the flyt ClusterRole")
check(binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"],
                               "namespace": sa["namespace"]}],
      "the binding's only subject must be the node manager's ServiceAccount")

ds = by_kind["DaemonSet"][0]
pod = ds["spec"]["template"]["spec"]
check(pod.get("serviceAccountName") == sa["name"], "the DaemonSet must run as the ServiceAccount")
check(pod.get("hostPID") is True, "the DaemonSet needs hostPID: true")
check(not pod.get("hostNetwork"), "the DaemonSet must not use the host network")
c = pod["containers"][0]
env = {e["name"]: e for e in c.get("env", [])}
check(env.get("NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName",
      "NODE_NAME must come from the downward API (spec.nodeName)")
for probe in ("readinessProbe", "livenessProbe"):
    check(c.get(probe, {}).get("httpGet", {}).get("path") == "/healthz", probe + " must GET /healthz")
sc = c.get("securityContext", {})
check(not sc.get("privileged"), "the container must not be privileged")
check(sc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation must be false")
check(sc.get("capabilities", {}).get("drop") == ["ALL"], "every capability must be dropped")
terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
check(any(e["key"].startswith("nvidia.com/gpu") for t in terms for e in t["matchExpressions"]),
      "the DaemonSet must select GPU nodes (nvidia.com/gpu.*)")
cm = by_kind["ConfigMap"][0]
check(any(v.get("configMap", {}).get("name") == cm["metadata"]["name"] for v in pod["volumes"]),
      "the DaemonSet must mount the ConfigMap")
toml = open(sys.argv[2] + "/node-manager.toml").read()
check(cm["data"].get("node-manager.toml") == toml,
      "configmap.yaml's node-manager.toml must equal deploy/kubernetes/node-manager.toml")
check(c["args"] == ["--config", "/etc/flyt/node-manager.toml"], "the container must read the mounted config")
ports = {p["name"]: p["containerPort"] for p in c["ports"]}
svc = by_kind["Service"][0]
check(svc["spec"]["selector"] == ds["spec"]["selector"]["matchLabels"], "the Service must select the pods")
check(all(p["targetPort"] in ports for p in svc["spec"]["ports"]), "the Service must target the container's port")
sm = by_kind["ServiceMonitor"][0]
check(sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items(),
      "the ServiceMonitor must select the Service")
check(all(e["port"] in [p["name"] for p in svc["spec"]["ports"]] and e.get("path") == "/metrics"
          for e in sm["spec"]["endpoints"]), "the ServiceMonitor must scrape /metrics on the Service's port")
for item in items:
    ns = item["metadata"].get("namespace")
    check(ns in (None, "flyt"), "%s/%s is in namespace %s" % (item["kind"], item["metadata"]["name"], ns))

for p in problems:
    print("FAIL:", p)
print("%d objects checked, %d problems" % (len(items), len(problems)))
sys.exit(1 if problems else 0)
