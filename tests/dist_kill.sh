#!/bin/sh
# A rank that dies mid-training (SIGKILL) ends the whole job within bounded time, with an error: Open MPI's
# mpirun notices the lost process, kills the other ranks (which may be waiting in a collective for it)
# and exits non-zero with a message naming the rank and the signal. kiln adds no timeout of its own.
#   tests/dist_kill.sh MPIRUN KILN
set -eu
mpirun=$1 kiln=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$mpirun" --allow-run-as-root --oversubscribe -np 2 "$kiln" train mnist --steps 100000 --no-eval >"$dir/out" 2>"$dir/err" &
job=$!
# Wait for training to be under way (rank 0's progress line), at most 600 s: under ASan, beside another 2-rank
# test, the first step took over 120 s.
i=0
until grep -q "step [0-9]" "$dir/err"; do
  i=$((i + 1))
  [ $i -le 1200 ] || { echo "FAIL: training did not start in 600 s"; cat "$dir/err"; kill "$job"; exit 1; }
  kill -0 "$job" 2>/dev/null || { echo "FAIL: the job ended before training started"; cat "$dir/err"; exit 1; }
  sleep 0.5
done
# The ranks are mpirun's children; kill the one that is rank 1 (its environment says so).
victim=
for pid in $(pgrep -P "$job"); do
  if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then victim=$pid; fi
done
[ -n "$victim" ] || { echo "FAIL: no rank 1 among mpirun's children: $(pgrep -P "$job" | tr '\n' ' ')"; kill "$job"; exit 1; }
start=$(date +%s)
kill -KILL "$victim"
# The job must end by itself: give it 60 s, then count it as hung.
i=0
while kill -0 "$job" 2>/dev/null; do
  i=$((i + 1))
  if [ $i -gt 120 ]; then echo "FAIL: the job still runs 60 s after rank 1 was killed"; kill -KILL "$job"; exit 1; fi
  sleep 0.5
done
status=0
wait "$job" || status=$?
elapsed=$(($(date +%s) - start))
echo "rank 1 (pid $victim) killed: mpirun exited with status $status after ${elapsed} s"
[ "$status" -ne 0 ] || { echo "FAIL: mpirun exited with status 0 after a rank was killed"; exit 1; }
grep -q "process rank 1 with PID .* exited on signal 9" "$dir/err" "$dir/out" || { echo "FAIL: no message naming rank 1 and signal 9"; cat "$dir/err" "$dir/out"; exit 1; }
grep -h "signal 9" "$dir/err" "$dir/out" | head -1
