#!/bin/sh
# proc_table.def against the installed CUDA toolkit: generated again from its typedef headers it
# is the same, and its symbols are exactly the functions NVIDIA's stub libcuda.so exports (no
# driver function a runtime could ask for is missing, none is made up).
#   check_proc_table.sh CUDA_INCLUDE_DIR STUB_LIBCUDA
set -eu
here=$(dirname "$0")
python3 "$here/proc_table.py" "$1" | diff -u "$here/proc_table.def" - || {
  echo "proc_table.def is not this toolkit's: regenerate it (see proc_table.py)"
  exit 1
}
[ -n "${2:-}" ] && [ -f "$2" ] || { echo "no stub libcuda.so: its export list not compared"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$2" | awk '$2 == "T" { print $3 }' | sort > "$tmp/exported"
sed -n 's/^FLYT_PROC(.*, \([A-Za-z0-9_]*\))$/\1/p' "$here/proc_table.def" | sort > "$tmp/table"
if ! diff -u "$tmp/exported" "$tmp/table"; then
  echo "proc_table.def and $2 differ (-: exported only, +: in the table only)"
  exit 1
fi
echo "proc_table.def: $(wc -l < "$tmp/table") entry points, as the toolkit declares and its libcuda.so exports"
