#!/bin/sh
# Restart from committed state (kiln train --save/--save-every/--resume under mpirun):
# - 12 steps straight on 2 ranks with ZeRO-1 write the same checkpoint, byte for byte, as 6 steps
#   (committing every 4) and a resume to 12 on 2 ranks: every value that decides a step is in the file;
# - the 6-step checkpoint resumes in one process (no mpirun, no --zero) and finishes, its loss over steps
#   7..12 within 0.02 of the 2-rank resume's (the same global batches; only the summation order differs);
# - a truncated checkpoint and one saved with another --batch-size are refused, naming the file, and
#   --save-every without --save is an error.
#   tests/train_resume.sh MPIRUN KILN
set -eu
mpirun=$1 kiln=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; for f in "$dir"/*.err; do [ -f "$f" ] && { echo "--- $f"; tail -c 2000 "$f"; }; done; exit 1; }
# stdout and stderr apart: mpirun forwards both, and the progress line's bytes may land inside a result line.
on2() { name=$1; shift; "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$kiln" train mnist --no-eval --zero "$@" >"$dir/$name.out" 2>"$dir/$name.err"; }
loss() { sed -n 's/^final training loss (smoothed): //p' "$dir/$1.out"; }

on2 straight --steps 12 --save "$dir/straight.st" || fail "the straight 2-rank run exited with $?"
on2 part --steps 6 --save-every 4 --save "$dir/part.st" || fail "the 6-step 2-rank run exited with $?"
grep -q "saved $dir/part.st (step 4)" "$dir/part.err" || fail "no checkpoint committed at step 4 (--save-every 4)"
grep -q "saved $dir/part.st (step 6)" "$dir/part.err" || fail "no checkpoint committed at the end (step 6)"
cp "$dir/part.st" "$dir/part6.st"
on2 resumed --steps 12 --resume "$dir/part6.st" --save "$dir/resumed.st" || fail "the 2-rank resume exited with $?"
grep -q "resumed $dir/part6.st at step 6" "$dir/resumed.err" || fail "the 2-rank resume does not say it resumed at step 6"
cmp "$dir/straight.st" "$dir/resumed.st" || fail "12 steps straight and 6 + resume + 6 wrote different checkpoints"
echo "2 ranks: 12 steps straight = 6 + resume + 6, byte for byte ($(wc -c <"$dir/straight.st") bytes)"

"$kiln" train mnist --no-eval --steps 12 --resume "$dir/part6.st" >"$dir/one.out" 2>"$dir/one.err" || fail "the 1-rank resume exited with $?"
grep -q "resumed $dir/part6.st at step 6" "$dir/one.err" || fail "the 1-rank resume does not say it resumed at step 6"
one=$(loss one) two=$(loss resumed)
echo "steps 7..12 resumed from the 2-rank checkpoint: 1 rank loss $one, 2 ranks loss $two"
awk -v a="$one" -v b="$two" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && d < 0.02) }' || fail "the losses differ by 0.02 or more"

head -c 3000 "$dir/part6.st" >"$dir/truncated.st"
if "$kiln" train mnist --no-eval --steps 8 --resume "$dir/truncated.st" >/dev/null 2>"$dir/truncated.err"; then fail "a truncated checkpoint was resumed"; fi
grep -q "truncated.st" "$dir/truncated.err" || fail "the error for a truncated checkpoint does not name the file"
if "$kiln" train mnist --no-eval --steps 8 --batch-size 64 --resume "$dir/part6.st" >/dev/null 2>"$dir/batch.err"; then fail "another --batch-size was resumed"; fi
grep -q "was saved with --batch-size 128, this run has 64; resume with --batch-size 128" "$dir/batch.err" || fail "no error naming the batch size"
echo "refused: $(grep -o 'error: .*' "$dir/truncated.err" | head -c 200)"
if "$kiln" train mnist --no-eval --steps 1 --save-every 3 >/dev/null 2>"$dir/every.err"; then fail "--save-every without --save ran"; fi
grep -q "save-every 3 needs a positive number of steps and a --save FILE" "$dir/every.err" || fail "no error naming --save-every"
