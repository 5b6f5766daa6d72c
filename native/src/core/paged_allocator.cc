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
Status busyContext() { return Status(Code::kBusy, "context has an append in flight"); }
Status outOfMemory() { return Status(Code::kOutOfMemory, "host memory exhausted for allocator metadata"); }

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
  if (config.maxContexts == 0 || config.maxContexts > PoolConfig::kMaxContextsLimit) {
    return Status(Code::kInvalidArgument, "maxContexts must be in [1, 2^24]");
  }
  if (!memory) {
    st = HostBlockMemory::create(layout, config.blockCount, &memory);
    if (!st.isOk()) return st;
  }
  try {
    out->reset(new PagedAllocator(config, layout, std::move(memory)));
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  return Status::ok();
}

PagedAllocator::PagedAllocator(const PoolConfig& config, const BlockLayout& layout, std::unique_ptr<BlockMemory> memory)
    : layout_(layout),
      blockCount_(config.blockCount),
      scrub_(config.scrub),
      maxContexts_(config.maxContexts),
      memory_(std::move(memory)),
      refs_(config.blockCount, 0),
      generation_(config.blockCount, 1),
      tenant_(config.blockCount, 0),
      fill_(config.blockCount, 0),
      readers_(config.blockCount, 0),
      kind_(config.blockCount, BlockKind::kFree),
      batchMark_(config.blockCount, 0) {
  // LIFO stack: pushing in reverse hands out block 0 first.
  freeStack_.reserve(config.blockCount);
  for (uint32_t b = config.blockCount; b-- > 0;) freeStack_.push_back(b);
}

// ---- block bookkeeping (mu_ held) ----

uint32_t PagedAllocator::takeFreeLocked(uint32_t tenant, BlockKind kind,
                                        std::vector<AppendLease::PendingScrub>* scrubs) {
  const uint32_t b = freeStack_.back();
  freeStack_.pop_back();
  if (tenant_[b] != 0 && tenant_[b] != tenant) scrubs->push_back({b, tenant_[b]});
  tenant_[b] = tenant;
  kind_[b] = kind;
  refs_[b] = 1;
  fill_[b] = kind == BlockKind::kRaw ? layout_.tokensPerBlock : 0;
  filledSlots_ += fill_[b];
  return b;
}

void PagedAllocator::addRefLocked(uint32_t block) {
  if (++refs_[block] == 2) ++sharedBlocks_;
}

void PagedAllocator::dropRefLocked(uint32_t block, std::vector<uint32_t>* scrubLater) {
  const uint32_t refs = --refs_[block];
  if (refs == 1) --sharedBlocks_;
  if (refs == 0) retireLocked(block, scrubLater);
}

void PagedAllocator::retireLocked(uint32_t block, std::vector<uint32_t>* scrubLater) {
  filledSlots_ -= fill_[block];
  fill_[block] = 0;
  refs_[block] = 0;
  generation_[block] = nextGeneration(generation_[block]);
  if (readers_[block] > 0) {
    kind_[block] = BlockKind::kZombie;  // the last reader frees it
  } else if (scrub_ == ScrubPolicy::kAlways) {
    kind_[block] = BlockKind::kScrubbing;
    scrubLater->push_back(block);
  } else {
    pushFreeLocked(block);
  }
}

void PagedAllocator::finishScrubs(std::vector<uint32_t>* scrubLater) {
  if (scrubLater->empty()) return;
  for (uint32_t b : *scrubLater) memory_->scrubBlock(b);
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t b : *scrubLater) {
    tenant_[b] = 0;
    pushFreeLocked(b);
  }
  scrubLater->clear();
}

