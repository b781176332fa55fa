#!/usr/bin/env bash
# End to end: flyt-cluster-manager never silently starts on an empty or damaged store (issue 13,
# points 6 and 7). A first start creates the store and records it (var_dir/store.created); later
# a 0-byte file, a missing file the record names, or a file with garbage over its GPU claims and
# their unique index is refused at start, with a message naming the file and what to do, and a
# non-zero exit; --store-init creates a new store on purpose, and refuses where one with data is.
# Usage: store_init_test.sh <build dir> <source dir>
set -uo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
trap 'stop_children; [ -n "${FLYT_KEEP_TMP:-}" ] && cp -r "$tmp" "$FLYT_KEEP_TMP"; rm -rf "$tmp"' EXIT
unset FLYT_TOKEN FLYT_ADMIN_TOKEN

admin=admin-token-000000000000
db=$tmp/store/flyt.db
port=$(free_port)
url="http://127.0.0.1:$port"
# config <name> <db> <var dir>
config() {
  cat >"$tmp/$1.toml" <<EOF
[manager]
listen = "127.0.0.1:$port"
store = "sqlite:$2"
var_dir = "$3"
[auth]
tokens = [{ name = "admin", token = "$admin", role = "admin" }]
EOF
}
config main "$db" "$tmp/var"

# up <log> [args...]: starts the manager; true when it serves.
up() {
  local log=$1
  shift
  start_manager "127.0.0.1:$port" "$tmp/$log" "$@"
}
down() {
  kill "$manager_pid" 2>/dev/null
  wait "$manager_pid" 2>/dev/null
}
# refused <name> [args...]: the manager exits non-zero within 10 s; its stderr in $tmp/<name>.err.
refused() {
  local name=$1
  shift
  timeout 10 "$build/bin/flyt-cluster-manager" "$@" >"$tmp/$name.err" 2>&1
  local rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]
}
said() { grep -qF -- "$2" "$tmp/$1.err"; }
# A change, so that the store holds data (revision > 0).
write_something() {
  test "$(code_of "$(api "$admin" POST /api/v1/clients '{"name":"c1"}')")" = 200
}

echo "== a first start creates the store and records it"
check "the first start (no file, no record) starts" up first.log --config "$tmp/main.toml"
check "the store file exists" test -s "$db"
check "var_dir records the store" grep -qF "sqlite:$db" "$tmp/var/store.created"
check "a change is stored" write_something
down
check "a restart starts" up again.log --config "$tmp/main.toml"
down

echo "== a 0-byte store file is refused"
rm -f "$db-wal" "$db-shm"
: >"$db"
check "the manager refuses to start on it" refused zero --config "$tmp/main.toml"
check "… naming the file" said zero "$db"
check "… saying it is empty" said zero "empty file (0 bytes)"
check "… and what to do (--store-init)" said zero "--store-init"
check "… and leaves the file as it was" test ! -s "$db"
config fresh "$db" "$tmp/var-fresh"
check "without a record too (another var_dir)" refused zero2 --config "$tmp/fresh.toml"

echo "== a store the record names is missing"
rm -f "$db"
check "the manager refuses to start" refused gone --config "$tmp/main.toml"
check "… naming the record" said gone "store.created"
check "… and --store-init" said gone "--store-init"
check "… and creates nothing" test ! -e "$db"

echo "== --store-init"
check "--store-init starts on a new, empty store" up init.log --config "$tmp/main.toml" --store-init
check "a change is stored" write_something
down
check "a restart without it starts" up after-init.log --config "$tmp/main.toml"
down
check "--store-init where a store with data is: refused" refused reinit --config "$tmp/main.toml" --store-init
check "… saying it already holds one" said reinit "already holds a flyt store"

echo "== a store replaced by another one is refused"
mkdir -p "$tmp/other"
config other "$tmp/other/flyt.db" "$tmp/var-other"
check "another store is made elsewhere" up other.log --config "$tmp/other.toml"
down
sleep 0.01
rm -f "$db" "$db-wal" "$db-shm"
cp "$tmp/other/flyt.db" "$db"
check "the manager refuses the replaced store" refused replaced --config "$tmp/main.toml"
check "… saying it was replaced" said replaced "was replaced"

echo "== garbage over the GPU claims and their unique index"
damaged=$tmp/damaged/flyt.db
mkdir -p "$tmp/damaged"
cp "$tmp/other/flyt.db" "$damaged"
# add_claims <db>: 300 GPU claims, so that the claims and their indexes have pages of their own.
add_claims() {
  python3 - "$1" <<'EOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=10)
c.executemany("INSERT INTO gpu_claims (gpu, lease_id, exclusive) VALUES (?, ?, 1)",
              [("node-%d/GPU-%032d" % (i, i), "lease-%d" % i) for i in range(300)])
c.commit()
EOF
}
# damage_claims <db>: garbage over the pages of the GPU claims table and its indexes (first moving
# what the WAL holds into the file).
damage_claims() {
  python3 - "$1" <<'EOF'
import os, sqlite3, sys
path = sys.argv[1]
c = sqlite3.connect(path, timeout=10)
c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
pages = [r[0] for r in c.execute("SELECT rootpage FROM sqlite_master WHERE tbl_name = 'gpu_claims'")]
page_size = c.execute("PRAGMA page_size").fetchone()[0]
c.close()
with open(path, "r+b") as f:
    for p in pages:
        if p > 1:
            f.seek((p - 1) * page_size)
            f.write(os.urandom(page_size))
EOF
}
add_claims "$damaged"
damage_claims "$damaged"
config damaged "$damaged" "$tmp/var-damaged"
check "the manager refuses to start on the damaged copy" refused damaged --config "$tmp/damaged.toml"
check "… naming the file" said damaged "$damaged"
check "… saying it is damaged, with what quick_check found" said damaged "is damaged (quick_check:"

echo "== damage while the manager runs: found by the periodic check"
running=$tmp/running/flyt.db
mkdir -p "$tmp/running"
cp "$tmp/other/flyt.db" "$running"
add_claims "$running"
config running "$running" "$tmp/var-running"
sed -i 's/^\[manager\]$/[manager]\nstore_check_interval_seconds = 1/' "$tmp/running.toml"
check "the manager starts on a sound copy" up running.log --config "$tmp/running.toml"
check "/healthz says the store is ok" test "$(get_field /healthz "d['store']['state']")" = ok
damage_claims "$running"
store_damaged() { test "$(get_field /healthz "d['store']['state']")" = damaged; }
check "/healthz says the store is damaged within seconds" wait_for 15 store_damaged
r=$(api "" GET /healthz)
check "… with the check's message, without the path" \
  test "$(field "$r" "'quick_check' in d['store']['message'] and '$running' not in d['store']['message']")" = True
m=$(curl -s -H "Authorization: Bearer $admin" "$url/metrics")
check "/metrics says the store is not healthy" contains "$m" "flyt_cluster_store_healthy 0"
check "… and counts the damage" grep -qE '^flyt_cluster_store_error_kinds_total\{kind="damaged"\} [1-9]' <<<"$m"
check "the log names the damage once (per minute)" \
  test "$(grep -c "store error (damaged)" "$tmp/running.log")" = 1
down
finish
