// PagedAllocator: the KV-block pool, the page tables of the contexts that use it, and the placement of
// every block across the device and host tiers (the disk tier lives in TypeScript; here a block only
// records the key of its disk copy).
//
// Data structures and invariants (all under mu_):
//  - Blocks are logical: page tables hold block ids, and a block id never changes while referenced
//    (append-only page tables; copy-on-write swaps only a context's own last page). Per block: refs
//    (page-table references; raw engine blocks hold exactly 1), activeRefs (references from resident
//    contexts), generation (bumped on every free), tenant, fill (slots written), readers (in-flight
//    reads and spills), tier + frame (where its bytes are: a device frame, a host frame, or none when
//    only the disk copy remains), diskKey (the TS disk tier's key for a clean copy on disk, 0 = none),
//    moving (a tier move is in flight), checksum (block_checksum.h: CRC-32C of its filled tokens, set by
//    the append that writes them, or by the manifest an imported context comes with).
//  - Every tier move checks each block it copies against its checksum while copying it (verifyMoves), so
//    bytes that changed at rest or in flight fail the move with kIntegrity naming the page, and the
//    context stays where it was.
//  - Frames are the physical slots of each tier (FrameArena). free + used = total per tier by
//    construction. A frame is zeroed before another context (kAlways) or tenant (kOnTenantChange) can
//    read it.
//  - A resident context has every block on the device. Offloading (demote) moves to the host only the
//    blocks no other resident context uses; blocks shared by forks therefore move once, come back once
//    and stay shared. Spilling writes disk copies of blocks that have none, and may then drop host
//    frames; filling brings disk-only blocks back to host frames; promote brings host blocks to the
//    device and makes the context resident again.
//  - A block whose refs drop to 0 while readers > 0 becomes a zombie, freed by its last reader. Freed
//    blocks' disk keys are queued for the disk tier to delete (takeFreedDiskKeys).
//  - Blocks are shared only by forks, and a fork keeps its parent's tenant, so tenants never share.
//
// Concurrency: every public method is thread-safe. Metadata changes under mu_; bulk byte movement runs
// outside it through leases: begin* takes what the copy needs under the lock, the copy runs unlocked,
// and commit (or the lease's destructor, which undoes everything) publishes under the lock. A context
// allows any number of reads and at most one mutating lease (append, demote, promote, spill, fill) at
// a time; conflicting calls return kBusy instead of waiting. A lease must not outlive its allocator.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "block_checksum.h"
#include "block_layout.h"
#include "block_memory.h"
#include "frame_arena.h"
#include "plane_major.h"
#include "status.h"

namespace kvfabric {

using Handle = uint64_t;

// kAlways (the default): a frame that held any context's bytes is zeroed before another context gets it.
// kOnTenantChange: only before another tenant gets it (a tenant's new context may read its released
// ones' bytes); an opt-out for measurements (bench/scrub.bench.ts). Either way the zeroing happens when
// a frame is handed out again, never on release, and not for bytes the new owner overwrites at once.
enum class ScrubPolicy : uint8_t { kOnTenantChange, kAlways };
// Where a page's bytes are: kDisk when only its disk copy remains (no frame in either tier; a free
// block's meta holds it too, as "no frame"). The values cross to JS as numbers (pageTiers): keep them.
enum class Tier : uint8_t { kDisk = 0, kDevice = 1, kHost = 2 };

struct PoolConfig {
  ModelShape shape;
  uint32_t tokensPerBlock = 16;
  uint32_t blockCount = 0;      // device frames
  uint32_t hostBlockCount = 0;  // host-tier frames (0: no host tier)
  ScrubPolicy scrub = ScrubPolicy::kAlways;
  uint32_t maxContexts = 1u << 20;
  // Check every block a tier move copies against its checksum. Off only to measure what the check costs.
  bool verifyMoves = true;

