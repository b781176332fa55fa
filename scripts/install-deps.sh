#!/usr/bin/env bash
# Installs every Debian package flyt needs to build, test and run. Idempotent: a package that is
# already installed is not fetched again, and apt-get update runs only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config clang-14
  nlohmann-json3-dev libtomlplusplus-dev libcli11-dev libspdlog-dev libfmt-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 procps curl
  libsqlite3-dev sqlite3 libpq-dev postgresql
  prometheus wrk bc
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "flyt: installing Debian packages: ${missing[*]}" >&2
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
