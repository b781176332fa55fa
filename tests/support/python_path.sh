# shellcheck shell=bash
# Sourced by scripts/test.sh (for the whole suite) and tests/e2e/lib.sh (for a script run by hand):
# where python3 on PATH is a pyenv shim (a bash script that runs `pyenv exec`, ~0.3 s before the
# interpreter starts, against ~0.05 s for the interpreter itself), puts the directory of the
# interpreter the shim resolves to first on PATH. The tests run python3 thousands of times (JSON
# fields, free ports, fake servers), so the shim alone cost the suite minutes. Elsewhere: nothing.
case "$(command -v python3 2>/dev/null)" in
  */shims/python3)
    flyt_python_dir=$(python3 -c 'import os, sys; print(os.path.dirname(os.path.realpath(sys.executable)))' 2>/dev/null)
    if [ -n "$flyt_python_dir" ] && [ -x "$flyt_python_dir/python3" ]; then
      PATH="$flyt_python_dir:$PATH"
      export PATH
    fi
    unset flyt_python_dir
    ;;
esac