  static constexpr uint32_t kMaxBlockCount = 0xFFFFFFFEu;
  static constexpr uint32_t kMaxContextsLimit = 1u << 24;
};

struct TierStats {
  uint64_t totalBlocks = 0, freeBlocks = 0, usedBlocks = 0;
};

struct PoolStats {
  // The device tier, and pool-wide figures.
  uint64_t totalBlocks = 0, freeBlocks = 0, usedBlocks = 0, sharedBlocks = 0;
  uint64_t blockBytes = 0, totalBytes = 0, usedBytes = 0, freeBytes = 0;
  uint64_t contexts = 0, wasteBytes = 0;
  TierStats host;
  uint64_t diskOnlyBlocks = 0;  // blocks whose only copy is on disk
  uint64_t diskCopies = 0;      // blocks with a disk copy, wherever else they are
};

struct ContextStats {
  uint32_t tenant = 0;
  uint64_t tokens = 0, blocks = 0, sharedBlocks = 0;
  uint32_t pinCount = 0;
  uint64_t bytes = 0, wasteBytes = 0;
  bool resident = true;
  uint64_t devicePages = 0, hostPages = 0, diskOnlyPages = 0, diskCopies = 0;
};

// The blocks one tenant holds in memory, each counted once however many of its contexts share it (forks
// share, and a fork keeps its parent's tenant): what per-tenant quotas and fair eviction are judged by.
struct TenantBlocks {
  uint32_t tenant = 0;
  uint64_t device = 0, host = 0;
  uint64_t pinned = 0;  // device and host blocks of its pinned contexts
};

class PagedAllocator;

// A run of slots in one block's frame, resolved when a lease begins.
struct SlotRun {
  uint32_t block;
  Tier tier;
  uint32_t frame;
  uint32_t slot;
  uint32_t count;
};

// A frame taken for a lease, with what is needed to give it back untouched.
struct FrameGrant {
  Tier tier;
  uint32_t frame;
  uint32_t previousTenant;
  bool needsScrub;
  bool scrubFailed = false;  // its previous tenant's bytes may still be there: never handed out again
  bool overwritten = false;  // not scrubbed since its lease writes all of it: zeroed if the lease stops midway
};

// Reserved blocks for one append. copyFrom() (or copyNext() piece by piece) moves the bytes (no lock);
// commit() publishes them. Destroyed without commit, it gives every reserved block back and leaves the
// context as it was.
class AppendLease {
 public:
  AppendLease() = default;
  AppendLease(AppendLease&& other) noexcept { *this = std::move(other); }
  AppendLease& operator=(AppendLease&& other) noexcept;
  AppendLease(const AppendLease&) = delete;
  AppendLease& operator=(const AppendLease&) = delete;
  ~AppendLease() { reset(); }

  uint64_t bytes() const { return bytes_; }
  uint64_t tokens() const { return tokens_; }
  // Tokens copyNext has not copied yet.
  uint64_t tokensLeft() const { return tokens_ - copiedTokens_; }
  void copyFrom(const uint8_t* src) { copyNext(src, tokens_); }
  // Copies the next `tokens` tokens of the append (token-major bytes at src), so a caller can hand the
  // bytes over in pieces from a buffer of its own. The first call scrubs and copies-on-write first.
  void copyNext(const uint8_t* src, uint64_t tokens);
  // Publishes the copied bytes; kInvalidState (and nothing appended) unless every token was copied.
  Status commit();

 private:
  friend class PagedAllocator;
  void reset();

  PagedAllocator* pool_ = nullptr;
  Handle context_ = 0;
  uint64_t tokens_ = 0;
  uint64_t bytes_ = 0;
  uint64_t copiedTokens_ = 0;
  size_t nextRun_ = 0;     // the run copyNext continues in...
  uint32_t runOffset_ = 0;  // ...and how many of its tokens are in already
  bool written_ = false;   // some bytes reached the frames (an undo must not hand them back as untouched)
  bool copied_ = false;    // every token reached the frames
  bool cow_ = false;
  uint32_t cowSourceFrame_ = 0;
  uint32_t cowBlock_ = 0;
  std::vector<uint32_t> newBlocks_;  // appended to the page table on commit
  std::vector<FrameGrant> grants_;   // frames of cowBlock_ and newBlocks_
  std::vector<SlotRun> runs_;
  std::vector<uint32_t> sums_;  // per run: its block's checksum before (at begin), after (copyNext)
};

// Blocks held against reuse and movement while their bytes are copied out.
class ReadLease {
 public:
  ReadLease() = default;
  ReadLease(ReadLease&& other) noexcept { *this = std::move(other); }
  ReadLease& operator=(ReadLease&& other) noexcept;
  ReadLease(const ReadLease&) = delete;
  ReadLease& operator=(const ReadLease&) = delete;
  ~ReadLease() { reset(); }

  uint64_t bytes() const { return bytes_; }
  void copyTo(uint8_t* dst) const;
  // Copies the leased tokens into `dst` laid out plane-major (plane_major.h), checking every block
  // against its checksum as it reads it: kIntegrity naming the first page that does not match (the
  // bytes already copied are then not to be used). `dst` holds layout.extent() bytes. (plane_major.cc)
  Status copyPlaneMajor(const PlaneMajorLayout& layout, uint8_t* dst);

