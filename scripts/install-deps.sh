#!/usr/bin/env bash
# Installs every Debian package flyt needs to build, test and run. Idempotent: a package that is
# already installed is not fetched again, and apt-get update runs only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config clang-14 ccache
  nlohmann-json3-dev libtomlplusplus-dev libcli11-dev libspdlog-dev libfmt-dev libcpp-httplib-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 procps curl
  libsqlite3-dev sqlite3 libpq-dev postgresql
  prometheus wrk bc fonts-noto-color-emoji
  liblz4-dev libzstd-dev libtirpc-dev libclang-rt-14-dev
  libbpf-dev bpftool libelf-dev
  chromium
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Node.js and npm build the dashboard; a machine that has them already (any recent version)
# keeps its own.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "flyt: installing Debian packages: ${missing[*]}" >&2
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The dashboard's npm packages, exactly as web/package-lock.json pins them. Installed again only
# when the lockfile changed since the last install.
web="$(dirname "$0")/../web"
stamp="$web/node_modules/.flyt-lock.sha256"
want=$(sha256sum "$web/package-lock.json" | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "flyt: installing the dashboard's npm packages (web/package-lock.json)" >&2
  (cd "$web" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  echo "$want" >"$stamp"
fi
