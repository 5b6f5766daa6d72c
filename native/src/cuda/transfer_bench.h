// The transfer benchmark's native half: moves scattered blocks between device memory and pinned host
// memory through each BlockTransfer way, and the same bytes as one contiguous copy (the ceiling), in
// one run on one set of buffers, so every figure can be read as a ratio to the same-run ceiling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "status.h"

namespace kvfabric::cuda {

struct TransferBenchConfig {
  int device = 0;
  uint64_t totalBytes = uint64_t{1} << 30;  // moved per figure, per direction
  std::vector<uint64_t> blockBytes;
  int repeats = 3;  // best of
};

struct TransferFigure {
  std::string way;        // contiguous, copies, kernel
  std::string direction;  // d2h, h2d, duplex
  uint64_t blockBytes = 0;  // 0 for contiguous
  uint64_t bytes = 0;       // per run (both directions together for duplex)
  double seconds = 0;       // best run
  std::string skipped;      // why the way could not run
};

struct TransferBenchResult {
  std::string deviceName;
  std::string kernelStatus;  // "ready" or why not
  std::vector<TransferFigure> figures;
};

Status runTransferBench(const TransferBenchConfig& config, TransferBenchResult* out);

}  // namespace kvfabric::cuda
