#!/usr/bin/env bash
# Builds the addon and the core test with AddressSanitizer + UndefinedBehaviorSanitizer and runs the
# C++ core test (the CPU backend's host memory included), then the suites that touch native code once
# each (the allocator with a 100,000-call fuzz, the tiers, the native attack tests) through the CUDA
# backend on the stand-in driver (scripts/test-cuda-fake.sh, instrumented), which runs the core, the
# addon and the CUDA backend's code together. Any sanitizer report fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
node scripts/build-native.js --sanitize --test
libasan="$(g++ -print-file-name=libasan.so)"
libubsan="$(g++ -print-file-name=libubsan.so)"
# Node itself is not instrumented and keeps memory until exit, so leak checking would only report Node.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
KVFABRIC_FUZZ_CALLS="${KVFABRIC_FUZZ_CALLS:-100000}" LD_PRELOAD="$libasan $libubsan" KVFABRIC_BUILD_DIR="$PWD/build/native-asan" \
  bash scripts/test-cuda-fake.sh "$@"
