#!/bin/bash
# A stand-in for flyt-gpu-server in the node manager's tests (gpu_servers_test.cc): it takes the
# flags the node manager passes, checks its secret file as the real one does, writes the ready
# file (tmp + rename) and sleeps until SIGTERM. `--fake-mode M` (from [gpu-servers] extra_args)
# picks a misbehaviour: crash (exit 3 after ready), ignore-term, no-ready, exit-early, slow-term.
# `--fake-log F` appends "start PID" to F at each start (to count starts).
if [[ "$1" == "probe" ]]; then
  for a in "$@"; do [[ "$a" == "--device" ]] && dev=next && continue; [[ "$dev" == next ]] && dev="$a"; done
  if [[ -n "$FAKE_PROBE_FAIL" ]]; then echo "no CUDA device $dev: driver not loaded" >&2; exit 1; fi
  echo "{\"sm_count_total\": 132, \"sm_granularity\": 8, \"memory_total_mb\": 81559, \"name\": \"Fake H100 $dev\", \"backend\": \"sim\", \"simulated\": true, \"mps\": false}"
  exit 0
fi
mode=normal
while [[ $# -gt 0 ]]; do
  case "$1" in
    --listen) [[ -z "$listen" ]] && listen="$2"; shift 2 ;;  # the first, as flyt-gpu-server reports it
    --ready-file) ready="$2"; shift 2 ;;
    --secret-file) secret="$2"; shift 2 ;;
    --sm-count) sms="$2"; shift 2 ;;
    --fake-mode) mode="$2"; shift 2 ;;
    --fake-log) log="$2"; shift 2 ;;
    *) shift ;;
  esac
done
[[ -n "$log" ]] && echo "start $$ $listen" >> "$log"
perm=$(stat -c %a "$secret" 2>/dev/null)
if [[ "$perm" != "600" ]]; then echo "secret file $secret: mode $perm, want 600" >&2; exit 2; fi
if [[ "$mode" == exit-early ]]; then echo "cannot open CUDA device: no such device" >&2; exit 4; fi
if [[ "$mode" == no-ready ]]; then echo "stuck initialising the device" >&2; while :; do sleep 0.1; done; fi
case "$mode" in
  ignore-term) trap '' TERM ;;
  *) trap 'echo "SIGTERM: draining" >&2; exit 0' TERM ;;
esac
granted=132  # no --sm-count: the whole GPU, as the real server reports it
[[ -n "$sms" ]] && granted=$(( (sms + 7) / 8 * 8 ))
echo "{\"address\": \"$listen\", \"pid\": $$, \"sm_count_total\": 132, \"sm_count_granted\": $granted, \"memory_total_mb\": 81559, \"memory_limit_mb\": null, \"backend\": \"sim\", \"simulated\": true, \"mps\": false}" > "$ready.tmp"
mv "$ready.tmp" "$ready"
echo "listening on $listen"
if [[ "$mode" == crash ]]; then sleep 0.3; echo "fatal: CUDA error 999 in cuCtxCreate" >&2; exit 3; fi
while :; do sleep 0.1; done
