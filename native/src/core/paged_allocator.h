// PagedAllocator: the KV-block pool and the page tables of the contexts that use it.
//
// Data structures and invariants (all under mu_):
//  - Blocks 0..blockCount-1, each one contiguous extent of layout_.blockBytes in memory_.
//    Per block: refs_ (page-table references; raw engine blocks hold exactly 1), generation_ (bumped on
//    every free), tenant_ (owner while used, last owner while free, 0 = clean), fill_ (slots written),
//    readers_ (in-flight reads), kind_ (free / context / raw / zombie / scrubbing).
//  - freeStack_ holds exactly the blocks of kind free, so free + used = total by construction.
//    A block whose refs drop to 0 while readers_ > 0 becomes a zombie and is freed by its last reader;
//    under ScrubPolicy::kAlways a freed block is zeroed outside the lock (kind scrubbing) before it is
//    pushed. Blocks on the free stack are never read or written by anyone.
//  - Contexts live in slots; a handle packs generation x 2^32 + slot. Page tables are append-only except
//    for copy-on-write, which swaps the last page for a private copy before that page is written.
//  - Blocks are shared only by forks, and a fork keeps its parent's tenant, so tenants never share.
//
// Concurrency: every public method is thread-safe. Metadata changes under mu_; bulk byte movement
// (writes, reads, copy-on-write copies, scrubs) runs outside it through leases: beginAppend/beginRead
// take what the copy needs under the lock, the copy runs unlocked, and commit (or the lease's
// destructor) publishes or undoes it under the lock. A context allows any number of reads and at most
// one append at a time; append, fork and release of a context with an append in flight return kBusy.
// A lease must not outlive its allocator.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "block_layout.h"
#include "block_memory.h"
#include "status.h"

namespace kvfabric {

using Handle = uint64_t;

enum class ScrubPolicy : uint8_t { kOnTenantChange, kAlways };

struct PoolConfig {
  ModelShape shape;
  uint32_t tokensPerBlock = 16;
  uint32_t blockCount = 0;
  ScrubPolicy scrub = ScrubPolicy::kOnTenantChange;
  uint32_t maxContexts = 1u << 20;

  static constexpr uint32_t kMaxBlockCount = 0xFFFFFFFEu;
  static constexpr uint32_t kMaxContextsLimit = 1u << 24;
};

struct PoolStats {
  uint64_t totalBlocks = 0, freeBlocks = 0, usedBlocks = 0, sharedBlocks = 0;
  uint64_t blockBytes = 0, totalBytes = 0, usedBytes = 0, freeBytes = 0;
  uint64_t contexts = 0, wasteBytes = 0;
};

struct ContextStats {
  uint32_t tenant = 0;
  uint64_t tokens = 0, blocks = 0, sharedBlocks = 0;
  uint32_t pinCount = 0;
  uint64_t bytes = 0, wasteBytes = 0;
};

class PagedAllocator;

// One range of slots in one block, as seen by a lease.
struct SlotRun {
  uint32_t block;
  uint32_t slot;
  uint32_t count;
};

// Reserved blocks for one append. copyFrom() moves the bytes (no lock); commit() publishes them.
// Destroyed without commit, it gives every reserved block back and leaves the context as it was.
class AppendLease {
 public:
  AppendLease() = default;
  AppendLease(AppendLease&& other) noexcept;
  AppendLease& operator=(AppendLease&& other) noexcept;
  AppendLease(const AppendLease&) = delete;
  AppendLease& operator=(const AppendLease&) = delete;
  ~AppendLease();

  uint64_t bytes() const { return bytes_; }
  void copyFrom(const uint8_t* src);
  // Publishes the copied bytes; kInvalidState (and nothing appended) when copyFrom was not called.
  Status commit();

 private:
  friend class PagedAllocator;
  struct PendingScrub {
    uint32_t block;
    uint32_t previousTenant;
  };
  void reset();

  PagedAllocator* pool_ = nullptr;
  Handle context_ = 0;
  uint64_t tokens_ = 0;
  uint64_t bytes_ = 0;
  bool copied_ = false;
  uint32_t cowSource_ = 0;
  uint32_t cowBlock_ = 0;
  bool cow_ = false;
  std::vector<uint32_t> newBlocks_;  // appended to the page table on commit
  std::vector<PendingScrub> scrubs_;
  std::vector<SlotRun> runs_;
};

// Blocks held against reuse while their bytes are copied out; released by the destructor.
class ReadLease {
 public:
  ReadLease() = default;
  ReadLease(ReadLease&& other) noexcept;
  ReadLease& operator=(ReadLease&& other) noexcept;
  ReadLease(const ReadLease&) = delete;
  ReadLease& operator=(const ReadLease&) = delete;
  ~ReadLease();

