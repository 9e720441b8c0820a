#!/bin/sh
# The CUDA checks for a machine with an NVIDIA GPU, run from binaries built elsewhere (this repo's CI
# machines have no GPU). Build here with `make`, copy build/tools/kiln and build/tests/kiln_tests along
# (the device tool's `carry`), then on the GPU machine, from the repository root:
#
#   scripts/gpu-check.sh [OUTDIR]        # OUTDIR: where the logs go (default $OUT, else /tmp/kiln-gpu)
#
# It needs the NVIDIA driver (libcuda.so.1) and NVRTC (libnvrtc.so.*, from the CUDA toolkit; found
# through LD_LIBRARY_PATH, /usr/local/cuda/lib64 is added). Each step has a time limit, so one that
# hangs cannot eat the machine's time; every step runs even when an earlier one fails, and the last
# line says how many failed. Logs: devices.txt, conformance.txt, bench.txt, search.txt.
set -u
out=${1:-${OUT:-/tmp/kiln-gpu}}
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KILN_CACHE_DIR="${KILN_CACHE_DIR:-$out/cache}"
kiln=build/tools/kiln
tests=build/tests/kiln_tests
failed=0

step() {  # step NAME SECONDS COMMAND...: runs COMMAND with a limit, its output to NAME.txt and stdout
  name=$1 limit=$2
  shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" > "$out/$name.txt" 2>&1
  rc=$?
  tail -n 40 "$out/$name.txt"
  if [ $rc -ne 0 ]; then
    echo "== $name FAILED (exit $rc$( [ $rc -eq 124 ] && echo ', over its time limit'))"
    failed=$((failed + 1))
  fi
}

command -v nvidia-smi > /dev/null && nvidia-smi -L
step devices 120 "$kiln" --device CUDA devices --check
step conformance 300 env KILN_DEVICE=CUDA "$tests" "[ops],[fuzz],[tensor],[schedule],[autograd],[nn],[lower]"
step bench 180 "$kiln" --device CUDA bench --quick
step search 240 "$kiln" --device CUDA search matmul 4096 4096 4096 --beam 4
echo "== gpu-check: $failed step(s) failed; logs in $out"
[ $failed -eq 0 ]
