#!/bin/sh
# Installs the Debian packages kiln needs, if any are missing. Idempotent and silent when everything
# is present. Not root and something missing: says what to run, and fails.
#
#   scripts/deps.sh            # what `make deps` (and so `make test` and `make demo`) runs
#
# Each issue that brings a dependency adds its packages here, with the reason.
set -eu

PACKAGES="
cmake ninja-build g++
catch2
nlohmann-json3-dev
libcli11-dev
clang
libopenblas-dev
libtorch-dev
zlib1g-dev
dataset-fashion-mnist
"
# cmake, ninja-build, g++: the build.  catch2 (v2): the test suite.  nlohmann-json3-dev: JSON
# (tuning cache, safetensors headers).  libcli11-dev: the kiln command line.  clang: the CPU
# device's kernel compiler (gcc works too, but does not vectorize at -O2).
# libopenblas-dev: the sgemm reference of `kiln bench` (dlopen'ed at run time; optional there).
# libtorch-dev: the test oracle for op semantics and gradients (tests only; skipped when missing).
# zlib1g-dev: gzipped IDX files.  dataset-fashion-mnist: the data of `kiln train mnist` (make demo).

missing=""
for pkg in $PACKAGES; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  case "$status" in
    *"install ok installed"*) ;;
    *) missing="$missing $pkg" ;;
  esac
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "kiln: missing Debian packages:$missing" >&2
  echo "kiln: install them as root:  sudo apt-get install -y$missing   (or run 'sudo make deps')" >&2
  exit 1
fi
echo "kiln: installing Debian packages:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
