#!/usr/bin/env bash
# The GPU session's one script: on a machine with only the GPU driver and the Node binary unpacked
# from .dev/node.xz (scripts/gpu-pack.sh prepared .dev/ beforehand), it probes the device, runs the
# allocator and tier suites on the CUDA backend (tier moves through the auto way, then through merged
# copies), the transfer benchmark and the checksum kernel's share of a move, and writes everything to
# $OUT. Budget: under 6 minutes.
#   NODE     the Node binary (default /tmp/node, where the device command unpacks it)
#   OUT      where results go (default build/gpu-check)
#   KVFABRIC_GPU_CHECK_GIB  bytes per benchmark figure in GiB (default 2)
#   KVFABRIC_GPU_CHECK_RESUME  token counts (e.g. 8k,32k,128k) for a last step: bench/resume.bench.ts
#     through the library on the CUDA backend, from pinned host memory and from disk (the figures of docs/cuda.md;
#     128k is 16 GiB on the device, 16 GiB pinned and 16 GiB on disk). Unset: skipped. Adds up to 4 min.
# Dry run without a GPU: KVFABRIC_LIBCUDA=build/native/libkvfabric_fakecuda.so NODE="$(command -v node)" bash scripts/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
NODE="${NODE:-/tmp/node}"
OUT="${OUT:-$PWD/build/gpu-check}"
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
say() { echo "gpu-check: $*" | tee -a "$summary"; }
elapsed() { echo "$(( $(date +%s) - started )) s"; }

# Node by name for anything that spawns `node`; tests spawn process.execPath, which is this binary too.
bin="$(mktemp -d)"
ln -sf "$(realpath "$NODE")" "$bin/node"
export PATH="$bin:$PATH"
say "node $("$NODE" --version), $(nproc) cores, $(uname -r)"
command -v nvidia-smi >/dev/null && nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1

# node_modules: the carried subset, unless a full install is already here (a dry run on a dev machine).
if [ ! -f node_modules/vitest/package.json ]; then
  [ -L node_modules ] && rm -f node_modules  # a worktree's link that pointed at the dev machine
  mkdir -p node_modules
  tar -C . -xJf .dev/node_modules.tar.xz || { say "cannot unpack .dev/node_modules.tar.xz"; exit 1; }
fi
export KVFABRIC_ADDON="${KVFABRIC_ADDON:-$PWD/.dev/kvfabric.node}"
export KVFABRIC_BACKEND=cuda
# NVRTC (for the gather/scatter kernel) and its builtins library, where the CUDA toolkit puts them.
for dir in /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib64; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done

"$NODE" --require tsx/cjs -e '
  const probe = require("./src/fabric/native-binding").loadNativeBinding().cudaProbe(0);
  require("fs").writeFileSync(process.argv[1], JSON.stringify(probe, null, 2));
  console.log(JSON.stringify(probe));
  process.exit(probe.usable ? 0 : 3);
' "$OUT/probe.json" | tee -a "$summary"
if [ "${PIPESTATUS[0]}" -ne 0 ]; then say "no usable CUDA device: nothing run"; exit 3; fi

status=0
vitest() { timeout "$1" "$NODE" node_modules/vitest/vitest.mjs run "${@:2}" --reporter=default --reporter=json; }
say "suite, tier moves the auto way ($(elapsed))"
vitest 150 test/fabric test/tiers --outputFile="$OUT/vitest-cuda.json" > "$OUT/vitest-cuda.log" 2>&1 || status=1
tail -n 6 "$OUT/vitest-cuda.log" | tee -a "$summary"
say "tier suites, tier moves as merged copies ($(elapsed))"
KVFABRIC_CUDA_TRANSFER=copies vitest 60 test/tiers test/fabric/cuda-backend.test.ts --outputFile="$OUT/vitest-cuda-copies.json" \
  > "$OUT/vitest-cuda-copies.log" 2>&1 || status=1
tail -n 6 "$OUT/vitest-cuda-copies.log" | tee -a "$summary"

say "transfer benchmark ($(elapsed))"
timeout 150 "$NODE" --import tsx bench/transfer.bench.ts --gib "${KVFABRIC_GPU_CHECK_GIB:-2}" --json "$OUT/transfer.json" \
  > "$OUT/transfer.txt" 2>&1 || status=1
cat "$OUT/transfer.txt" >> "$summary"
tail -n 25 "$OUT/transfer.txt"
# What verification costs a restore on the GPU: the checksum kernel's share (verified against
# verifyMoves off, target under 10%), then the CPU's share over the pinned side, for comparison.
say "checksum share of tier moves: device kernel, then CPU ($(elapsed))"
for way in device host; do
  KVFABRIC_CUDA_CHECKSUMS="$way" timeout 90 "$NODE" --import tsx bench/tiers.bench.ts --mib 2048 --rounds 3 \
    --json "$OUT/tiers-$way.json" > "$OUT/tiers-$way.txt" 2>&1 || status=1
  tail -n 9 "$OUT/tiers-$way.txt" | tee -a "$summary"  # from the backend line (which checksum way ran)
done
if [ -n "${KVFABRIC_GPU_CHECK_RESUME:-}" ]; then
  say "resume through the library, ${KVFABRIC_GPU_CHECK_RESUME} tokens ($(elapsed))"
  timeout 240 "$NODE" --import tsx bench/resume.bench.ts --mode library --tokens "$KVFABRIC_GPU_CHECK_RESUME" --repeats 3 \
    --json "$OUT/resume.json" > "$OUT/resume.txt" 2>&1 || status=1
  cat "$OUT/resume.txt" >> "$summary"
  tail -n 12 "$OUT/resume.txt"
fi
say "done in $(elapsed), status $status"
exit $status
