#!/bin/sh
# Builds the libFuzzer targets with clang 15 (build-fuzz/, ASan + UBSan) and runs each for a fixed time
# from its committed seed corpus (fuzz/corpus/<target>/). What .ci/run calls; see fuzz/README.md.
#
#   fuzz/run.sh              every target, FUZZ_SECONDS (default 25) each
#   fuzz/run.sh idx 300      one target for 300 s
#
# Exits non-zero when a target finds a crash, a sanitizer report, an InternalError or an exception that
# is not a kiln::Error; the input is kept as fuzz/regressions/<target>/crash-<sha1>, a file to commit:
# every later run replays it first. Without clang++-15 it says so and exits 0 (skipped).
set -eu
cd "$(dirname "$0")/.."
CXX_FUZZ=${CXX_FUZZ:-clang++-15}
if ! command -v "$CXX_FUZZ" >/dev/null 2>&1; then
  echo "fuzz: skipped: $CXX_FUZZ not found (Debian clang-15; PoCL installs it); the fuzz targets need clang 15's libFuzzer"
  exit 0
fi
TARGETS="safetensors idx idx_gzip tuning_cache checkpoint kernel_text"
[ $# -ge 1 ] && TARGETS=$1
SECONDS_EACH=${2:-${FUZZ_SECONDS:-25}}
JOBS=${JOBS:-$(nproc)}
# The targets that read paths write scratch files (and the tuning cache fsyncs): on tmpfs when there is
# one. Compiled kernels go to the build folder, not to the user's cache.
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=${TMPDIR:-/dev/shm}
export KILN_CACHE_DIR=$PWD/build-fuzz/kiln-cache
GENERATOR=$(command -v ninja >/dev/null 2>&1 && echo "-G Ninja" || true)
# -O1 and line tables only: the build is most of this step's time (about 5 minutes on 2 cores), and
# libFuzzer needs no more to fuzz fast and print stack traces.
test -f build-fuzz/CMakeCache.txt ||
  cmake -S . -B build-fuzz $GENERATOR -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -gline-tables-only" \
    -DCMAKE_CXX_COMPILER="$CXX_FUZZ" -DKILN_FUZZ=ON -DKILN_BUILD_TESTS=OFF
cmake --build build-fuzz -j "$JOBS" --target fuzz
failed=""
for t in $TARGETS; do
  corpus=fuzz/corpus/$t
  regressions=fuzz/regressions/$t
  work=build-fuzz/corpus/$t  # what the run adds to the seeds stays out of git
  mkdir -p "$work" "$regressions"
  # Replay every kept crash first: each must now be answered with a kiln::Error.
  if [ -n "$(ls -A "$regressions")" ]; then
    if ! ASAN_OPTIONS=detect_leaks=0 build-fuzz/fuzz/fuzz_$t -runs=0 "$regressions"/* >build-fuzz/fuzz_$t.replay.log 2>&1; then
      echo "fuzz: $t: a kept regression input fails again (build-fuzz/fuzz_$t.replay.log)"
      failed="$failed $t"
      continue
    fi
  fi
  echo "fuzz: $t for ${SECONDS_EACH} s from $corpus"
  # detect_leaks=0: kiln keeps interned UOps and devices for the process; rss_limit bounds a bomb.
  if ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 build-fuzz/fuzz/fuzz_$t -max_total_time="$SECONDS_EACH" \
       -rss_limit_mb=4096 -timeout=20 -max_len=65536 -print_final_stats=1 -artifact_prefix="$regressions/" "$work" "$corpus" \
       >build-fuzz/fuzz_$t.log 2>&1; then
    grep -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" build-fuzz/fuzz_$t.log | tail -2 | sed "s/^/fuzz: $t: /"
  else
    echo "fuzz: $t FOUND A PROBLEM; the input is in $regressions/ (commit it). Log: build-fuzz/fuzz_$t.log"
    grep -E "ERROR|fuzz: |SUMMARY|==[0-9]+==" build-fuzz/fuzz_$t.log | head -20
    failed="$failed $t"
  fi
done
if [ -n "$failed" ]; then
  echo "fuzz: FAILED:$failed"
  exit 1
fi
echo "fuzz: every target ran ${SECONDS_EACH} s with no finding"
