// PagedAllocator: see the header for the data structures, invariants and locking rules.
#include "paged_allocator.h"

#include <algorithm>
#include <new>
#include <string>

namespace kvfabric {
namespace {

uint32_t nextGeneration(uint32_t generation) {
  return generation >= PagedAllocator::kMaxGeneration ? 1 : generation + 1;
}

uint32_t handleIndex(Handle h) { return static_cast<uint32_t>(h & 0xFFFFFFFFu); }
uint32_t handleGeneration(Handle h) { return static_cast<uint32_t>(h >> 32); }

Status staleContext() { return Status(Code::kStaleHandle, "context handle is unknown or released"); }
Status busyContext() { return Status(Code::kBusy, "context has an append or tier move in flight"); }
Status busyBlocks() { return Status(Code::kBusy, "a block of the context is being read or moved"); }
Status outOfMemory() { return Status(Code::kOutOfMemory, "host memory exhausted for allocator metadata"); }
Status offloaded() {
  return Status(Code::kInvalidState, "context is offloaded; restore it to the device first");
}
Status tierFull(const char* tier, size_t needed, uint32_t free) {
  return Status(Code::kPoolExhausted, std::string(tier) + " tier needs " + std::to_string(needed) + " blocks, " +
                                          std::to_string(free) + " free");
}

}  // namespace

// ---- construction ----

Status PagedAllocator::create(const PoolConfig& config, std::unique_ptr<BlockMemory> memory,
                              std::unique_ptr<PagedAllocator>* out) {
  BlockLayout layout;
  Status st = BlockLayout::make(config.shape, config.tokensPerBlock, &layout);
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
  if (!memory) {
    st = HostBlockMemory::create(layout, config.blockCount, &memory);
    if (!st.isOk()) return st;
  }
  std::unique_ptr<BlockMemory> host;
  if (config.hostBlockCount > 0) {
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

PagedAllocator::PagedAllocator(const PoolConfig& config, const BlockLayout& layout, std::unique_ptr<BlockMemory> device,
                               std::unique_ptr<BlockMemory> host)
    : layout_(layout),
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
  FrameGrant grant{tier, 0, 0, false};
  grant.frame = arena(tier).take(tenant, &grant.previousTenant);
  grant.needsScrub = grant.previousTenant != 0 && grant.previousTenant != tenant;
  return grant;
}

void PagedAllocator::returnGrantLocked(const FrameGrant& grant, bool written, std::vector<FrameRef>* scrubLater) {
  if (!written) {
    arena(grant.tier).giveBackUntouched(grant.frame, grant.previousTenant);
  } else {
    releaseFrameLocked(grant.tier, grant.frame, scrubLater);
  }
}

void PagedAllocator::releaseFrameLocked(Tier tier, uint32_t frame, std::vector<FrameRef>* scrubLater) {
  if (scrub_ == ScrubPolicy::kAlways) {
    scrubLater->push_back({tier, frame});  // reaches the free list once zeroed
  } else {
    arena(tier).give(frame, false);
  }
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

void PagedAllocator::dropRefLocked(uint32_t block, std::vector<FrameRef>* scrubLater) {
  const uint32_t refs = --blocks_[block].refs;
  if (refs == 1) --sharedBlocks_;
  if (refs == 0) retireLocked(block, scrubLater);
}

void PagedAllocator::retireLocked(uint32_t block, std::vector<FrameRef>* scrubLater) {
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
  if (m.tier == Tier::kNone) {
    --diskOnlyBlocks_;
  } else {
    releaseFrameLocked(m.tier, m.frame, scrubLater);
  }
  m.kind = BlockKind::kFree;
  m.tier = Tier::kNone;
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
  if (m.tier == Tier::kNone) --diskOnlyBlocks_;
  if (tier == Tier::kNone) ++diskOnlyBlocks_;
  m.tier = tier;
  m.frame = frame;
}

void PagedAllocator::endReadersLocked(const std::vector<SlotRun>& runs, std::vector<FrameRef>* scrubLater) {
  for (const SlotRun& run : runs) {
    BlockMeta& m = blocks_[run.block];
    if (--m.readers == 0 && m.kind == BlockKind::kZombie) {
      if (m.tier != Tier::kNone) releaseFrameLocked(m.tier, m.frame, scrubLater);
      m.kind = BlockKind::kFree;
      m.tier = Tier::kNone;
      freeIds_.push_back(run.block);
    }
  }
}

void PagedAllocator::finishScrubs(std::vector<FrameRef>* scrubLater) {
  if (scrubLater->empty()) return;
  for (const FrameRef& f : *scrubLater) arena(f.tier).memory().scrubBlock(f.frame);
  std::lock_guard<std::mutex> lock(mu_);
  for (const FrameRef& f : *scrubLater) arena(f.tier).give(f.frame, true);
  scrubLater->clear();
}

void PagedAllocator::scrubGrants(const std::vector<FrameGrant>& grants) {
  for (const FrameGrant& g : grants) {
    if (g.needsScrub) arena(g.tier).memory().scrubBlock(g.frame);
  }
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
    lease->runs_.push_back({target, Tier::kDevice, blocks_[target].frame, static_cast<uint32_t>(partial),
                            static_cast<uint32_t>(count)});
    remaining -= count;
  }
  while (remaining > 0) {
    const uint32_t b = newContextBlock();
    lease->newBlocks_.push_back(b);
    const uint64_t count = std::min(remaining, tpb);
    lease->runs_.push_back({b, Tier::kDevice, blocks_[b].frame, 0, static_cast<uint32_t>(count)});
    remaining -= count;
  }
  c->busy = true;
  return Status::ok();
}

void PagedAllocator::commitAppend(AppendLease* lease) {
  std::vector<FrameRef> scrubLater;
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
      dropRefLocked(source, &scrubLater);
    } else if (partial != 0) {
      setDiskKeyLocked(c->pages.back(), 0);  // written in place: its disk copy is stale now
    }
    for (uint32_t b : lease->newBlocks_) c->pages.push_back(b);
    for (const SlotRun& run : lease->runs_) {
      BlockMeta& m = blocks_[run.block];
      const uint32_t end = run.slot + run.count;
      if (end > m.fill) {
        filledSlots_ += end - m.fill;
        m.fill = end;
      }
    }
    c->tokens += lease->tokens_;
    c->busy = false;
  }
  finishScrubs(&scrubLater);
}