 private:
  friend class PagedAllocator;
  void reset();

  PagedAllocator* pool_ = nullptr;
  uint64_t bytes_ = 0;
  uint64_t startToken_ = 0;
  bool wholeBlock_ = false;
  std::vector<SlotRun> runs_;
  std::vector<uint32_t> fills_;      // per run: the tokens its block's checksum covered at begin
  std::vector<uint32_t> checksums_;  // per run: that checksum
};

// One context's blocks moving between the device and host tiers (demote, promote) or arriving from
// disk into host or device frames (fill). Destroyed without commit, it undoes the move.
class MoveLease {
 public:
  enum class Kind : uint8_t { kDemote, kPromote, kFill };

  MoveLease() = default;
  MoveLease(MoveLease&& other) noexcept { *this = std::move(other); }
  MoveLease& operator=(MoveLease&& other) noexcept;
  MoveLease(const MoveLease&) = delete;
  MoveLease& operator=(const MoveLease&) = delete;
  ~MoveLease() { reset(); }

  size_t blocks() const { return moves_.size(); }
  uint64_t bytes() const;
  // Fill: the disk keys whose bytes write() expects, in order.
  const std::vector<uint64_t>& diskKeys() const { return diskKeys_; }
  // Demote and promote: copies every block between the tiers (no lock), summing what it copies.
  void copy();
  // Fill: one block's bytes from disk, blockBytes long; kIntegrity (nothing written) when they do not
  // match the page's checksum.
  Status write(size_t index, const uint8_t* src, uint64_t length);
  // kIntegrity, undoing the move, when a copied block did not match its checksum.
  Status commit();

 private:
  friend class PagedAllocator;
  struct Move {
    uint32_t block;
    uint32_t fromFrame;
    FrameGrant to;
    bool written;
    uint32_t page;      // its index in the context's page table, for the error that names it
    uint32_t fill;      // tokens its checksum covers
    uint32_t expected;  // its checksum when the move began
    uint32_t sum;       // what the copy summed
  };
  void reset();
  Status mismatch(const Move& move) const;
  // Promote on memory that sums in place: every landed block summed in one call (the CUDA kernel).
  void sumOnDeviceTier();
  // Promote on memory that cannot: each block's host-tier source.
  void sumPinnedSources();

  PagedAllocator* pool_ = nullptr;
  Kind kind_ = Kind::kDemote;
  Handle context_ = 0;
  bool copied_ = false;
  Tier fillTarget_ = Tier::kHost;
  std::vector<Move> moves_;
  std::vector<uint64_t> diskKeys_;
};

// A context's blocks that have no disk copy yet, held while the disk tier writes them.
class SpillLease {
 public:
  SpillLease() = default;
  SpillLease(SpillLease&& other) noexcept { *this = std::move(other); }
  SpillLease& operator=(SpillLease&& other) noexcept;
  SpillLease(const SpillLease&) = delete;
  SpillLease& operator=(const SpillLease&) = delete;
  ~SpillLease() { reset(); }

  size_t blocks() const { return runs_.size(); }
  // Copies one block's bytes out; kIntegrity when they no longer match its checksum.
  Status copyBlock(size_t index, uint8_t* dst) const;
  // Records one disk key per block (non-zero), then, when dropHostFrames and the context is not
  // resident, frees the host frames of its blocks that now live on disk.
  Status commit(const uint64_t* diskKeys, size_t count, bool dropHostFrames);

 private:
  friend class PagedAllocator;
  void reset();

  PagedAllocator* pool_ = nullptr;
  Handle context_ = 0;
  std::vector<SlotRun> runs_;
  std::vector<uint32_t> pages_;      // per run: its index in the page table
  std::vector<uint32_t> fills_;      // per run: tokens its checksum covers
  std::vector<uint32_t> checksums_;  // per run: its checksum when the spill began
};

class PagedAllocator {
 public:
  // Checks config and derives the block layout, touching no memory: a backend validates before it
  // allocates, so bad options fail the same way on every backend.
  static Status validate(const PoolConfig& config, BlockLayout* layout);
  // Either memory may be null: the pool then maps its own host memory for that tier (the CPU backend).
  // The CUDA backend passes device memory and pinned host memory (native/src/cuda).
  static Status create(const PoolConfig& config, std::unique_ptr<BlockMemory> memory,
                       std::unique_ptr<PagedAllocator>* out) {
    return create(config, std::move(memory), nullptr, out);
  }
  static Status create(const PoolConfig& config, std::unique_ptr<BlockMemory> device, std::unique_ptr<BlockMemory> host,
                       std::unique_ptr<PagedAllocator>* out);
  PagedAllocator(const PagedAllocator&) = delete;
  PagedAllocator& operator=(const PagedAllocator&) = delete;

