#!/usr/bin/env bash
# Runs the suites that touch native code (the allocator, the tiers, the native attacks) once each through
# the CUDA backend's code on a machine without a GPU, with the test-only strict stand-in driver
# (native/test/fake_cuda: host memory, asynchronous streams, the driver API's documented rules enforced).
# Debugs the backend's logic; it is not GPU verification (docs/cuda.md). Tier moves go both ways: the
# allocator suite (whose model-based test drives every tier move) on the kernel path (fake NVRTC), the
# tier suite on the merged-copies path.
#   KVFABRIC_BUILD_DIR   build holding kvfabric.node and libkvfabric_fakecuda.so (default build/native)
#   extra arguments go to vitest; an --outputFile=X.json becomes X.json and X-copies.json
set -euo pipefail
cd "$(dirname "$0")/.."
build="${KVFABRIC_BUILD_DIR:-$PWD/build/native}"
[ -f "$build/libkvfabric_fakecuda.so" ] || node scripts/build-native.js
export KVFABRIC_ADDON="$build/kvfabric.node" KVFABRIC_BACKEND=cuda
export KVFABRIC_LIBCUDA="$build/libkvfabric_fakecuda.so" KVFABRIC_LIBNVRTC="$build/libkvfabric_fakecuda.so"
KVFABRIC_CUDA_TRANSFER=kernel npx vitest run --project unit test/fabric test/security/attacks/native- "$@"
copies_args=()
for a in "$@"; do copies_args+=("${a/%.json/-copies.json}"); done
KVFABRIC_CUDA_TRANSFER=copies npx vitest run --project unit test/tiers ${copies_args[@]+"${copies_args[@]}"}
