#!/usr/bin/env bash
# Builds the addon and the core test with AddressSanitizer + UndefinedBehaviorSanitizer and runs the
# C++ core test, the allocator and tier suites, the native attack tests (test/security/attacks/native-*)
# and a 100,000-call fuzz of the addon on that build, then the same suites through the CUDA backend on
# the stand-in driver (scripts/test-cuda-fake.sh, also instrumented). Any sanitizer report fails the
# run. An --outputFile=X.json argument is split per pass.
set -euo pipefail
cd "$(dirname "$0")/.."
node scripts/build-native.js --sanitize --test
libasan="$(g++ -print-file-name=libasan.so)"
libubsan="$(g++ -print-file-name=libubsan.so)"
# Node itself is not instrumented and keeps memory until exit, so leak checking would only report Node.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
KVFABRIC_FUZZ_CALLS="${KVFABRIC_FUZZ_CALLS:-100000}" LD_PRELOAD="$libasan $libubsan" KVFABRIC_ADDON="$PWD/build/native-asan/kvfabric.node" \
  npx vitest run test/fabric test/tiers test/security/attacks/native- "$@"
cuda_args=()
for a in "$@"; do cuda_args+=("${a/%.json/-cuda-fake.json}"); done
KVFABRIC_FUZZ_CALLS="${KVFABRIC_FUZZ_CALLS:-20000}" LD_PRELOAD="$libasan $libubsan" KVFABRIC_BUILD_DIR="$PWD/build/native-asan" \
  bash scripts/test-cuda-fake.sh ${cuda_args[@]+"${cuda_args[@]}"}