void PagedAllocator::scrubPending(const std::vector<AppendLease::PendingScrub>& scrubs) {
  for (const auto& s : scrubs) memory_->scrubBlock(s.block);
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
  slot.appending = false;
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
  if (c->appending) return busyContext();
  const uint64_t n = bytes / layout_.bytesPerToken;
  if (n == 0) return Status::ok();

  const uint64_t partial = c->tokens % tpb;
  const bool cow = partial != 0 && refs_[c->pages.back()] > 1;
  const uint64_t pagesAfter = (c->tokens + n + tpb - 1) / tpb;
  const uint64_t newPages = pagesAfter - c->pages.size();
  const uint64_t needed = newPages + (cow ? 1 : 0);
  if (needed > freeStack_.size()) {
    return Status(Code::kPoolExhausted, "append needs " + std::to_string(needed) + " blocks, " +
                                            std::to_string(freeStack_.size()) + " free");
  }
  try {  // every allocation happens before any state changes
    c->pages.reserve(pagesAfter);
    lease->newBlocks_.reserve(newPages);
    lease->scrubs_.reserve(needed);
    lease->runs_.reserve(newPages + 1);
  } catch (const std::bad_alloc&) {
    lease->reset();
    return outOfMemory();
  }

  lease->pool_ = this;
  lease->context_ = ctx;
  lease->tokens_ = n;
  lease->bytes_ = bytes;
  uint64_t remaining = n;
  if (partial != 0) {
    uint32_t target = c->pages.back();
    if (cow) {
      lease->cow_ = true;
      lease->cowSource_ = target;
      lease->cowBlock_ = takeFreeLocked(c->tenant, BlockKind::kContext, &lease->scrubs_);
      target = lease->cowBlock_;
    }
    const uint64_t count = std::min(remaining, tpb - partial);
    lease->runs_.push_back({target, static_cast<uint32_t>(partial), static_cast<uint32_t>(count)});
    remaining -= count;
  }
  while (remaining > 0) {
    const uint32_t b = takeFreeLocked(c->tenant, BlockKind::kContext, &lease->scrubs_);
    lease->newBlocks_.push_back(b);
    const uint64_t count = std::min(remaining, tpb);
    lease->runs_.push_back({b, 0, static_cast<uint32_t>(count)});
    remaining -= count;
  }
  c->appending = true;
  return Status::ok();
}

void PagedAllocator::commitAppend(AppendLease* lease) {
  std::vector<uint32_t> scrubLater;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ContextSlot* c = findLocked(lease->context_);  // live: release is refused while appending
    if (lease->cow_) {
      const uint32_t copied = static_cast<uint32_t>(c->tokens % layout_.tokensPerBlock);
      fill_[lease->cowBlock_] = copied;
      filledSlots_ += copied;
      c->pages.back() = lease->cowBlock_;
      dropRefLocked(lease->cowSource_, &scrubLater);
    }
    for (uint32_t b : lease->newBlocks_) c->pages.push_back(b);
    for (const SlotRun& run : lease->runs_) {
      const uint32_t end = run.slot + run.count;
      if (end > fill_[run.block]) {
        filledSlots_ += end - fill_[run.block];
        fill_[run.block] = end;
      }
    }
    c->tokens += lease->tokens_;
    c->appending = false;
  }
  finishScrubs(&scrubLater);
}

void PagedAllocator::abortAppend(AppendLease* lease) {
  std::vector<uint32_t> scrubLater;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!lease->copied_) {
      // Never scrubbed: the block still holds its previous owner's bytes, so it keeps that owner.
      for (const auto& s : lease->scrubs_) tenant_[s.block] = s.previousTenant;
    }
    if (lease->cow_) retireLocked(lease->cowBlock_, &scrubLater);
    for (uint32_t b : lease->newBlocks_) retireLocked(b, &scrubLater);
    if (ContextSlot* c = findLocked(lease->context_)) c->appending = false;
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
  try {
    lease->runs_.reserve(tokenCount / tpb + 2);
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  uint64_t token = startToken;
  const uint64_t end = startToken + tokenCount;
  while (token < end) {
    const uint32_t block = c->pages[token / tpb];
    const uint64_t slot = token % tpb;
    const uint64_t count = std::min(end - token, tpb - slot);
    lease->runs_.push_back({block, static_cast<uint32_t>(slot), static_cast<uint32_t>(count)});
    ++readers_[block];
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
  try {
    lease->runs_.push_back({c->pages[pageIndex], 0, layout_.tokensPerBlock});
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  ++readers_[c->pages[pageIndex]];
  lease->pool_ = this;
  lease->wholeBlock_ = true;
  lease->bytes_ = layout_.blockBytes;
  return Status::ok();
}

void PagedAllocator::endRead(ReadLease* lease) {
  std::vector<uint32_t> scrubLater;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const SlotRun& run : lease->runs_) {
      if (--readers_[run.block] == 0 && kind_[run.block] == BlockKind::kZombie) {
        if (scrub_ == ScrubPolicy::kAlways) {
          kind_[run.block] = BlockKind::kScrubbing;
          scrubLater.push_back(run.block);
        } else {
          pushFreeLocked(run.block);
        }
      }
    }
  }
  finishScrubs(&scrubLater);
}

