// The lease classes: each holds what one operation reserved under the allocator's lock while its bytes
// move without it, and gives everything back when destroyed uncommitted.
#include <algorithm>
#include <atomic>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "allocator_detail.h"
#include "paged_allocator.h"
#include "parallel_slices.h"

namespace kvfabric {

// ---- leases ----

AppendLease& AppendLease::operator=(AppendLease&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = other.pool_;
    context_ = other.context_;
    tokens_ = other.tokens_;
    bytes_ = other.bytes_;
    copiedTokens_ = other.copiedTokens_;
    nextRun_ = other.nextRun_;
    runOffset_ = other.runOffset_;
    written_ = other.written_;
    copied_ = other.copied_;
    cow_ = other.cow_;
    cowSourceFrame_ = other.cowSourceFrame_;
    cowBlock_ = other.cowBlock_;
    newBlocks_ = std::move(other.newBlocks_);
    grants_ = std::move(other.grants_);
    runs_ = std::move(other.runs_);
    sums_ = std::move(other.sums_);
    other.pool_ = nullptr;
  }
  return *this;
}

void AppendLease::reset() {
  if (pool_) pool_->abortAppend(this);
  pool_ = nullptr;
  tokens_ = bytes_ = copiedTokens_ = 0;
  nextRun_ = 0;
  runOffset_ = 0;
  written_ = copied_ = cow_ = false;
  newBlocks_.clear();
  grants_.clear();
  runs_.clear();
  sums_.clear();
}

void AppendLease::copyNext(const uint8_t* src, uint64_t tokens) {
  if (!pool_ || copied_) return;
  BlockMemory& device = pool_->device_.memory();
  if (!written_) {
    pool_->scrubGrants(&grants_);  // a failure shows as the memory's fault at commit
    if (cow_) device.copyBlock(pool_->blocks_[cowBlock_].frame, cowSourceFrame_);
    written_ = true;
  }
  const uint64_t bytesPerToken = pool_->layout_.bytesPerToken;
  tokens = std::min(tokens, tokensLeft());
  while (tokens > 0) {
    const SlotRun& run = runs_[nextRun_];
    const uint32_t count = static_cast<uint32_t>(std::min<uint64_t>(run.count - runOffset_, tokens));
    device.writeSlots(run.frame, run.slot + runOffset_, count, src);
    // The source is token-major, the checksum's own order: the new bytes extend it, whatever the tier.
    sums_[nextRun_] = crc32c(sums_[nextRun_], src, count * bytesPerToken);
    src += count * bytesPerToken;
    tokens -= count;
    copiedTokens_ += count;
    runOffset_ += count;
    if (runOffset_ == run.count) {
      ++nextRun_;
      runOffset_ = 0;
    }
  }
  copied_ = copiedTokens_ == tokens_;
}

Status AppendLease::commit() {
  if (!pool_) return Status::ok();  // an empty append
  if (!copied_) {
    reset();
    return Status(Code::kInvalidState, "append committed before its bytes were copied; nothing was appended");
  }
  Status fault = pool_->memoryFault();
  if (!fault.isOk()) {
    reset();  // the bytes may not have landed: nothing is appended
    return fault;
  }
  pool_->commitAppend(this);
  pool_ = nullptr;
  reset();
  return Status::ok();
}

ReadLease& ReadLease::operator=(ReadLease&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = other.pool_;
    bytes_ = other.bytes_;
    startToken_ = other.startToken_;
    wholeBlock_ = other.wholeBlock_;
    runs_ = std::move(other.runs_);
    fills_ = std::move(other.fills_);
    checksums_ = std::move(other.checksums_);
    other.pool_ = nullptr;
  }
  return *this;
}

void ReadLease::reset() {
  if (pool_) pool_->endRead(this);
  pool_ = nullptr;
  bytes_ = 0;
  startToken_ = 0;
  wholeBlock_ = false;
  runs_.clear();
  fills_.clear();
  checksums_.clear();
}

void ReadLease::copyTo(uint8_t* dst) const {
  if (!pool_) return;
  if (wholeBlock_) {
    const SlotRun& run = runs_.front();
    pool_->arena(run.tier).memory().readBlock(run.frame, dst);
    return;
  }
  const uint64_t bytesPerToken = pool_->layout_.bytesPerToken;
  for (const SlotRun& run : runs_) {
    pool_->arena(run.tier).memory().readSlots(run.frame, run.slot, run.count, dst);
    dst += run.count * bytesPerToken;
  }
}

