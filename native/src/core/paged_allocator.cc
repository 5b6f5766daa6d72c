// PagedAllocator: construction, block and frame bookkeeping, contexts and raw blocks. Tier moves are in
// tier_moves.cc, the leases in leases.cc; the header has the data structures, invariants and locking rules.
#include "paged_allocator.h"

#include <algorithm>
#include <map>
#include <new>
#include <string>

#include "allocator_detail.h"

namespace kvfabric {

using namespace detail;

// ---- construction ----

Status PagedAllocator::validate(const PoolConfig& config, BlockLayout* layout) {
  Status st = BlockLayout::make(config.shape, config.tokensPerBlock, layout);
  if (!st.isOk()) return st;
  if (config.blockCount == 0 || config.blockCount > PoolConfig::kMaxBlockCount) {
    return Status(Code::kInvalidArgument, "blockCount must be in [1, 2^32 - 2]");
  }
  if (config.hostBlockCount > PoolConfig::kMaxBlockCount - config.blockCount) {
    return Status(Code::kInvalidArgument, "blockCount + hostBlockCount must be at most 2^32 - 2");
  }
  if (config.maxContexts == 0 || config.maxContexts > PoolConfig::kMaxContextsLimit) {
    return Status(Code::kInvalidArgument, "maxContexts must be in [1, 2^24]");
  }
  return Status::ok();
}

Status PagedAllocator::create(const PoolConfig& config, std::unique_ptr<BlockMemory> memory,
                              std::unique_ptr<BlockMemory> host, std::unique_ptr<PagedAllocator>* out) {
  BlockLayout layout;
  Status st = validate(config, &layout);
  if (!st.isOk()) return st;
  if (!memory) {
    st = HostBlockMemory::create(layout, config.blockCount, &memory);
    if (!st.isOk()) return st;
  }
  if (config.hostBlockCount > 0 && !host) {
    st = HostBlockMemory::create(layout, config.hostBlockCount, &host);
    if (!st.isOk()) return st;
  }
  try {
    out->reset(new PagedAllocator(config, layout, std::move(memory), std::move(host)));
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  return Status::ok();
}

Status PagedAllocator::memoryFault() const {
  Status st = device_.memory().fault();
  if (st.isOk() && host_.frames() > 0) st = host_.memory().fault();
  return st;
}

PagedAllocator::PagedAllocator(const PoolConfig& config, const BlockLayout& layout, std::unique_ptr<BlockMemory> device,
                               std::unique_ptr<BlockMemory> host)
    : layout_(layout),
      checksum_(layout),
      verifyMoves_(config.verifyMoves),
      scrub_(config.scrub),
      maxContexts_(config.maxContexts),
      device_(std::move(device), config.blockCount),
      host_(std::move(host), config.hostBlockCount) {
  // One id per frame up front; ids beyond that (blocks whose only copy is on disk) grow on demand.
  const size_t ids = size_t{config.blockCount} + config.hostBlockCount;
  blocks_.resize(ids);
  freeIds_.reserve(ids);
  for (size_t b = ids; b-- > 0;) freeIds_.push_back(static_cast<uint32_t>(b));
}

// ---- blocks and frames (mu_ held) ----

Status PagedAllocator::reserveBlockIdsLocked(size_t count) {
  if (count <= freeIds_.size()) return Status::ok();
  const size_t grow = count - freeIds_.size();
  if (blocks_.size() + grow > PoolConfig::kMaxBlockCount) {
    return Status(Code::kPoolExhausted, "block id space exhausted");
  }
  try {
    blocks_.reserve(blocks_.size() + grow);
    freeIds_.reserve(freeIds_.size() + grow);
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  for (size_t i = 0; i < grow; ++i) {
    blocks_.emplace_back();
    freeIds_.push_back(static_cast<uint32_t>(blocks_.size() - 1));
  }
  return Status::ok();
}

uint32_t PagedAllocator::newBlockLocked(uint32_t tenant, BlockKind kind, uint32_t fill) {
  const uint32_t b = freeIds_.back();
  freeIds_.pop_back();
  BlockMeta& m = blocks_[b];
  const uint32_t generation = m.generation;
  m = BlockMeta();
  m.generation = generation;
  m.refs = 1;
  m.tenant = tenant;
  m.kind = kind;
  m.fill = fill;
  filledSlots_ += fill;
  ++liveBlocks_;
  return b;
}

FrameGrant PagedAllocator::takeFrameLocked(Tier tier, uint32_t tenant) {
  FrameGrant grant{tier, 0, 0, false, false};
  grant.frame = arena(tier).take(tenant, &grant.previousTenant);
  grant.needsScrub = grant.previousTenant != 0 && (scrub_ == ScrubPolicy::kAlways || grant.previousTenant != tenant);
  return grant;
}

void PagedAllocator::returnGrantLocked(const FrameGrant& grant, bool written) {
  if (grant.scrubFailed) {
    arena(grant.tier).withhold(grant.frame);
  } else if (!written) {
    arena(grant.tier).giveBackUntouched(grant.frame, grant.previousTenant);
  } else {
    releaseFrameLocked(grant.tier, grant.frame);
  }
}

void PagedAllocator::releaseFrameLocked(Tier tier, uint32_t frame) {
  // Zeroed when handed out again (takeFrameLocked), not here: a release stays O(pages) on the caller's
  // thread, and a frame the next owner overwrites whole is never zeroed at all.
  arena(tier).give(frame, false);
}

void PagedAllocator::discardBlockIdLocked(uint32_t block) {
  BlockMeta& m = blocks_[block];
  filledSlots_ -= m.fill;
  --liveBlocks_;
  const uint32_t generation = nextGeneration(m.generation);
  m = BlockMeta();
  m.generation = generation;
  freeIds_.push_back(block);
}

void PagedAllocator::addRefLocked(uint32_t block) {
  if (++blocks_[block].refs == 2) ++sharedBlocks_;
}

void PagedAllocator::dropRefLocked(uint32_t block) {
  const uint32_t refs = --blocks_[block].refs;
  if (refs == 1) --sharedBlocks_;
  if (refs == 0) retireLocked(block);
}

void PagedAllocator::retireLocked(uint32_t block) {
  BlockMeta& m = blocks_[block];
  filledSlots_ -= m.fill;
  m.fill = 0;
  m.activeRefs = 0;
  --liveBlocks_;
  setDiskKeyLocked(block, 0);
  m.generation = nextGeneration(m.generation);
  if (m.readers > 0) {
    m.kind = BlockKind::kZombie;  // the last reader frees it
    return;
  }
  if (m.tier == Tier::kDisk) {
    --diskOnlyBlocks_;
  } else {
    releaseFrameLocked(m.tier, m.frame);
  }
  m.kind = BlockKind::kFree;
  m.tier = Tier::kDisk;
  freeIds_.push_back(block);
}

void PagedAllocator::setDiskKeyLocked(uint32_t block, uint64_t key) {
  BlockMeta& m = blocks_[block];
  if (m.diskKey != 0) {
    freedDiskKeys_.push_back(m.diskKey);
    --diskCopies_;
  }
  m.diskKey = key;
  if (key != 0) ++diskCopies_;
}

void PagedAllocator::setTierLocked(uint32_t block, Tier tier, uint32_t frame) {
  BlockMeta& m = blocks_[block];
  if (m.tier == Tier::kDisk) --diskOnlyBlocks_;
  if (tier == Tier::kDisk) ++diskOnlyBlocks_;
  m.tier = tier;
  m.frame = frame;
}

void PagedAllocator::endReadersLocked(const std::vector<SlotRun>& runs) {
  for (const SlotRun& run : runs) {
    BlockMeta& m = blocks_[run.block];
    if (--m.readers == 0 && m.kind == BlockKind::kZombie) {
      if (m.tier != Tier::kDisk) releaseFrameLocked(m.tier, m.frame);
      m.kind = BlockKind::kFree;
      m.tier = Tier::kDisk;
      freeIds_.push_back(run.block);
    }
  }
}

void PagedAllocator::finishScrubs(std::vector<FrameRef>* scrubLater) {
  if (scrubLater->empty()) return;
  for (const FrameRef& f : *scrubLater) arena(f.tier).memory().scrubBlock(f.frame);
  // A scrub reports failure only through the memory's fault (a driver error): such frames may still
  // hold their last tenant's bytes, so they leave circulation rather than return as clean.
  std::lock_guard<std::mutex> lock(mu_);
  for (const FrameRef& f : *scrubLater) {
    FrameArena& a = arena(f.tier);
    if (a.memory().fault().isOk()) {
      a.give(f.frame, true);
    } else {
      a.withhold(f.frame);
    }
  }
  scrubLater->clear();
}

bool PagedAllocator::scrubGrants(std::vector<FrameGrant>* grants) {
  bool clean = true;
  for (FrameGrant& g : *grants) {
    if (!g.needsScrub) continue;
    BlockMemory& memory = arena(g.tier).memory();
    memory.scrubBlock(g.frame);
    if (!memory.fault().isOk()) {
      g.scrubFailed = true;
      clean = false;
    }
  }
  return clean;
}

// ---- contexts ----

PagedAllocator::ContextSlot* PagedAllocator::findLocked(Handle ctx) {
  const uint32_t index = handleIndex(ctx);
  if (index >= contexts_.size()) return nullptr;
  ContextSlot& slot = contexts_[index];
  return slot.live && slot.generation == handleGeneration(ctx) ? &slot : nullptr;
}

const PagedAllocator::ContextSlot* PagedAllocator::findLocked(Handle ctx) const {
  return const_cast<PagedAllocator*>(this)->findLocked(ctx);
}

Status PagedAllocator::createContext(uint32_t tenant, Handle* out) {
  if (tenant == 0) return Status(Code::kInvalidArgument, "tenant must be >= 1");
  std::lock_guard<std::mutex> lock(mu_);
  return claimSlotLocked(tenant, out);
}

Status PagedAllocator::claimSlotLocked(uint32_t tenant, Handle* out) {
  if (liveContexts_ >= maxContexts_) {
    return Status(Code::kPoolExhausted, "context limit of " + std::to_string(maxContexts_) + " reached");
  }
  uint32_t index;
  if (!freeSlots_.empty()) {
    index = freeSlots_.back();
    freeSlots_.pop_back();
  } else {
    if (contexts_.size() >= 0xFFFFFFFFu) return Status(Code::kPoolExhausted, "context slots exhausted");
    try {
      contexts_.emplace_back();
    } catch (const std::bad_alloc&) {
      return outOfMemory();
    }
    index = static_cast<uint32_t>(contexts_.size() - 1);
  }
  ContextSlot& slot = contexts_[index];
  slot.live = true;
  slot.busy = false;
  slot.resident = true;
  slot.tenant = tenant;
  slot.pinCount = 0;
  slot.tokens = 0;
  slot.pages.clear();
  ++liveContexts_;
  *out = packHandle(slot.generation, index);
  return Status::ok();
}

Status PagedAllocator::beginAppend(Handle ctx, uint64_t bytes, AppendLease* lease) {
  lease->reset();
  if (bytes % layout_.bytesPerToken != 0) {
    return Status(Code::kInvalidArgument, "append of " + std::to_string(bytes) +
                                              " bytes is not a whole number of tokens of " +
                                              std::to_string(layout_.bytesPerToken) + " bytes");
  }
  const uint64_t tpb = layout_.tokensPerBlock;
  std::lock_guard<std::mutex> lock(mu_);
  ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  if (c->busy) return busyContext();
  const uint64_t n = bytes / layout_.bytesPerToken;
  if (n == 0) return Status::ok();
  if (!c->resident) return offloaded();

  const uint64_t partial = c->tokens % tpb;
  const bool cow = partial != 0 && blocks_[c->pages.back()].refs > 1;
  const uint64_t pagesAfter = (c->tokens + n + tpb - 1) / tpb;
  const uint64_t newPages = pagesAfter - c->pages.size();
  const uint64_t needed = newPages + (cow ? 1 : 0);
  if (needed > device_.freeFrames()) return tierFull("device", needed, device_.freeFrames());
  Status st = reserveBlockIdsLocked(needed);
  if (!st.isOk()) return st;
  try {  // every allocation happens before any state changes
    c->pages.reserve(pagesAfter);
    lease->newBlocks_.reserve(newPages);
    lease->grants_.reserve(needed);
    lease->runs_.reserve(newPages + 1);
    lease->sums_.reserve(newPages + 1);
  } catch (const std::bad_alloc&) {
    lease->reset();
    return outOfMemory();
  }

  lease->pool_ = this;
  lease->context_ = ctx;
  lease->tokens_ = n;
  lease->bytes_ = bytes;
  auto newContextBlock = [&]() {
    const uint32_t b = newBlockLocked(c->tenant, BlockKind::kContext, 0);
    const FrameGrant grant = takeFrameLocked(Tier::kDevice, c->tenant);
    blocks_[b].activeRefs = 1;
    blocks_[b].tier = Tier::kDevice;
    blocks_[b].frame = grant.frame;
    lease->grants_.push_back(grant);
    return b;
  };
  uint64_t remaining = n;
  if (partial != 0) {
    uint32_t target = c->pages.back();
    if (cow) {
      lease->cow_ = true;
      lease->cowSourceFrame_ = blocks_[target].frame;
      lease->cowBlock_ = newContextBlock();
      lease->grants_.back().needsScrub = false;  // the copy overwrites the whole frame
      target = lease->cowBlock_;
    }
    const uint64_t count = std::min(remaining, tpb - partial);
    lease->runs_.push_back(
        {target, Tier::kDevice, blocks_[target].frame, static_cast<uint32_t>(partial), static_cast<uint32_t>(count)});
    lease->sums_.push_back(blocks_[c->pages.back()].checksum);  // a copy-on-write copy starts from its source's
    remaining -= count;
  }
  while (remaining > 0) {
    const uint32_t b = newContextBlock();
    lease->newBlocks_.push_back(b);
    const uint64_t count = std::min(remaining, tpb);
    if (count == tpb && lease->grants_.back().needsScrub) {  // the append writes the whole frame
      lease->grants_.back().needsScrub = false;
      lease->grants_.back().overwritten = true;
    }
    lease->runs_.push_back({b, Tier::kDevice, blocks_[b].frame, 0, static_cast<uint32_t>(count)});
    lease->sums_.push_back(0);
    remaining -= count;
  }
  c->busy = true;
  return Status::ok();
}

void PagedAllocator::commitAppend(AppendLease* lease) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ContextSlot* c = findLocked(lease->context_);  // live: release is refused while busy
    const uint32_t partial = static_cast<uint32_t>(c->tokens % layout_.tokensPerBlock);
    if (lease->cow_) {
      blocks_[lease->cowBlock_].fill = partial;
      filledSlots_ += partial;
      const uint32_t source = c->pages.back();
      c->pages.back() = lease->cowBlock_;
      --blocks_[source].activeRefs;
      dropRefLocked(source);
    } else if (partial != 0) {
      setDiskKeyLocked(c->pages.back(), 0);  // written in place: its disk copy is stale now
    }
    for (uint32_t b : lease->newBlocks_) c->pages.push_back(b);
    for (size_t i = 0; i < lease->runs_.size(); ++i) {
      const SlotRun& run = lease->runs_[i];
      BlockMeta& m = blocks_[run.block];
      m.checksum = lease->sums_[i];
      const uint32_t end = run.slot + run.count;
      if (end > m.fill) {
        filledSlots_ += end - m.fill;
        m.fill = end;
      }
    }
    c->tokens += lease->tokens_;
    c->busy = false;
  }
}

void PagedAllocator::abortAppend(AppendLease* lease) {
  std::vector<FrameRef> scrubLater;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Stopped midway (its source went away): frames not scrubbed because the append was to overwrite
    // them hold their previous owner's bytes next to this one's, so they are zeroed now.
    const bool midway = lease->written_ && !lease->copied_;
    for (const FrameGrant& g : lease->grants_) {
      if (midway && g.overwritten) {
        scrubLater.push_back({g.tier, g.frame});
      } else {
        returnGrantLocked(g, lease->written_);
      }
    }
    if (lease->cow_) discardBlockIdLocked(lease->cowBlock_);
    for (uint32_t b : lease->newBlocks_) discardBlockIdLocked(b);
    if (ContextSlot* c = findLocked(lease->context_)) c->busy = false;
  }
  finishScrubs(&scrubLater);
}

