# Shared by the e2e scripts (sourced): counted checks and the closing "N passed, N failed" line.
passes=0
failures=0

# check <name> <condition command...>
check() {
  local name=$1
  shift
  if "$@"; then
    passes=$((passes + 1))
  else
    echo "FAIL: $name"
    failures=$((failures + 1))
  fi
}

# contains <text> <substring>
contains() { grep -qF -- "$2" <<<"$1"; }

# finish: prints the tally and exits non-zero on any failure.
finish() {
  echo "$passes passed, $failures failed"
  [ "$failures" -eq 0 ]
}