MoveLease& MoveLease::operator=(MoveLease&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = other.pool_;
    kind_ = other.kind_;
    context_ = other.context_;
    copied_ = other.copied_;
    fillTarget_ = other.fillTarget_;
    moves_ = std::move(other.moves_);
    diskKeys_ = std::move(other.diskKeys_);
    other.pool_ = nullptr;
  }
  return *this;
}

void MoveLease::reset() {
  if (pool_) pool_->abortMove(this);
  pool_ = nullptr;
  copied_ = false;
  moves_.clear();
  diskKeys_.clear();
}

uint64_t MoveLease::bytes() const { return pool_ ? moves_.size() * pool_->layout_.blockBytes : 0; }

void MoveLease::copy() {
  if (!pool_ || copied_ || kind_ == Kind::kFill) return;
  if (!moves_.empty()) {  // no moves, no host tier needed
    BlockMemory& device = pool_->device_.memory();
    BlockMemory& host = pool_->host_.memory();
    const bool demote = kind_ == Kind::kDemote;
    const BlockChecksum& checksum = pool_->checksum_;
    const bool verify = pool_->verifyMoves_;
    // Both tiers in host memory (the CPU backend's device tier is): one pass copies and sums each block.
    if (device.hostAddress(0) != nullptr) {
      inSlices(moves_.size(), bytes(), [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) {
          Move& move = moves_[i];
          uint8_t* to = demote ? host.hostAddress(move.to.frame) : device.hostAddress(move.to.frame);
          const uint8_t* from = demote ? device.hostAddress(move.fromFrame) : host.hostAddress(move.fromFrame);
          move.sum = checksum.copy(to, from, move.fill, verify);
        }
      });
      copied_ = true;
      return;
    }
    // Device memory the CPU cannot read (CUDA): a restore is summed where it landed, on the device, when
    // the memory can (one launch after the copies); else the host side is summed, before an upload. A
    // download is summed on the host side after it landed.
    const bool sumOnDevice = verify && !demote && device.sumsInPlace();
    if (verify && !demote && !sumOnDevice) sumPinnedSources();
    std::vector<FrameMove> frames;
    try {
      frames.reserve(moves_.size());
    } catch (const std::bad_alloc&) {
      frames.clear();  // no room for the batch: move block by block below
    }
    if (frames.capacity() >= moves_.size()) {
      for (const Move& move : moves_) frames.push_back({move.fromFrame, move.to.frame});
      demote ? device.offloadBlocks(host, frames.data(), frames.size())
             : device.restoreBlocks(host, frames.data(), frames.size());
    } else {
      for (const Move& move : moves_) {
        const FrameMove one{move.fromFrame, move.to.frame};
        demote ? device.offloadBlocks(host, &one, 1) : device.restoreBlocks(host, &one, 1);
      }
    }
    if (verify && demote) {
      for (Move& move : moves_) move.sum = checksum.of(host.hostAddress(move.to.frame), move.fill);
    }
    if (sumOnDevice) sumOnDeviceTier();
  }
  copied_ = true;
}

void MoveLease::sumPinnedSources() {
  for (Move& move : moves_)
    move.sum = pool_->checksum_.of(pool_->host_.memory().hostAddress(move.fromFrame), move.fill);
}

void MoveLease::sumOnDeviceTier() {
  std::vector<uint32_t> frames, fills, sums;
  try {
    frames.reserve(moves_.size());
    fills.reserve(moves_.size());
    sums.resize(moves_.size());
  } catch (const std::bad_alloc&) {  // no room for the lists: the pinned sources (unchanged by the upload)
    sumPinnedSources();
    return;
  }
  for (const Move& move : moves_) {
    frames.push_back(move.to.frame);
    fills.push_back(move.fill);
  }
  pool_->device_.memory().sumBlocks(frames.data(), fills.data(), moves_.size(), sums.data());
  for (size_t i = 0; i < moves_.size(); ++i) moves_[i].sum = sums[i];  // a failed launch is the memory's fault()
}

Status MoveLease::mismatch(const Move& move) const {
  return detail::checksumMismatch(move.page, move.block, move.expected, move.sum);
}