Status PagedAllocator::beginRead(Handle ctx, uint64_t startToken, uint64_t tokenCount, ReadLease* lease) {
  lease->reset();
  const uint64_t tpb = layout_.tokensPerBlock;
  std::lock_guard<std::mutex> lock(mu_);
  const ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  if (startToken > c->tokens || tokenCount > c->tokens - startToken) {
    return Status(Code::kOutOfRange, "tokens [" + std::to_string(startToken) + ", +" + std::to_string(tokenCount) +
                                         ") exceed the context's " + std::to_string(c->tokens));
  }
  const uint64_t end = startToken + tokenCount;
  for (uint64_t page = startToken / tpb; page * tpb < end; ++page) {
    const BlockMeta& m = blocks_[c->pages[page]];
    if (m.moving) return busyBlocks();
    if (m.tier == Tier::kDisk) {
      return Status(Code::kInvalidState, "the range includes pages that are only on disk; restore the context first");
    }
  }
  try {
    lease->runs_.reserve(tokenCount / tpb + 2);
    lease->fills_.reserve(tokenCount / tpb + 2);
    lease->checksums_.reserve(tokenCount / tpb + 2);
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  for (uint64_t token = startToken; token < end;) {
    const uint32_t block = c->pages[token / tpb];
    const uint64_t slot = token % tpb;
    const uint64_t count = std::min(end - token, tpb - slot);
    BlockMeta& m = blocks_[block];
    lease->runs_.push_back({block, m.tier, m.frame, static_cast<uint32_t>(slot), static_cast<uint32_t>(count)});
    lease->fills_.push_back(m.fill);
    lease->checksums_.push_back(m.checksum);
    ++m.readers;
    token += count;
  }
  lease->pool_ = this;
  lease->startToken_ = startToken;
  lease->bytes_ = tokenCount * layout_.bytesPerToken;
  return Status::ok();
}

Status PagedAllocator::beginReadBlock(Handle ctx, uint64_t pageIndex, ReadLease* lease) {
  lease->reset();
  std::lock_guard<std::mutex> lock(mu_);
  const ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  if (pageIndex >= c->pages.size()) {
    return Status(Code::kOutOfRange, "page " + std::to_string(pageIndex) + " of a context with " +
                                         std::to_string(c->pages.size()) + " pages");
  }
  const uint32_t block = c->pages[pageIndex];
  BlockMeta& m = blocks_[block];
  if (m.moving) return busyBlocks();
  if (m.tier == Tier::kDisk) return Status(Code::kInvalidState, "the page is only on disk; restore the context first");
  try {
    lease->runs_.push_back({block, m.tier, m.frame, 0, layout_.tokensPerBlock});
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  ++m.readers;
  lease->pool_ = this;
  lease->wholeBlock_ = true;
  lease->bytes_ = layout_.blockBytes;
  return Status::ok();
}

void PagedAllocator::endRead(ReadLease* lease) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    endReadersLocked(lease->runs_);
  }
}