Status PagedAllocator::fork(Handle ctx, Handle* child) {
  std::lock_guard<std::mutex> lock(mu_);
  const ContextSlot* parent = findLocked(ctx);
  if (!parent) return staleContext();
  if (parent->appending) return busyContext();
  std::vector<uint32_t> pages;
  try {
    pages = parent->pages;  // copied before a slot is claimed, so a failed fork consumes nothing
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  const uint32_t tenant = parent->tenant;
  const uint64_t tokens = parent->tokens;
  Handle created;
  Status st = claimSlotLocked(tenant, &created);  // may reallocate contexts_: parent is invalid now
  if (!st.isOk()) return st;
  ContextSlot& kid = contexts_[handleIndex(created)];
  for (uint32_t b : pages) addRefLocked(b);
  kid.pages = std::move(pages);
  kid.tokens = tokens;
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
  std::vector<uint32_t> scrubLater;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ContextSlot* c = findLocked(ctx);
    if (!c) return staleContext();
    if (c->appending) return busyContext();
    try {
      scrubLater.reserve(scrub_ == ScrubPolicy::kAlways ? c->pages.size() : 0);
    } catch (const std::bad_alloc&) {
      return outOfMemory();
    }
    for (uint32_t b : c->pages) dropRefLocked(b, &scrubLater);
    c->pages.clear();
    c->pages.shrink_to_fit();
    c->live = false;
    c->tokens = 0;
    c->pinCount = 0;
    --liveContexts_;
    const uint32_t index = handleIndex(ctx);
    if (c->generation < kMaxGeneration) {
      ++c->generation;
      freeSlots_.push_back(index);  // a saturated slot is retired, so its handles can never come back
    }
  }
  finishScrubs(&scrubLater);
  return Status::ok();
}

Status PagedAllocator::blockTable(Handle ctx, std::vector<uint32_t>* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  const ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  try {
    *out = c->pages;
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  return Status::ok();
}

PoolStats PagedAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PoolStats s;
  s.totalBlocks = blockCount_;
  s.freeBlocks = freeStack_.size();
  s.usedBlocks = s.totalBlocks - s.freeBlocks;
  s.sharedBlocks = sharedBlocks_;
  s.blockBytes = layout_.blockBytes;
  s.totalBytes = s.totalBlocks * s.blockBytes;
  s.usedBytes = s.usedBlocks * s.blockBytes;
  s.freeBytes = s.freeBlocks * s.blockBytes;
  s.contexts = liveContexts_;
  s.wasteBytes = (s.usedBlocks * layout_.tokensPerBlock - filledSlots_) * layout_.bytesPerToken;
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
  for (uint32_t b : c->pages) s.sharedBlocks += refs_[b] > 1 ? 1 : 0;
  s.pinCount = c->pinCount;
  s.bytes = c->tokens * layout_.bytesPerToken;
  s.wasteBytes = (s.blocks * layout_.tokensPerBlock - c->tokens) * layout_.bytesPerToken;
  *out = s;
  return Status::ok();
}

// ---- raw blocks ----