  const BlockLayout& layout() const { return layout_; }
  const BlockChecksum& checksum() const { return checksum_; }
  uint32_t deviceBlocks() const { return device_.frames(); }  // fixed at creation
  ScrubPolicy scrubPolicy() const { return scrub_; }

  Status createContext(uint32_t tenant, Handle* out);
  Status beginAppend(Handle ctx, uint64_t bytes, AppendLease* lease);
  Status beginRead(Handle ctx, uint64_t startToken, uint64_t tokenCount, ReadLease* lease);
  Status beginReadBlock(Handle ctx, uint64_t pageIndex, ReadLease* lease);
  Status fork(Handle ctx, Handle* child);
  // A fork of the context's first `blocks` pages only, each full (kOutOfRange otherwise): a prefix shared
  // without the pages after it, and never a block still being filled.
  Status forkPrefix(Handle ctx, uint64_t blocks, Handle* child);
  Status pin(Handle ctx);
  Status unpin(Handle ctx);
  Status release(Handle ctx);
  Status blockTable(Handle ctx, std::vector<uint32_t>* out) const;
  PoolStats stats() const;
  // The first failure either tier's memory could not return from a copy (a driver error); ok on CPU.
  Status memoryFault() const;
  Status contextStats(Handle ctx, ContextStats* out) const;
  // Every tenant holding a block in device or host memory, ordered by tenant id.
  std::vector<TenantBlocks> tenantBlocks() const;
  Status allocateBlocks(uint32_t tenant, uint32_t count, Handle* out);
  Status freeBlocks(const Handle* handles, size_t count);

  // Tiers.
  Status beginDemote(Handle ctx, MoveLease* lease);   // resident -> offloaded; exclusive blocks to host
  Status beginPromote(Handle ctx, MoveLease* lease);  // offloaded -> resident; host blocks to device
  // Disk-only blocks of an offloaded context to host frames; or straight to device frames, for a context
  // with no page in host memory: its commit then makes the context resident (a restore from disk that
  // needs no host room and copies each block once). kInvalidState for a device fill with host pages.
  Status beginFill(Handle ctx, MoveLease* lease, Tier target = Tier::kHost);
  Status beginSpill(Handle ctx, SpillLease* lease);   // blocks without a disk copy, to be written
  // An offloaded context whose pages exist only on disk (a restore in a new process). checksums (one per
  // page, from its manifest) are what each page's fill is checked against; required.
  Status importContext(uint32_t tenant, uint64_t tokens, const uint64_t* diskKeys, const uint32_t* checksums,
                       size_t pages, Handle* out);
  std::vector<uint64_t> takeFreedDiskKeys();
  // Each page's disk key, 0 where the page has no disk copy (what a manifest records).
  Status pageDiskKeys(Handle ctx, std::vector<uint64_t>* out) const;
  // Forgets the disk copies named by keys on the context's pages (their files are gone), so the next spill
  // writes them again; kIntegrity, changing nothing, when such a page has no other copy.
  Status forgetDiskCopies(Handle ctx, const uint64_t* keys, size_t count);
  // Each page's tier: kDevice, kHost, or kDisk when only its disk copy remains.
  Status pageTiers(Handle ctx, std::vector<Tier>* out) const;
  // Each page's checksum (block_checksum.h).
  Status pageChecksums(Handle ctx, std::vector<uint32_t>* out) const;

  // Synchronous conveniences over the leases.
  Status append(Handle ctx, const uint8_t* kv, uint64_t bytes);
  Status read(Handle ctx, uint64_t startToken, uint64_t tokenCount, std::vector<uint8_t>* out);
  Status demote(Handle ctx);
  Status promote(Handle ctx);

  static Handle packHandle(uint32_t generation, uint32_t index) {
    return (static_cast<uint64_t>(generation) << 32) | index;
  }
  static constexpr uint32_t kMaxGeneration = (1u << 21) - 1;  // keeps handles below 2^53

 private:
  friend class AppendLease;
  friend class ReadLease;
  friend class MoveLease;
  friend class SpillLease;

  enum class BlockKind : uint8_t { kFree, kContext, kRaw, kZombie };