Status PagedAllocator::fork(Handle ctx, Handle* child) { return forkPages(ctx, nullptr, child); }

Status PagedAllocator::forkPrefix(Handle ctx, uint64_t blocks, Handle* child) { return forkPages(ctx, &blocks, child); }

Status PagedAllocator::forkPages(Handle ctx, const uint64_t* blocks, Handle* child) {
  std::lock_guard<std::mutex> lock(mu_);
  const ContextSlot* parent = findLocked(ctx);
  if (!parent) return staleContext();
  if (parent->busy) return busyContext();
  const uint64_t fullBlocks = parent->tokens / layout_.tokensPerBlock;
  if (blocks && *blocks > fullBlocks) {
    return Status(Code::kOutOfRange, "a prefix fork takes full blocks only: asked " + std::to_string(*blocks) +
                                         ", the context has " + std::to_string(fullBlocks));
  }
  std::vector<uint32_t> pages;
  try {
    // Copied before a slot is claimed, so a failed fork consumes nothing.
    pages.assign(parent->pages.begin(),
                 blocks ? parent->pages.begin() + static_cast<std::ptrdiff_t>(*blocks) : parent->pages.end());
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  const uint32_t tenant = parent->tenant;
  const uint64_t tokens = blocks ? *blocks * layout_.tokensPerBlock : parent->tokens;
  const bool resident = parent->resident;
  Handle created;
  Status st = claimSlotLocked(tenant, &created);  // may reallocate contexts_: parent is invalid now
  if (!st.isOk()) return st;
  ContextSlot& kid = contexts_[handleIndex(created)];
  for (uint32_t b : pages) {
    addRefLocked(b);
    if (resident) ++blocks_[b].activeRefs;
  }
  kid.pages = std::move(pages);
  kid.tokens = tokens;
  kid.resident = resident;
  *child = created;
  return Status::ok();
}

Status PagedAllocator::pin(Handle ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  if (c->pinCount == 0xFFFFFFFFu) return Status(Code::kOutOfRange, "pin count overflow");
  ++c->pinCount;
  return Status::ok();
}

Status PagedAllocator::unpin(Handle ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  if (c->pinCount == 0) return Status(Code::kInvalidState, "context is not pinned");
  --c->pinCount;
  return Status::ok();
}

Status PagedAllocator::release(Handle ctx) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ContextSlot* c = findLocked(ctx);
    if (!c) return staleContext();
    if (c->busy) return busyContext();
    try {
      freedDiskKeys_.reserve(freedDiskKeys_.size() + c->pages.size());
    } catch (const std::bad_alloc&) {
      return outOfMemory();
    }
    for (uint32_t b : c->pages) {
      if (c->resident) --blocks_[b].activeRefs;
      dropRefLocked(b);
    }
    c->pages.clear();
    c->pages.shrink_to_fit();
    c->live = false;
    c->tokens = 0;
    c->pinCount = 0;
    --liveContexts_;
    if (c->generation < kMaxGeneration) {
      ++c->generation;
      freeSlots_.push_back(handleIndex(ctx));  // a saturated slot is retired, so its handles never come back
    }
  }
  return Status::ok();
}