Status PagedAllocator::allocateBlocks(uint32_t tenant, uint32_t count, Handle* out) {
  if (tenant == 0) return Status(Code::kInvalidArgument, "tenant must be >= 1");
  std::vector<AppendLease::PendingScrub> scrubs;
  try {
    scrubs.reserve(count);
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (count > freeStack_.size()) {
      return Status(Code::kPoolExhausted, std::to_string(count) + " blocks requested, " +
                                              std::to_string(freeStack_.size()) + " free");
    }
    for (uint32_t i = 0; i < count; ++i) {
      const uint32_t b = takeFreeLocked(tenant, BlockKind::kRaw, &scrubs);
      out[i] = packHandle(generation_[b], b);
    }
  }
  scrubPending(scrubs);  // before the handles reach the caller
  return Status::ok();
}

Status PagedAllocator::freeBlocks(const Handle* handles, size_t count) {
  std::vector<uint32_t> scrubLater;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Status verdict = Status::ok();
    size_t marked = 0;
    for (; marked < count; ++marked) {
      const uint32_t b = handleIndex(handles[marked]);
      if (b >= blockCount_ || kind_[b] == BlockKind::kFree || generation_[b] != handleGeneration(handles[marked]) ||
          batchMark_[b]) {
        verdict = Status(Code::kStaleHandle, "block handle at position " + std::to_string(marked) +
                                                 " is unknown, freed or repeated");
        break;
      }
      if (kind_[b] != BlockKind::kRaw) {
        verdict = Status(Code::kInvalidArgument,
                         "block at position " + std::to_string(marked) + " belongs to a context; release the context");
        break;
      }
      batchMark_[b] = 1;
    }
    for (size_t i = 0; i < marked; ++i) batchMark_[handleIndex(handles[i])] = 0;
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

// ---- leases ----

AppendLease::AppendLease(AppendLease&& other) noexcept { *this = std::move(other); }

AppendLease& AppendLease::operator=(AppendLease&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = other.pool_;
    context_ = other.context_;
    tokens_ = other.tokens_;
    bytes_ = other.bytes_;
    copied_ = other.copied_;
    cowSource_ = other.cowSource_;
    cowBlock_ = other.cowBlock_;
    cow_ = other.cow_;
    newBlocks_ = std::move(other.newBlocks_);
    scrubs_ = std::move(other.scrubs_);
    runs_ = std::move(other.runs_);
    other.pool_ = nullptr;
  }
  return *this;
}

AppendLease::~AppendLease() { reset(); }

void AppendLease::reset() {
  if (pool_) pool_->abortAppend(this);
  pool_ = nullptr;
  tokens_ = bytes_ = 0;
  copied_ = cow_ = false;
  newBlocks_.clear();
  scrubs_.clear();
  runs_.clear();
}

void AppendLease::copyFrom(const uint8_t* src) {
  if (!pool_ || copied_) return;
  BlockMemory& memory = *pool_->memory_;
  pool_->scrubPending(scrubs_);
  if (cow_) memory.copyBlock(cowBlock_, cowSource_);
  const uint64_t bytesPerToken = pool_->layout_.bytesPerToken;
  for (const SlotRun& run : runs_) {
    memory.writeSlots(run.block, run.slot, run.count, src);
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

ReadLease::ReadLease(ReadLease&& other) noexcept { *this = std::move(other); }

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

ReadLease::~ReadLease() { reset(); }

void ReadLease::reset() {
  if (pool_) pool_->endRead(this);
  pool_ = nullptr;
  bytes_ = 0;
  wholeBlock_ = false;
  runs_.clear();
}

void ReadLease::copyTo(uint8_t* dst) const {
  if (!pool_) return;
  const BlockMemory& memory = *pool_->memory_;
  if (wholeBlock_) {
    memory.readBlock(runs_.front().block, dst);
    return;
  }
  const uint64_t bytesPerToken = pool_->layout_.bytesPerToken;
  for (const SlotRun& run : runs_) {
    memory.readSlots(run.block, run.slot, run.count, dst);
    dst += run.count * bytesPerToken;
  }
}

}  // namespace kvfabric
