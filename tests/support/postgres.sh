#!/usr/bin/env bash
# A throw-away PostgreSQL server for tests.
#
#   postgres.sh start DIR [OWNER_PID]   initialises a cluster in DIR (created if missing), starts it
#                                       on a free TCP port of 127.0.0.1 (unix socket in DIR too),
#                                       creates the database `flyt` and prints its URL
#                                       (postgresql://postgres@127.0.0.1:PORT/flyt) as the only line
#                                       on stdout; everything else goes to stderr. With OWNER_PID,
#                                       the server is stopped as soon as that process is gone, so a
#                                       test that crashes leaves no server behind.
#   postgres.sh stop DIR                stops it (fast shutdown); safe to call twice.
#
# Uses the newest /usr/lib/postgresql/*/bin (Debian's layout) or FLYT_PG_BINDIR. Run as root, the
# server runs as the `postgres` system user (PostgreSQL refuses root) and DIR is chowned to it.
# The server keeps PostgreSQL's durability defaults (fsync on, synchronous_commit on); only initdb's
# own final sync is skipped, which a throw-away cluster does not need.
#
# Exit status: 0 on success, 3 when PostgreSQL is not installed, 1 on any other failure.
set -euo pipefail

die() {
  echo "postgres.sh: $*" >&2
  exit 1
}

usage() {
  echo "usage: postgres.sh start DIR [OWNER_PID] | postgres.sh stop DIR" >&2
  exit 2
}

find_bindir() {
  if [ -n "${FLYT_PG_BINDIR:-}" ]; then
    [ -x "$FLYT_PG_BINDIR/initdb" ] || return 1
    echo "$FLYT_PG_BINDIR"
    return 0
  fi
  local dir
  dir=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
    echo "$dir"
    return 0
  fi
  # Other distributions put the server programs on PATH.
  if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
    dirname "$(command -v initdb)"
    return 0
  fi
  return 1
}

# as_server CMD...: runs CMD as the user the server runs as.
as_server() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

free_port() {
  if command -v python3 >/dev/null; then
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
  else
    echo $((20000 + RANDOM % 30000))
  fi
}

cmd_start() {
  local dir=$1 owner=${2:-}
  local bindir
  if ! bindir=$(find_bindir); then
    echo "postgres.sh: PostgreSQL server programs (initdb, pg_ctl) not found under" \
      "/usr/lib/postgresql/*/bin or on PATH; install the 'postgresql' package" \
      "(scripts/install-deps.sh) or set FLYT_PG_BINDIR" >&2
    exit 3
  fi
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [ ! -e "$dir/data" ] || die "$dir/data already exists (stop and remove the old cluster first)"
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || die "running as root needs the 'postgres' system user"
    chown postgres: "$dir"
    runuser -u postgres -- test -w "$dir" ||
      die "user postgres cannot write to $dir (is a parent directory private to root?)"
  fi
  # The unix socket path must fit in sun_path (107 bytes).
  [ ${#dir} -lt 90 ] || die "$dir is too long for a unix socket path; use a shorter directory"

  if ! as_server "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 \
    --no-locale --no-sync >"$dir/initdb.log" 2>&1; then
    cat "$dir/initdb.log" >&2
    die "initdb failed"
  fi

  local port=""
  for _ in 1 2 3 4 5; do
    port=$(free_port)
    # Later settings win; this block is rewritten on each attempt.
    cat >"$dir/data/flyt-test.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
shared_buffers = 16MB
max_connections = 40
CONF
    chown --reference="$dir/data/postgresql.conf" "$dir/data/flyt-test.conf"
    grep -q "^include_if_exists = 'flyt-test.conf'" "$dir/data/postgresql.conf" ||
      echo "include_if_exists = 'flyt-test.conf'" >>"$dir/data/postgresql.conf"
    if as_server "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 30 start \
      </dev/null >&2; then
      break
    fi
    port=""
    # A lost race for the port: try another one.
    grep -q "could not bind\|Address already in use" "$dir/postgres.log" 2>/dev/null || break
  done
  if [ -z "$port" ]; then
    tail -n 20 "$dir/postgres.log" >&2 || true
    die "the server did not start (log: $dir/postgres.log)"
  fi

  if ! as_server "$bindir/psql" -X -q -h "$dir" -p "$port" -U postgres -d postgres \
    -c "CREATE DATABASE flyt" </dev/null >&2; then
    as_server "$bindir/pg_ctl" -D "$dir/data" -m immediate -w stop >&2 || true
    die "could not create the database flyt"
  fi

  if [ -n "$owner" ]; then
    # The watcher must not keep the caller's stdout/stderr open (a caller reading to EOF would hang).
    # shellcheck disable=SC2016  # expanded by the inner shell
    setsid bash -c '
      while kill -0 "$1" 2>/dev/null && [ -f "$2/data/postmaster.pid" ]; do sleep 1; done
      if [ -f "$2/data/postmaster.pid" ]; then
        if [ "$(id -u)" -eq 0 ]; then
          runuser -u postgres -- "$3/pg_ctl" -D "$2/data" -m immediate -w stop
        else
          "$3/pg_ctl" -D "$2/data" -m immediate -w stop
        fi
      fi' flyt-pg-watch "$owner" "$dir" "$bindir" </dev/null >/dev/null 2>&1 &
  fi

  local url="postgresql://postgres@127.0.0.1:$port/flyt"
  echo "$url" >"$dir/url"
  echo "$url"
}

cmd_stop() {
  local dir=$1
  [ -f "$dir/data/postmaster.pid" ] || return 0
  local bindir
  bindir=$(find_bindir) || die "PostgreSQL is not installed; cannot stop $dir"
  as_server "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop </dev/null >&2 ||
    [ ! -f "$dir/data/postmaster.pid" ] || die "pg_ctl stop failed for $dir"
}

[ $# -ge 2 ] || usage
case $1 in
  start)
    [ $# -le 3 ] || usage
    cmd_start "$2" "${3:-}"
    ;;
  stop)
    [ $# -eq 2 ] || usage
    cmd_stop "$2"
    ;;
  *) usage ;;
esac