Status PagedAllocator::blockTable(Handle ctx, std::vector<uint32_t>* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  const ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  if (!c->resident) return offloaded();
  try {
    out->resize(c->pages.size());
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  for (size_t i = 0; i < c->pages.size(); ++i) (*out)[i] = blocks_[c->pages[i]].frame;
  return Status::ok();
}

PoolStats PagedAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PoolStats s;
  s.totalBlocks = device_.frames();
  s.freeBlocks = device_.freeFrames();
  s.usedBlocks = s.totalBlocks - s.freeBlocks;
  s.sharedBlocks = sharedBlocks_;
  s.blockBytes = layout_.blockBytes;
  s.totalBytes = s.totalBlocks * s.blockBytes;
  s.usedBytes = s.usedBlocks * s.blockBytes;
  s.freeBytes = s.freeBlocks * s.blockBytes;
  s.contexts = liveContexts_;
  s.wasteBytes = (liveBlocks_ * layout_.tokensPerBlock - filledSlots_) * layout_.bytesPerToken;
  s.host.totalBlocks = host_.frames();
  s.host.freeBlocks = host_.freeFrames();
  s.host.usedBlocks = s.host.totalBlocks - s.host.freeBlocks;
  s.diskOnlyBlocks = diskOnlyBlocks_;
  s.diskCopies = diskCopies_;
  return s;
}

