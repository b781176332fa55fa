#!/usr/bin/env bash
# Unit test of scripts/cuda_coverage.py: on the tree's cudart_exports.def the per-family counts
# add up to the export total (--check), every export has a family (none left in "other"), the
# markdown total row matches the file; on small made-up lists it counts each kind in the right
# family, and refuses duplicates (--check: 1) and unknown kinds (2).
#   coverage_test.sh <source dir>
set -uo pipefail
src=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
script=$src/scripts/cuda_coverage.py
def=$src/src/runtime/cudart_exports.def
tmp=$(mktemp -d -t flyt-coverage.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

python3 "$script" --def "$def" --check >"$tmp/table.md" || fail "--check on $def"
total=$(grep -c '^FLYT_CUDART_EXPORT(' "$def")
remoted=$(grep -c '^FLYT_CUDART_EXPORT(.*, kRemoted)' "$def")
grep -q "^| \*\*all\*\* | \*\*$remoted\*\* | .* | \*\*$total\*\* |$" "$tmp/table.md" ||
  fail "the total row does not say $remoted remoted of $total: $(tail -1 "$tmp/table.md")"
python3 "$script" --def "$def" --format json >"$tmp/out.json" || fail "--format json"
python3 - "$tmp/out.json" "$total" <<'PY' || fail "json counts"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["total"] == int(sys.argv[2]), d["total"]
assert sum(sum(k.values()) for k in d["families"].values()) == d["total"]
assert d["other"] == [], "exports with no family: %s" % d["other"]
PY

cat >"$tmp/small.def" <<'DEF'
// a comment naming FLYT_CUDART_EXPORT(x, kLocal) is not an export
FLYT_CUDART_EXPORT(cudaMalloc, kRemoted)
FLYT_CUDART_EXPORT(cudaMemcpyAsync_ptsz, kRemoted)
FLYT_CUDART_EXPORT(cudaGraphLaunch, kUnsupported)
FLYT_CUDART_EXPORT(cudaStreamBeginCapture_ptsz, kUnsupported)
FLYT_CUDART_EXPORT(cudaGetErrorName, kLocal)
FLYT_CUDART_EXPORT(cudaGLSetGLDevice, kUnsupported)
FLYT_CUDART_EXPORT(cudaSomethingNew, kLocal)
DEF
python3 "$script" --def "$tmp/small.def" --check >"$tmp/small.md" || fail "--check on a small list"
expect_row() { grep -qF "$1" "$tmp/small.md" || fail "no row '$1' in: $(cat "$tmp/small.md")"; }
expect_row "| memory and copies | 2 | 0 | 0 | 2 |"
expect_row "| graphs and stream capture | 0 | 0 | 2 | 2 |"
expect_row "| errors | 0 | 1 | 0 | 1 |"
expect_row "| graphics interop (GL, VDPAU, EGL) (deliberately not remoted) | 0 | 0 | 1 | 1 |"
expect_row "| other | 0 | 1 | 0 | 1 |"
expect_row "| **all** | **2** | **2** | **3** | **7** |"

printf 'FLYT_CUDART_EXPORT(cudaMalloc, kRemoted)\nFLYT_CUDART_EXPORT(cudaMalloc, kLocal)\n' \
  >"$tmp/dupe.def"
python3 "$script" --def "$tmp/dupe.def" --check >/dev/null 2>"$tmp/dupe.err"
[ $? -eq 1 ] || fail "a duplicate export passed --check"
grep -q "more than once: cudaMalloc" "$tmp/dupe.err" || fail "duplicate not named: $(cat "$tmp/dupe.err")"
printf 'FLYT_CUDART_EXPORT(cudaMalloc, kMaybe)\n' >"$tmp/bad.def"
python3 "$script" --def "$tmp/bad.def" >/dev/null 2>&1
[ $? -eq 2 ] || fail "an unknown kind was accepted"
echo "PASS coverage_test ($total exports, $remoted remoted)"
