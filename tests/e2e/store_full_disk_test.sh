#!/usr/bin/env bash
# End to end: flyt-cluster-manager on a SQLite store whose disk fills up under traffic (issue 13,
# point 3: "a full disk invents leases"). The store lives on a small tmpfs; a node manager sends
# heartbeats while a client allocates and releases GPUs in a loop; a filler file then takes every
# byte left on the tmpfs, stays until the manager has refused writes for a while, and goes. Then:
# every allocation answered 201 and not released is in GET /allocations and in the store, and
# nothing else is (no refused request left a lease in memory); after a restart on the same store
# the same leases are there and exactly the GPUs they do not hold can be granted; refusals were
# 503 store_unavailable, never 409 or 500; /metrics counted the outage(s) and the log has one line
# per outage. Needs root (mount -t tmpfs): skipped (exit 77) where mounting is not permitted.
# Usage: store_full_disk_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
chmod 755 "$tmp"
disk=$tmp/disk
mounted=0
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cleanup() {
  [ -f "$tmp/traffic.stop" ] || touch "$tmp/traffic.stop" 2>/dev/null
  stop_children
  [ "$mounted" = 1 ] && umount "$disk" 2>/dev/null
  [ -n "${FLYT_KEEP_TMP:-}" ] && cp -r "$tmp" "$FLYT_KEEP_TMP"; rm -rf "$tmp"
}
trap cleanup EXIT
unset FLYT_NVML_LIBRARY FLYT_SIM_TIME FLYT_SIM_REASON FLYT_TOKEN FLYT_ADMIN_TOKEN FLYT_CLUSTER_MANAGER

mkdir -p "$disk"
if ! mount -t tmpfs -o size=6m,mode=0755 tmpfs "$disk" 2>"$tmp/mount.err"; then
  echo "SKIPPED: cannot mount a tmpfs here ($(cat "$tmp/mount.err")); this test needs root"
  exit 77
fi
mounted=1
db=$disk/flyt.db

cluster_config "sqlite:$db" </dev/null
cat >"$tmp/node.toml" <<EOF
[monitor]
interval_ms = 200
[cluster-manager]
heartbeat_interval_s = 1
EOF

# The lease ids GET /allocations lists, sorted, one per line.
listed_leases() {
  api "$admin" GET /api/v1/allocations | sed '$d' |
    jq_py "print('\n'.join(sorted(l['id'] for l in d['allocations'])))"
}
# The lease ids the store holds (live rows), and those its GPU claims name, sorted.
stored_leases() {
  python3 - "$db" <<'EOF'
import sqlite3, sys
c = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True, timeout=10)
print("\n".join(sorted(r[0] for r in c.execute("SELECT id FROM leases WHERE NOT deleted"))))
EOF
}
claimed_leases() {
  python3 - "$db" <<'EOF'
import sqlite3, sys
c = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True, timeout=10)
print("\n".join(sorted(r[0] for r in c.execute("SELECT DISTINCT lease_id FROM gpu_claims"))))
EOF
}
metric() {
  curl -s -H "Authorization: Bearer $admin" "$url/metrics" | awk -v m="$1" '$1==m {print $2}'
}
write_works() {
  local r
  r=$(api "$alice" POST /api/v1/allocations '{"gpus":1,"ttl_seconds":600}')
  [ "$(code_of "$r")" = 201 ] || return 1
  api "$alice" DELETE "/api/v1/allocations/$(field "$r" "d['id']")" >/dev/null
}
refusals_at_least() { test "$(grep -c '^alloc 503' "$tmp/traffic.log" 2>/dev/null)" -ge "$1"; }

# traffic: allocates one GPU at a time; keeps every third lease (at most 4 kept at once, then
# releases those too) and releases the others. Logs "alloc HTTP CODE ID" and "free HTTP CODE ID".
traffic() {
  local r id n=0 kept=()
  while [ ! -f "$tmp/traffic.stop" ]; do
    r=$(api "$alice" POST /api/v1/allocations '{"gpus":1,"ttl_seconds":600}')
    id=""
    [ "$(code_of "$r")" = 201 ] && id=$(field "$r" "d['id']")
    echo "alloc $(code_of "$r") $(field "$r" "d.get('code', '-')" 2>/dev/null || echo '?') $id" >>"$tmp/traffic.log"
    n=$((n + 1))
    if [ -n "$id" ] && [ $((n % 3)) = 0 ] && [ "${#kept[@]}" -lt 4 ]; then
      kept+=("$id")
    elif [ -n "$id" ]; then
      r=$(api "$alice" DELETE "/api/v1/allocations/$id")
      echo "free $(code_of "$r") $(field "$r" "d.get('code', '-')" 2>/dev/null || echo '-') $id" >>"$tmp/traffic.log"
    fi
    if [ "${#kept[@]}" -ge 4 ] && [ $((n % 12)) = 0 ]; then
      for id in "${kept[@]}"; do
        r=$(api "$alice" DELETE "/api/v1/allocations/$id")
        echo "free $(code_of "$r") $(field "$r" "d.get('code', '-')" 2>/dev/null || echo '-') $id" >>"$tmp/traffic.log"
      done
      kept=()
    fi
  done
}