Status PagedAllocator::contextStats(Handle ctx, ContextStats* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  const ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  ContextStats s;
  s.tenant = c->tenant;
  s.tokens = c->tokens;
  s.blocks = c->pages.size();
  for (uint32_t b : c->pages) {
    const BlockMeta& m = blocks_[b];
    s.sharedBlocks += m.refs > 1 ? 1 : 0;
    s.devicePages += m.tier == Tier::kDevice ? 1 : 0;
    s.hostPages += m.tier == Tier::kHost ? 1 : 0;
    s.diskOnlyPages += m.tier == Tier::kDisk ? 1 : 0;
    s.diskCopies += m.diskKey != 0 ? 1 : 0;
  }
  s.pinCount = c->pinCount;
  s.bytes = c->tokens * layout_.bytesPerToken;
  s.wasteBytes = (s.blocks * layout_.tokensPerBlock - c->tokens) * layout_.bytesPerToken;
  s.resident = c->resident;
  *out = s;
  return Status::ok();
}

std::vector<TenantBlocks> PagedAllocator::tenantBlocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<uint32_t, TenantBlocks> byTenant;
  auto inMemory = [](const BlockMeta& m) {
    return (m.kind == BlockKind::kContext || m.kind == BlockKind::kRaw) && m.tier != Tier::kDisk;
  };
  for (const BlockMeta& m : blocks_) {
    if (!inMemory(m)) continue;
    TenantBlocks& t = byTenant[m.tenant];
    (m.tier == Tier::kDevice ? t.device : t.host) += 1;
  }
  std::vector<bool> counted;  // blocks of pinned contexts seen so far: shared pages count once
  for (const ContextSlot& c : contexts_) {
    if (!c.live || c.pinCount == 0) continue;
    if (counted.empty()) counted.resize(blocks_.size(), false);
    for (uint32_t b : c.pages) {
      if (counted[b] || !inMemory(blocks_[b])) continue;
      counted[b] = true;
      byTenant[c.tenant].pinned += 1;
    }
  }
  std::vector<TenantBlocks> out;
  out.reserve(byTenant.size());
  for (auto& [tenant, blocks] : byTenant) {
    blocks.tenant = tenant;
    out.push_back(blocks);
  }
  return out;
}

