#!/usr/bin/env bash
# deploy/kubernetes/ as kubectl sees it: `kubectl apply --dry-run=client -f deploy/kubernetes/`
# must pass, and the objects must be what the README and docs/security.md promise (least-privilege
# RBAC, NODE_NAME from the downward API, hostPID, /healthz probes, the ConfigMap's config equal to
# node-manager.toml). kubectl maps kinds through the API's discovery even in a client-side dry run,
# so a discovery-only fake API (fake_discovery.py) runs on 127.0.0.1; schema validation needs a
# real server's OpenAPI and is off (--validate=false). Skips (77) without kubectl or python3.
# Usage: manifests_test.sh <source dir>
set -euo pipefail
src="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
here="$(cd "$(dirname "$0")" && pwd)"
command -v kubectl >/dev/null || { echo "[  SKIPPED ] kubectl is not installed"; exit 77; }
command -v python3 >/dev/null || { echo "[  SKIPPED ] python3 is not installed"; exit 77; }

tmp="$(mktemp -d)"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

python3 "$here/fake_discovery.py" "$tmp/port" &
pid=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
[ -s "$tmp/port" ] || { echo "FAIL: the fake discovery server did not start"; exit 1; }
cat >"$tmp/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: "http://127.0.0.1:$(cat "$tmp/port")"}}]
users: [{name: fake, user: {}}]
contexts: [{name: fake, context: {cluster: fake, user: fake}}]
current-context: fake
KC
export KUBECONFIG="$tmp/kubeconfig" HOME="$tmp"

kubectl apply --dry-run=client --validate=false -f "$src/deploy/kubernetes/" | tee "$tmp/out"
for want in namespace/flyt serviceaccount/flyt-node-manager \
    clusterrole.rbac.authorization.k8s.io/flyt-node-manager \
    clusterrolebinding.rbac.authorization.k8s.io/flyt-node-manager \
    configmap/flyt-node-manager-config daemonset.apps/flyt-node-manager \
    service/flyt-node-manager servicemonitor.monitoring.coreos.com/flyt-node-manager; do
  grep -q "^$want created (dry run)" "$tmp/out" || { echo "FAIL: kubectl did not take $want"; exit 1; }
done
kubectl apply --dry-run=client --validate=false -f "$src/deploy/kubernetes/optional/"
kubectl apply --dry-run=client --validate=false -o json -f "$src/deploy/kubernetes/" >"$tmp/objects.json"
python3 "$here/check_manifests.py" "$tmp/objects.json" "$src/deploy/kubernetes"
echo "PASS"
