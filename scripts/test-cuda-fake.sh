#!/usr/bin/env bash
# Runs the allocator and tier suites (and the native buffer attacks) through the CUDA backend's code on a machine without a GPU, with
# the test-only strict stand-in driver (native/test/fake_cuda: host memory, asynchronous streams, the
# driver API's documented rules enforced). Debugs the backend's logic; it is not GPU verification
# (docs/cuda.md). Tier moves run both ways: the kernel path (fake NVRTC) over everything, then the
# merged-copies path over the tier tests.
#   KVFABRIC_BUILD_DIR   build holding kvfabric.node and libkvfabric_fakecuda.so (default build/native)
#   extra arguments go to vitest; an --outputFile=X.json becomes X.json and X-copies.json
set -euo pipefail
cd "$(dirname "$0")/.."
build="${KVFABRIC_BUILD_DIR:-$PWD/build/native}"
[ -f "$build/libkvfabric_fakecuda.so" ] || node scripts/build-native.js
export KVFABRIC_ADDON="$build/kvfabric.node" KVFABRIC_BACKEND=cuda
export KVFABRIC_LIBCUDA="$build/libkvfabric_fakecuda.so" KVFABRIC_LIBNVRTC="$build/libkvfabric_fakecuda.so"
npx vitest run test/fabric test/tiers test/security/attacks/native-buffer-attacks.test.ts "$@"
copies_args=()
for a in "$@"; do copies_args+=("${a/%.json/-copies.json}"); done
KVFABRIC_CUDA_TRANSFER=copies npx vitest run test/tiers test/fabric/cuda-backend.test.ts ${copies_args[@]+"${copies_args[@]}"}