// ---- raw blocks ----

Status PagedAllocator::allocateBlocks(uint32_t tenant, uint32_t count, Handle* out) {
  if (tenant == 0) return Status(Code::kInvalidArgument, "tenant must be >= 1");
  std::vector<FrameGrant> grants;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (count > device_.freeFrames()) {  // checked before anything is sized by count
      return Status(Code::kPoolExhausted,
                    std::to_string(count) + " blocks requested, " + std::to_string(device_.freeFrames()) + " free");
    }
    Status st = reserveBlockIdsLocked(count);
    if (!st.isOk()) return st;
    try {
      grants.reserve(count);
    } catch (const std::bad_alloc&) {
      return outOfMemory();
    }
    for (uint32_t i = 0; i < count; ++i) {
      const uint32_t b = newBlockLocked(tenant, BlockKind::kRaw, layout_.tokensPerBlock);
      const FrameGrant grant = takeFrameLocked(Tier::kDevice, tenant);
      blocks_[b].tier = Tier::kDevice;
      blocks_[b].frame = grant.frame;
      if (grant.needsScrub) grants.push_back(grant);
      out[i] = packHandle(blocks_[b].generation, b);
    }
  }
  if (scrubGrants(&grants)) return Status::ok();  // zeroed before the handles reach the caller
  // A scrub failed: no handle reaches the caller, and frames that may hold another tenant's bytes are
  // withheld for good.
  const Status fault = memoryFault();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint32_t i = 0; i < count; ++i) {
      const uint32_t b = handleIndex(out[i]);
      for (const FrameGrant& g : grants) {
        if (g.scrubFailed && g.frame == blocks_[b].frame) {
          device_.withhold(g.frame);
          setTierLocked(b, Tier::kDisk, 0);  // frameless, so retiring it below releases no frame
        }
      }
      dropRefLocked(b);
      out[i] = 0;
    }
  }
  return fault.isOk() ? Status(Code::kUnavailable, "a scrub failed") : fault;
}