Status MoveLease::write(size_t index, const uint8_t* src, uint64_t length) {
  if (!pool_ || kind_ != Kind::kFill) return Status(Code::kInvalidState, "not a fill in progress");
  if (index >= moves_.size()) return Status(Code::kOutOfRange, "fill has " + std::to_string(moves_.size()) + " blocks");
  if (length != pool_->layout_.blockBytes) {
    return Status(Code::kInvalidArgument,
                  "a block is " + std::to_string(pool_->layout_.blockBytes) + " bytes, got " + std::to_string(length));
  }
  Move& move = moves_[index];
  BlockMemory& memory = pool_->arena(move.to.tier).memory();
  const bool sum = pool_->verifyMoves_;
  if (uint8_t* to = memory.hostAddress(move.to.frame)) {
    move.sum = pool_->checksum_.copy(to, src, move.fill, sum);
  } else {
    if (sum) move.sum = pool_->checksum_.of(src, move.fill);
    memory.writeBlock(move.to.frame, src);
  }
  move.written = true;  // a frame written is scrubbed if the fill is undone, matching or not
  if (pool_->verifyMoves_ && move.sum != move.expected) return mismatch(move);
  return Status::ok();
}

Status MoveLease::commit() {
  if (!pool_) return Status::ok();  // nothing to move
  const bool complete = kind_ == Kind::kFill
                            ? std::all_of(moves_.begin(), moves_.end(), [](const Move& m) { return m.written; })
                            : copied_;
  if (!complete) {
    reset();
    return Status(Code::kInvalidState, "move committed before every block was copied; nothing moved");
  }
  Status fault = pool_->memoryFault();
  if (!fault.isOk()) {
    reset();  // the bytes may not have landed: nothing moves
    return fault;
  }
  if (pool_->verifyMoves_) {  // after the fault: a failed copy explains a wrong sum, not the other way round
    for (const Move& move : moves_) {
      if (move.sum != move.expected) {
        const Status bad = mismatch(move);
        reset();  // the context stays where it was, its bytes there untouched
        return bad;
      }
    }
  }
  pool_->commitMove(this);
  pool_ = nullptr;
  reset();
  return Status::ok();
}

SpillLease& SpillLease::operator=(SpillLease&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = other.pool_;
    context_ = other.context_;
    runs_ = std::move(other.runs_);
    pages_ = std::move(other.pages_);
    fills_ = std::move(other.fills_);
    checksums_ = std::move(other.checksums_);
    other.pool_ = nullptr;
  }
  return *this;
}

void SpillLease::reset() {
  if (pool_) pool_->abortSpill(this);
  pool_ = nullptr;
  runs_.clear();
  pages_.clear();
  fills_.clear();
  checksums_.clear();
}

Status SpillLease::copyBlock(size_t index, uint8_t* dst) const {
  if (!pool_) return Status(Code::kInvalidState, "no spill in progress");
  if (index >= runs_.size()) return Status(Code::kOutOfRange, "spill block index out of range");
  const SlotRun& run = runs_[index];
  BlockMemory& memory = pool_->arena(run.tier).memory();
  const BlockChecksum& checksum = pool_->checksum_;
  const bool verify = pool_->verifyMoves_;
  uint32_t sum;
  if (const uint8_t* from = memory.hostAddress(run.frame)) {
    sum = checksum.copy(dst, from, fills_[index], verify);
  } else {
    memory.readBlock(run.frame, dst);
    Status fault = memory.fault();
    if (!fault.isOk()) return fault;  // the copy failed: its sum would say nothing
    sum = verify ? checksum.of(dst, fills_[index]) : 0;
  }
  // What goes to disk must be what was appended: a block changed in memory is not written as if it were.
  if (verify && sum != checksums_[index])
    return detail::checksumMismatch(pages_[index], run.block, checksums_[index], sum);
  return Status::ok();
}

Status SpillLease::commit(const uint64_t* diskKeys, size_t count, bool dropHostFrames) {
  if (!pool_) return Status(Code::kInvalidState, "no spill in progress");
  Status st = pool_->commitSpill(this, diskKeys, count, dropHostFrames);
  if (!st.isOk()) return st;  // the lease stays open: the caller may retry or drop it
  pool_ = nullptr;
  return Status::ok();
}

}  // namespace kvfabric