  uint64_t bytes() const { return bytes_; }
  void copyTo(uint8_t* dst) const;

 private:
  friend class PagedAllocator;
  void reset();

  PagedAllocator* pool_ = nullptr;
  uint64_t bytes_ = 0;
  bool wholeBlock_ = false;
  std::vector<SlotRun> runs_;
};

class PagedAllocator {
 public:
  // memory may be null: the pool then maps its own host memory.
  static Status create(const PoolConfig& config, std::unique_ptr<BlockMemory> memory,
                       std::unique_ptr<PagedAllocator>* out);
  PagedAllocator(const PagedAllocator&) = delete;
  PagedAllocator& operator=(const PagedAllocator&) = delete;

  const BlockLayout& layout() const { return layout_; }
  ScrubPolicy scrubPolicy() const { return scrub_; }

  Status createContext(uint32_t tenant, Handle* out);
  Status beginAppend(Handle ctx, uint64_t bytes, AppendLease* lease);
  Status beginRead(Handle ctx, uint64_t startToken, uint64_t tokenCount, ReadLease* lease);
  Status beginReadBlock(Handle ctx, uint64_t pageIndex, ReadLease* lease);
  Status fork(Handle ctx, Handle* child);
  Status pin(Handle ctx);
  Status unpin(Handle ctx);
  Status release(Handle ctx);
  Status blockTable(Handle ctx, std::vector<uint32_t>* out) const;
  PoolStats stats() const;
  Status contextStats(Handle ctx, ContextStats* out) const;
  Status allocateBlocks(uint32_t tenant, uint32_t count, Handle* out);
  Status freeBlocks(const Handle* handles, size_t count);

  // Synchronous conveniences over the leases.
  Status append(Handle ctx, const uint8_t* kv, uint64_t bytes);
  Status read(Handle ctx, uint64_t startToken, uint64_t tokenCount, std::vector<uint8_t>* out);

  static Handle packHandle(uint32_t generation, uint32_t index) {
    return (static_cast<uint64_t>(generation) << 32) | index;
  }
  static constexpr uint32_t kMaxGeneration = (1u << 21) - 1;  // keeps handles below 2^53

 private:
  friend class AppendLease;
  friend class ReadLease;

  enum class BlockKind : uint8_t { kFree, kContext, kRaw, kZombie, kScrubbing };

  struct ContextSlot {
    uint32_t generation = 1;
    bool live = false;
    bool appending = false;
    uint32_t tenant = 0;
    uint32_t pinCount = 0;
    uint64_t tokens = 0;
    std::vector<uint32_t> pages;
  };

  PagedAllocator(const PoolConfig& config, const BlockLayout& layout, std::unique_ptr<BlockMemory> memory);

  ContextSlot* findLocked(Handle ctx);
  Status claimSlotLocked(uint32_t tenant, Handle* out);
  const ContextSlot* findLocked(Handle ctx) const;
  // Pops a free block for a tenant; records it in scrubs when it still holds another tenant's bytes.
  uint32_t takeFreeLocked(uint32_t tenant, BlockKind kind, std::vector<AppendLease::PendingScrub>* scrubs);
  void addRefLocked(uint32_t block);
  // Drops one reference; a block reaching zero is freed, or queued in scrubLater under kAlways.
  void dropRefLocked(uint32_t block, std::vector<uint32_t>* scrubLater);
  void retireLocked(uint32_t block, std::vector<uint32_t>* scrubLater);
  void pushFreeLocked(uint32_t block) { kind_[block] = BlockKind::kFree; freeStack_.push_back(block); }
  // Zeroes queued blocks without the lock, then frees them.
  void finishScrubs(std::vector<uint32_t>* scrubLater);
  void scrubPending(const std::vector<AppendLease::PendingScrub>& scrubs);
  void commitAppend(AppendLease* lease);
  void abortAppend(AppendLease* lease);
  void endRead(ReadLease* lease);

  const BlockLayout layout_;
  const uint32_t blockCount_;
  const ScrubPolicy scrub_;
  const uint32_t maxContexts_;
  std::unique_ptr<BlockMemory> memory_;

  mutable std::mutex mu_;
  std::vector<uint32_t> refs_, generation_, tenant_, fill_, readers_;
  std::vector<BlockKind> kind_;
  std::vector<uint8_t> batchMark_;  // scratch for duplicate detection in freeBlocks
  std::vector<uint32_t> freeStack_;
  uint64_t sharedBlocks_ = 0;
  uint64_t filledSlots_ = 0;  // sum of fill_ over blocks not free
  std::vector<ContextSlot> contexts_;
  std::vector<uint32_t> freeSlots_;
  uint64_t liveContexts_ = 0;
};

}  // namespace kvfabric