void PagedAllocator::abortAppend(AppendLease* lease) {
  std::vector<FrameRef> scrubLater;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const FrameGrant& g : lease->grants_) returnGrantLocked(g, lease->copied_, &scrubLater);
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
    if (m.tier == Tier::kNone) {
      return Status(Code::kInvalidState, "the range includes pages that are only on disk; restore the context first");
    }
  }
  try {
    lease->runs_.reserve(tokenCount / tpb + 2);
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  for (uint64_t token = startToken; token < end;) {
    const uint32_t block = c->pages[token / tpb];
    const uint64_t slot = token % tpb;
    const uint64_t count = std::min(end - token, tpb - slot);
    BlockMeta& m = blocks_[block];
    lease->runs_.push_back({block, m.tier, m.frame, static_cast<uint32_t>(slot), static_cast<uint32_t>(count)});
    ++m.readers;
    token += count;
  }
  lease->pool_ = this;
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
  if (m.tier == Tier::kNone) return Status(Code::kInvalidState, "the page is only on disk; restore the context first");
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
  std::vector<FrameRef> scrubLater;
  {
    std::lock_guard<std::mutex> lock(mu_);
    endReadersLocked(lease->runs_, &scrubLater);
  }
  finishScrubs(&scrubLater);
}

Status PagedAllocator::fork(Handle ctx, Handle* child) {
  std::lock_guard<std::mutex> lock(mu_);
  const ContextSlot* parent = findLocked(ctx);
  if (!parent) return staleContext();
  if (parent->busy) return busyContext();
  std::vector<uint32_t> pages;
  try {
    pages = parent->pages;  // copied before a slot is claimed, so a failed fork consumes nothing
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  const uint32_t tenant = parent->tenant;
  const uint64_t tokens = parent->tokens;
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
  std::vector<FrameRef> scrubLater;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ContextSlot* c = findLocked(ctx);
    if (!c) return staleContext();
    if (c->busy) return busyContext();
    try {
      scrubLater.reserve(scrub_ == ScrubPolicy::kAlways ? c->pages.size() : 0);
      freedDiskKeys_.reserve(freedDiskKeys_.size() + c->pages.size());
    } catch (const std::bad_alloc&) {
      return outOfMemory();
    }
    for (uint32_t b : c->pages) {
      if (c->resident) --blocks_[b].activeRefs;
      dropRefLocked(b, &scrubLater);
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
  finishScrubs(&scrubLater);
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
    s.diskOnlyPages += m.tier == Tier::kNone ? 1 : 0;
    s.diskCopies += m.diskKey != 0 ? 1 : 0;
  }
  s.pinCount = c->pinCount;
  s.bytes = c->tokens * layout_.bytesPerToken;
  s.wasteBytes = (s.blocks * layout_.tokensPerBlock - c->tokens) * layout_.bytesPerToken;
  s.resident = c->resident;
  *out = s;
  return Status::ok();
}

// ---- raw blocks ----

Status PagedAllocator::allocateBlocks(uint32_t tenant, uint32_t count, Handle* out) {
  if (tenant == 0) return Status(Code::kInvalidArgument, "tenant must be >= 1");
  std::vector<FrameGrant> grants;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (count > device_.freeFrames()) {  // checked before anything is sized by count
      return Status(Code::kPoolExhausted, std::to_string(count) + " blocks requested, " +
                                              std::to_string(device_.freeFrames()) + " free");
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
  scrubGrants(grants);  // before the handles reach the caller
  return Status::ok();
}

Status PagedAllocator::freeBlocks(const Handle* handles, size_t count) {
  std::vector<FrameRef> scrubLater;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Status verdict = Status::ok();
    size_t marked = 0;
    for (; marked < count; ++marked) {
      const uint32_t b = handleIndex(handles[marked]);
      if (b >= blocks_.size() || blocks_[b].kind == BlockKind::kFree ||
          blocks_[b].generation != handleGeneration(handles[marked]) || blocks_[b].batchMark) {
        verdict = Status(Code::kStaleHandle, "block handle at position " + std::to_string(marked) +
                                                 " is unknown, freed or repeated");
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
    if (scrub_ == ScrubPolicy::kAlways) {
      try {
        scrubLater.reserve(count);
      } catch (const std::bad_alloc&) {
        return outOfMemory();
      }
    }
    for (size_t i = 0; i < count; ++i) dropRefLocked(handleIndex(handles[i]), &scrubLater);
  }
  finishScrubs(&scrubLater);
  return Status::ok();
}

// ---- tiers ----

Status PagedAllocator::beginDemote(Handle ctx, MoveLease* lease) {
  lease->reset();
  std::lock_guard<std::mutex> lock(mu_);
  ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  if (c->busy) return busyContext();
  if (!c->resident) return Status(Code::kInvalidState, "context is already offloaded");
  return beginMoveLocked(c, ctx, MoveLease::Kind::kDemote, lease);
}

Status PagedAllocator::beginPromote(Handle ctx, MoveLease* lease) {
  lease->reset();
  std::lock_guard<std::mutex> lock(mu_);
  ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  if (c->busy) return busyContext();
  if (c->resident) return Status::ok();  // already on the device: nothing to do
  for (uint32_t b : c->pages) {
    if (blocks_[b].tier == Tier::kNone) {
      return Status(Code::kInvalidState, "context has pages only on disk; fill them into the host tier first");
    }
  }
  return beginMoveLocked(c, ctx, MoveLease::Kind::kPromote, lease);
}

Status PagedAllocator::beginFill(Handle ctx, MoveLease* lease) {
  lease->reset();
  std::lock_guard<std::mutex> lock(mu_);
  ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  if (c->busy) return busyContext();
  if (c->resident) return Status::ok();  // a resident context has every page on the device
  return beginMoveLocked(c, ctx, MoveLease::Kind::kFill, lease);
}

Status PagedAllocator::beginMoveLocked(ContextSlot* c, Handle ctx, MoveLease::Kind kind, MoveLease* lease) {
  // Which blocks move: demote takes device blocks no other resident context uses; promote takes host
  // blocks; fill takes blocks whose only copy is on disk.
  std::vector<uint32_t> chosen;
  try {
    chosen.reserve(c->pages.size());
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  for (uint32_t b : c->pages) {
    const BlockMeta& m = blocks_[b];
    const bool moves = kind == MoveLease::Kind::kDemote    ? m.tier == Tier::kDevice && m.activeRefs == 1
                       : kind == MoveLease::Kind::kPromote ? m.tier == Tier::kHost
                                                           : m.tier == Tier::kNone;
    if (m.moving) return busyBlocks();
    if (!moves) continue;
    if (m.readers > 0) return busyBlocks();
    chosen.push_back(b);
  }
  const Tier to = kind == MoveLease::Kind::kPromote ? Tier::kDevice : Tier::kHost;
  FrameArena& target = arena(to);
  if (chosen.size() > target.freeFrames()) {
    return tierFull(to == Tier::kDevice ? "device" : "host", chosen.size(), target.freeFrames());
  }
  try {
    lease->moves_.reserve(chosen.size());
    if (kind == MoveLease::Kind::kFill) lease->diskKeys_.reserve(chosen.size());
  } catch (const std::bad_alloc&) {
    lease->moves_.clear();
    return outOfMemory();
  }
  for (uint32_t b : chosen) {
    BlockMeta& m = blocks_[b];
    const FrameGrant grant = takeFrameLocked(to, c->tenant);  // the whole frame is overwritten: no scrub
    lease->moves_.push_back({b, m.frame, grant, false});
    if (kind == MoveLease::Kind::kFill) lease->diskKeys_.push_back(m.diskKey);
    m.moving = true;
  }
  lease->pool_ = this;
  lease->kind_ = kind;
  lease->context_ = ctx;
  c->busy = true;
  return Status::ok();
}

void PagedAllocator::commitMove(MoveLease* lease) {
  std::vector<FrameRef> scrubLater;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ContextSlot* c = findLocked(lease->context_);  // live: release is refused while busy
    const Tier from = lease->kind_ == MoveLease::Kind::kDemote    ? Tier::kDevice
                      : lease->kind_ == MoveLease::Kind::kPromote ? Tier::kHost
                                                                  : Tier::kNone;
    for (const MoveLease::Move& move : lease->moves_) {
      if (from != Tier::kNone) releaseFrameLocked(from, move.fromFrame, &scrubLater);
      setTierLocked(move.block, move.to.tier, move.to.frame);
      blocks_[move.block].moving = false;
    }
    if (lease->kind_ == MoveLease::Kind::kDemote) {
      for (uint32_t b : c->pages) --blocks_[b].activeRefs;
      c->resident = false;
    } else if (lease->kind_ == MoveLease::Kind::kPromote) {
      for (uint32_t b : c->pages) ++blocks_[b].activeRefs;
      c->resident = true;
    }
    c->busy = false;
  }
  finishScrubs(&scrubLater);
}

void PagedAllocator::abortMove(MoveLease* lease) {
  std::vector<FrameRef> scrubLater;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const MoveLease::Move& move : lease->moves_) {
      returnGrantLocked(move.to, lease->copied_ || move.written, &scrubLater);
      blocks_[move.block].moving = false;
    }
    if (ContextSlot* c = findLocked(lease->context_)) c->busy = false;
  }
  finishScrubs(&scrubLater);
}

Status PagedAllocator::beginSpill(Handle ctx, SpillLease* lease) {
  lease->reset();
  std::lock_guard<std::mutex> lock(mu_);
  ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  if (c->busy) return busyContext();
  try {
    lease->runs_.reserve(c->pages.size());
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  for (uint32_t b : c->pages) {
    const BlockMeta& m = blocks_[b];
    if (m.diskKey != 0) continue;  // already on disk: shared blocks are written once
    if (m.moving) {
      lease->runs_.clear();
      return busyBlocks();
    }
    lease->runs_.push_back({b, m.tier, m.frame, 0, layout_.tokensPerBlock});
  }
  for (const SlotRun& run : lease->runs_) ++blocks_[run.block].readers;
  lease->pool_ = this;
  lease->context_ = ctx;
  c->busy = true;
  return Status::ok();
}

Status PagedAllocator::commitSpill(SpillLease* lease, const uint64_t* diskKeys, size_t count, bool dropHostFrames) {
  if (count != lease->runs_.size()) {
    return Status(Code::kInvalidArgument, "spill of " + std::to_string(lease->runs_.size()) + " blocks got " +
                                              std::to_string(count) + " disk keys");
  }
  for (size_t i = 0; i < count; ++i) {
    if (diskKeys[i] == 0) return Status(Code::kInvalidArgument, "disk keys must be non-zero");
  }
  std::vector<FrameRef> scrubLater;
  {
    std::lock_guard<std::mutex> lock(mu_);
    try {
      freedDiskKeys_.reserve(freedDiskKeys_.size() + count);
    } catch (const std::bad_alloc&) {
      return outOfMemory();
    }
    ContextSlot* c = findLocked(lease->context_);
    for (size_t i = 0; i < count; ++i) setDiskKeyLocked(lease->runs_[i].block, diskKeys[i]);
    endReadersLocked(lease->runs_, &scrubLater);
    lease->runs_.clear();
    if (dropHostFrames && !c->resident) {
      for (uint32_t b : c->pages) {
        BlockMeta& m = blocks_[b];
        if (m.tier == Tier::kHost && m.diskKey != 0 && m.readers == 0 && !m.moving) {
          releaseFrameLocked(Tier::kHost, m.frame, &scrubLater);
          setTierLocked(b, Tier::kNone, 0);
        }
      }
    }
    c->busy = false;
  }
  finishScrubs(&scrubLater);
  return Status::ok();
}

void PagedAllocator::abortSpill(SpillLease* lease) {
  std::vector<FrameRef> scrubLater;
  {
    std::lock_guard<std::mutex> lock(mu_);
    endReadersLocked(lease->runs_, &scrubLater);
    if (ContextSlot* c = findLocked(lease->context_)) c->busy = false;
  }
  finishScrubs(&scrubLater);
}

Status PagedAllocator::importContext(uint32_t tenant, uint64_t tokens, const uint64_t* diskKeys, size_t pages,
                                     Handle* out) {
  if (tenant == 0) return Status(Code::kInvalidArgument, "tenant must be >= 1");
  const uint64_t tpb = layout_.tokensPerBlock;
  if (pages != (tokens + tpb - 1) / tpb) {
    return Status(Code::kInvalidArgument, std::to_string(tokens) + " tokens need " +
                                              std::to_string((tokens + tpb - 1) / tpb) + " pages, got " +
                                              std::to_string(pages));
  }
  for (size_t i = 0; i < pages; ++i) {
    if (diskKeys[i] == 0) return Status(Code::kInvalidArgument, "disk keys must be non-zero");
  }
  std::lock_guard<std::mutex> lock(mu_);
  Status st = reserveBlockIdsLocked(pages);
  if (!st.isOk()) return st;
  std::vector<uint32_t> table;
  try {
    table.reserve(pages);
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  Handle created;
  st = claimSlotLocked(tenant, &created);
  if (!st.isOk()) return st;
  for (size_t i = 0; i < pages; ++i) {
    const uint64_t fill = std::min(tpb, tokens - i * tpb);
    const uint32_t b = newBlockLocked(tenant, BlockKind::kContext, static_cast<uint32_t>(fill));
    ++diskOnlyBlocks_;  // tier kNone from newBlockLocked
    setDiskKeyLocked(b, diskKeys[i]);
    table.push_back(b);
  }
  ContextSlot& slot = contexts_[handleIndex(created)];
  slot.pages = std::move(table);
  slot.tokens = tokens;
  slot.resident = false;
  *out = created;
  return Status::ok();
}

std::vector<uint64_t> PagedAllocator::takeFreedDiskKeys() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> out;
  out.swap(freedDiskKeys_);
  return out;
}

Status PagedAllocator::pageDiskKeys(Handle ctx, std::vector<uint64_t>* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  const ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  try {
    out->resize(c->pages.size());
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  for (size_t i = 0; i < c->pages.size(); ++i) (*out)[i] = blocks_[c->pages[i]].diskKey;
  return Status::ok();
}

Status PagedAllocator::forgetDiskCopies(Handle ctx, const uint64_t* keys, size_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  if (c->busy) return busyContext();
  auto named = [&](uint64_t key) { return key != 0 && std::find(keys, keys + count, key) != keys + count; };
  for (uint32_t b : c->pages) {
    if (named(blocks_[b].diskKey) && blocks_[b].tier == Tier::kNone) {
      return Status(Code::kIntegrity, "a page's only copy was on disk and its file is gone");
    }
  }
  try {
    freedDiskKeys_.reserve(freedDiskKeys_.size() + count);
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  for (uint32_t b : c->pages) {
    if (named(blocks_[b].diskKey)) setDiskKeyLocked(b, 0);
  }
  return Status::ok();
}

Status PagedAllocator::pageTiers(Handle ctx, std::vector<Tier>* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  const ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  try {
    out->resize(c->pages.size());
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  for (size_t i = 0; i < c->pages.size(); ++i) (*out)[i] = blocks_[c->pages[i]].tier;
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

// ---- leases ----

AppendLease& AppendLease::operator=(AppendLease&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = other.pool_;
    context_ = other.context_;
    tokens_ = other.tokens_;
    bytes_ = other.bytes_;
    copied_ = other.copied_;
    cow_ = other.cow_;
    cowSourceFrame_ = other.cowSourceFrame_;
    cowBlock_ = other.cowBlock_;
    newBlocks_ = std::move(other.newBlocks_);
    grants_ = std::move(other.grants_);
    runs_ = std::move(other.runs_);
    other.pool_ = nullptr;
  }
  return *this;
}

void AppendLease::reset() {
  if (pool_) pool_->abortAppend(this);
  pool_ = nullptr;
  tokens_ = bytes_ = 0;
  copied_ = cow_ = false;
  newBlocks_.clear();
  grants_.clear();
  runs_.clear();
}

void AppendLease::copyFrom(const uint8_t* src) {
  if (!pool_ || copied_) return;
  BlockMemory& device = pool_->device_.memory();
  pool_->scrubGrants(grants_);
  if (cow_) device.copyBlock(pool_->blocks_[cowBlock_].frame, cowSourceFrame_);
  const uint64_t bytesPerToken = pool_->layout_.bytesPerToken;
  for (const SlotRun& run : runs_) {
    device.writeSlots(run.frame, run.slot, run.count, src);
    src += run.count * bytesPerToken;
  }
  copied_ = true;
}

Status AppendLease::commit() {
  if (!pool_) return Status::ok();  // an empty append
  if (!copied_) {
    reset();
    return Status(Code::kInvalidState, "append committed before its bytes were copied; nothing was appended");
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
    wholeBlock_ = other.wholeBlock_;
    runs_ = std::move(other.runs_);
    other.pool_ = nullptr;
  }
  return *this;
}

void ReadLease::reset() {
  if (pool_) pool_->endRead(this);
  pool_ = nullptr;
  bytes_ = 0;
  wholeBlock_ = false;
  runs_.clear();
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
  for (const Move& move : moves_) {  // no moves, no host tier needed
    BlockMemory& device = pool_->device_.memory();
    BlockMemory& host = pool_->host_.memory();
    if (kind_ == Kind::kDemote) {
      device.readBlock(move.fromFrame, host.hostAddress(move.to.frame));
    } else {
      device.writeBlock(move.to.frame, host.hostAddress(move.fromFrame));
    }
  }
  copied_ = true;
}

Status MoveLease::write(size_t index, const uint8_t* src, uint64_t length) {
  if (!pool_ || kind_ != Kind::kFill) return Status(Code::kInvalidState, "not a fill in progress");
  if (index >= moves_.size()) return Status(Code::kOutOfRange, "fill has " + std::to_string(moves_.size()) + " blocks");
  if (length != pool_->layout_.blockBytes) {
    return Status(Code::kInvalidArgument, "a block is " + std::to_string(pool_->layout_.blockBytes) + " bytes, got " +
                                              std::to_string(length));
  }
  Move& move = moves_[index];
  pool_->host_.memory().writeBlock(move.to.frame, src);
  move.written = true;
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
    other.pool_ = nullptr;
  }
  return *this;
}

void SpillLease::reset() {
  if (pool_) pool_->abortSpill(this);
  pool_ = nullptr;
  runs_.clear();
}

void SpillLease::copyBlock(size_t index, uint8_t* dst) const {
  if (!pool_ || index >= runs_.size()) return;
  const SlotRun& run = runs_[index];
  pool_->arena(run.tier).memory().readBlock(run.frame, dst);
}

Status SpillLease::commit(const uint64_t* diskKeys, size_t count, bool dropHostFrames) {
  if (!pool_) return Status(Code::kInvalidState, "no spill in progress");
  Status st = pool_->commitSpill(this, diskKeys, count, dropHostFrames);
  if (!st.isOk()) return st;  // the lease stays open: the caller may retry or drop it
  pool_ = nullptr;
  return Status::ok();
}

}  // namespace kvfabric