check "the manager starts" start_manager "127.0.0.1:$port" "$tmp/cm.log" --config "$tmp/cm.toml"
start_node node-a h100x8-idle "$url" "$node_token" --config "$tmp/node.toml"
check "the node registers" wait_for 20 nodes_reachable 1
traffic &
traffic_pid=$!
pids+=("$traffic_pid")
sleep 2

echo "== the disk fills up"
dd if=/dev/zero of="$disk/filler" bs=64k 2>/dev/null
check "the filler took the disk" test "$(df --output=avail -k "$disk" | tail -n1 | tr -d ' ')" -lt 64
# The WAL may have room left in pages it already holds: wait until the manager refuses writes.
check "allocations are refused while the disk is full" wait_for 30 refusals_at_least 5
r=$(api "" GET /healthz)
check "/healthz says the store is unavailable" test "$(field "$r" "d['store']['state']")" = unavailable
sleep 2
echo "== the disk has room again"
rm -f "$disk/filler"
if ! wait_for 30 write_works; then
  check "writes work again (/healthz: $(curl -s "$url/healthz"))" false
fi
sleep 1
touch "$tmp/traffic.stop"
wait "$traffic_pid" 2>/dev/null

# What the client was told.
allocs=$(grep -c '^alloc ' "$tmp/traffic.log")
granted=$(awk '$1=="alloc" && $2==201 {print $4}' "$tmp/traffic.log" | sort)
released=$(awk '$1=="free" && $2==200 {print $4}' "$tmp/traffic.log" | sort)
expected=$(comm -23 <(echo "$granted") <(echo "$released") | grep . | sort)
bad=$(awk '($1=="alloc" && $2!=201 && !($2==503 && $3=="store_unavailable")) ||
           ($1=="free" && $2!=200 && !($2==503 && $3=="store_unavailable"))' "$tmp/traffic.log")
echo "traffic: $allocs allocations, $(grep -c '^alloc 201' "$tmp/traffic.log") granted, $(grep -c '^alloc 503' "$tmp/traffic.log") refused with 503"
check "every refusal was 503 store_unavailable (never 409 or 500): ${bad:-none other}" test -z "$bad"
listed=$(listed_leases)
check "GET /allocations lists exactly the leases granted and not released" \
  test "$listed" = "$expected"
check "the store holds exactly those leases" test "$(stored_leases)" = "$expected"
check "… and GPU claims of exactly those leases" test "$(claimed_leases)" = "$expected"
outages=$(metric flyt_cluster_store_outages_total)
check "/metrics counted the outage ($outages)" test "${outages:-0}" -ge 1
check "/metrics counted the refused writes" test "$(metric flyt_cluster_store_writes_refused_total | cut -d. -f1)" -ge 5
check "/metrics says the store is up again" test "$(metric flyt_cluster_store_up)" = 1
logged=$(grep -c "store unavailable" "$tmp/cm.log")
check "the log has one line per outage ($logged lines, $outages outages)" test "$logged" = "$outages"

echo "== the manager restarts on the same store"
kill "$manager_pid"
wait "$manager_pid" 2>/dev/null
check "the manager starts again" start_manager "127.0.0.1:$port" "$tmp/cm.log" --config "$tmp/cm.toml"
check "the node is reachable" wait_for 20 nodes_reachable 1
check "after the restart GET /allocations lists the same leases" test "$(listed_leases)" = "$expected"
held=$(echo "$expected" | grep -c .)
free_gpus=$((8 - held))
granted_now=0
for _ in $(seq "$free_gpus"); do
  r=$(api "$alice" POST /api/v1/allocations '{"gpus":1,"ttl_seconds":600}')
  [ "$(code_of "$r")" = 201 ] && granted_now=$((granted_now + 1))
done
check "each of the $free_gpus GPUs no lease holds can be granted ($granted_now were)" \
  test "$granted_now" = "$free_gpus"
r=$(api "$alice" POST /api/v1/allocations '{"gpus":1,"ttl_seconds":600}')
check "… and then none more (409 insufficient_gpus)" test "$(field "$r" "d.get('code')")" = insufficient_gpus
finish
