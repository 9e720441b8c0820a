#!/bin/sh
# kiln train mnist under mpirun, data parallel on 2 ranks: it says so, only rank 0 prints the result,
# and after 100 steps of the same global batch its loss is within 0.1 of one process's (the batches
# differ only in how the epoch's order is split over the ranks); so is --zero's (ZeRO-1), whose optimizer
# state per rank is half the unpartitioned.
#   tests/train_mpi.sh MPIRUN KILN
set -eu
mpirun=$1 kiln=$2
one=$("$kiln" train mnist --steps 100 --no-eval 2>/dev/null | sed -n 's/^final training loss (smoothed): //p')
# stdout and stderr apart: mpirun forwards both, and the progress line's bytes may land inside a result line.
err=$(mktemp)
trap 'rm -f "$err"' EXIT
out=$("$mpirun" --allow-run-as-root --oversubscribe -np 2 "$kiln" train mnist --steps 100 --no-eval 2>"$err") ||
  { echo "FAIL: mpirun exited with $?"; cat "$err"; echo "$out"; exit 1; }
grep -q "data parallel over 2 MPI ranks" "$err" || { echo "FAIL: no data-parallel line"; cat "$err"; echo "$out"; exit 1; }
lines=$(echo "$out" | grep -c "^final training loss" || true)
[ "$lines" = 1 ] || { echo "FAIL: $lines result lines (only rank 0 prints)"; echo "$out"; exit 1; }
two=$(echo "$out" | sed -n 's/^final training loss (smoothed): //p')
echo "one process: $one, 2 ranks: $two"
awk -v a="$one" -v b="$two" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && d < 0.1) }' || { echo "FAIL: losses differ by more than 0.1"; exit 1; }
# ZeRO-1 (--zero): the same training, with each rank holding AdamW's moments for half of the parameters.
out=$("$mpirun" --allow-run-as-root --oversubscribe -np 2 "$kiln" train mnist --steps 100 --no-eval --zero 2>"$err") ||
  { echo "FAIL: mpirun --zero exited with $?"; cat "$err"; echo "$out"; exit 1; }
memory=$(sed -n 's/.*optimizer state \([0-9]*\) bytes per rank (ZeRO-1 over 2 ranks; \([0-9]*\) bytes unpartitioned).*/\1 \2/p' "$err")
[ -n "$memory" ] || { echo "FAIL: no ZeRO-1 optimizer state line"; cat "$err"; exit 1; }
zero=$(echo "$out" | sed -n 's/^final training loss (smoothed): //p')
echo "ZeRO-1 on 2 ranks: loss $zero; optimizer state per rank and unpartitioned: $memory"
# Each rank's part is half the parameters, the larger one element (two float32 moments) more at most.
echo "$memory" | awk '{ d = 2 * $1 - $2; exit !($2 > 0 && d >= 0 && d <= 8) }' || { echo "FAIL: the per-rank state is not half"; exit 1; }
awk -v a="$one" -v b="$zero" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && d < 0.1) }' || { echo "FAIL: ZeRO-1's loss differs by more than 0.1"; exit 1; }