Status PagedAllocator::freeBlocks(const Handle* handles, size_t count) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Status verdict = Status::ok();
    size_t marked = 0;
    for (; marked < count; ++marked) {
      const uint32_t b = handleIndex(handles[marked]);
      if (b >= blocks_.size() || blocks_[b].kind == BlockKind::kFree ||
          blocks_[b].generation != handleGeneration(handles[marked]) || blocks_[b].batchMark) {
        verdict = Status(Code::kStaleHandle,
                         "block handle at position " + std::to_string(marked) + " is unknown, freed or repeated");
        break;
      }
      if (blocks_[b].kind != BlockKind::kRaw) {
        verdict = Status(Code::kInvalidArgument,
                         "block at position " + std::to_string(marked) + " belongs to a context; release the context");
        break;
      }
      blocks_[b].batchMark = true;
    }
    for (size_t i = 0; i < marked; ++i) blocks_[handleIndex(handles[i])].batchMark = false;
    if (!verdict.isOk()) return verdict;
    for (size_t i = 0; i < count; ++i) dropRefLocked(handleIndex(handles[i]));
  }
  return Status::ok();
}

// ---- synchronous conveniences ----

Status PagedAllocator::append(Handle ctx, const uint8_t* kv, uint64_t bytes) {
  AppendLease lease;
  Status st = beginAppend(ctx, bytes, &lease);
  if (!st.isOk()) return st;
  lease.copyFrom(kv);
  return lease.commit();
}

Status PagedAllocator::read(Handle ctx, uint64_t startToken, uint64_t tokenCount, std::vector<uint8_t>* out) {
  ReadLease lease;
  Status st = beginRead(ctx, startToken, tokenCount, &lease);
  if (!st.isOk()) return st;
  try {
    out->resize(lease.bytes());
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  lease.copyTo(out->data());
  return Status::ok();
}

Status PagedAllocator::demote(Handle ctx) {
  MoveLease lease;
  Status st = beginDemote(ctx, &lease);
  if (!st.isOk()) return st;
  lease.copy();
  return lease.commit();
}

Status PagedAllocator::promote(Handle ctx) {
  MoveLease lease;
  Status st = beginPromote(ctx, &lease);
  if (!st.isOk()) return st;
  lease.copy();
  return lease.commit();
}

}  // namespace kvfabric