  struct BlockMeta {
    uint32_t refs = 0;
    uint32_t activeRefs = 0;
    uint32_t generation = 1;
    uint32_t tenant = 0;
    uint32_t fill = 0;
    uint32_t readers = 0;
    uint32_t frame = 0;
    uint32_t checksum = 0;  // of zero tokens: CRC-32C of nothing
    BlockKind kind = BlockKind::kFree;
    Tier tier = Tier::kDisk;
    bool moving = false;
    bool batchMark = false;
    uint64_t diskKey = 0;  // fields ordered so the struct stays 48 bytes: a pool walks many of them
  };

  struct ContextSlot {
    uint32_t generation = 1;
    bool live = false;
    bool busy = false;  // a mutating lease is in flight
    bool resident = true;
    uint32_t tenant = 0;
    uint32_t pinCount = 0;
    uint64_t tokens = 0;
    std::vector<uint32_t> pages;
  };

  struct FrameRef {
    Tier tier;
    uint32_t frame;
  };

  PagedAllocator(const PoolConfig& config, const BlockLayout& layout, std::unique_ptr<BlockMemory> device,
                 std::unique_ptr<BlockMemory> host);

  FrameArena& arena(Tier tier) { return tier == Tier::kDevice ? device_ : host_; }
  const FrameArena& arena(Tier tier) const { return tier == Tier::kDevice ? device_ : host_; }

  ContextSlot* findLocked(Handle ctx);
  // fork() of the first `blocks` pages (all of them when blocks is nullptr).
  Status forkPages(Handle ctx, const uint64_t* blocks, Handle* child);
  const ContextSlot* findLocked(Handle ctx) const;
  Status claimSlotLocked(uint32_t tenant, Handle* out);
  // Makes room for `count` more block ids so creating them cannot throw midway through an operation.
  Status reserveBlockIdsLocked(size_t count);
  uint32_t newBlockLocked(uint32_t tenant, BlockKind kind, uint32_t fill);
  FrameGrant takeFrameLocked(Tier tier, uint32_t tenant);
  // Undoes takeFrameLocked: untouched frames keep their previous owner, written ones are this one's now.
  void returnGrantLocked(const FrameGrant& grant, bool written);
  void releaseFrameLocked(Tier tier, uint32_t frame);
  void discardBlockIdLocked(uint32_t block);  // an id that never escaped a failed lease
  void addRefLocked(uint32_t block);
  void dropRefLocked(uint32_t block);
  void retireLocked(uint32_t block);
  void setDiskKeyLocked(uint32_t block, uint64_t key);
  void setTierLocked(uint32_t block, Tier tier, uint32_t frame);
  void endReadersLocked(const std::vector<SlotRun>& runs);
  // Zeroes queued frames without the lock, then frees them as clean; frames whose scrub may have failed
  // (the memory reports a fault) are withheld instead, since their old bytes may still be there.
  void finishScrubs(std::vector<FrameRef>* scrubLater);
  // Zeroes the grants that need it; false (and scrubFailed set) when the memory reports a fault after.
  bool scrubGrants(std::vector<FrameGrant>* grants);

  void commitAppend(AppendLease* lease);
  void abortAppend(AppendLease* lease);
  void endRead(ReadLease* lease);
  Status beginMoveLocked(ContextSlot* c, Handle ctx, MoveLease::Kind kind, Tier fillTarget, MoveLease* lease);
  void commitMove(MoveLease* lease);
  void abortMove(MoveLease* lease);
  // One value per page of a context, taken from its block's metadata (the per-page views).
  template <typename T, typename Field>
  Status perPage(Handle ctx, std::vector<T>* out, Field field) const;
  Status commitSpill(SpillLease* lease, const uint64_t* diskKeys, size_t count, bool dropHostFrames);
  void abortSpill(SpillLease* lease);

  const BlockLayout layout_;
  const BlockChecksum checksum_;
  const bool verifyMoves_;
  const ScrubPolicy scrub_;
  const uint32_t maxContexts_;

  mutable std::mutex mu_;
  FrameArena device_;
  FrameArena host_;
  std::vector<BlockMeta> blocks_;
  std::vector<uint32_t> freeIds_;
  uint64_t liveBlocks_ = 0;
  uint64_t sharedBlocks_ = 0;
  uint64_t filledSlots_ = 0;  // sum of fill over live blocks
  uint64_t diskOnlyBlocks_ = 0;
  uint64_t diskCopies_ = 0;
  std::vector<uint64_t> freedDiskKeys_;
  std::vector<ContextSlot> contexts_;
  std::vector<uint32_t> freeSlots_;
  uint64_t liveContexts_ = 0;
};

}  // namespace kvfabric
