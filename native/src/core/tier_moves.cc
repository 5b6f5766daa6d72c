// PagedAllocator's tier moves: demote, promote, fill and spill leases, import of disk-only contexts, and
// the per-page disk and tier views the disk tier needs.
#include <algorithm>
#include <new>
#include <string>

#include "allocator_detail.h"
#include "paged_allocator.h"

namespace kvfabric {

using namespace detail;

// ---- tiers ----

Status PagedAllocator::beginDemote(Handle ctx, MoveLease* lease) {
  lease->reset();
  std::lock_guard<std::mutex> lock(mu_);
  ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  if (c->busy) return busyContext();
  if (!c->resident) return Status(Code::kInvalidState, "context is already offloaded");
  return beginMoveLocked(c, ctx, MoveLease::Kind::kDemote, Tier::kHost, lease);
}

Status PagedAllocator::beginPromote(Handle ctx, MoveLease* lease) {
  lease->reset();
  std::lock_guard<std::mutex> lock(mu_);
  ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  if (c->busy) return busyContext();
  if (c->resident) return Status::ok();  // already on the device: nothing to do
  for (uint32_t b : c->pages) {
    if (blocks_[b].tier == Tier::kDisk) {
      return Status(Code::kInvalidState, "context has pages only on disk; fill them into the host tier first");
    }
  }
  return beginMoveLocked(c, ctx, MoveLease::Kind::kPromote, Tier::kHost, lease);
}

Status PagedAllocator::beginFill(Handle ctx, MoveLease* lease, Tier target) {
  lease->reset();
  if (target != Tier::kHost && target != Tier::kDevice)
    return Status(Code::kInvalidArgument, "a fill goes to the host or the device tier");
  std::lock_guard<std::mutex> lock(mu_);
  ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  if (c->busy) return busyContext();
  if (c->resident) return Status::ok();  // a resident context has every page on the device
  if (target == Tier::kDevice) {
    for (uint32_t b : c->pages) {
      if (blocks_[b].tier == Tier::kHost) {
        return Status(Code::kInvalidState, "context has pages in host memory; fill to the host tier, then promote");
      }
    }
  }
  return beginMoveLocked(c, ctx, MoveLease::Kind::kFill, target, lease);
}

Status PagedAllocator::beginMoveLocked(ContextSlot* c, Handle ctx, MoveLease::Kind kind, Tier fillTarget,
                                       MoveLease* lease) {
  // Which blocks move: demote takes device blocks no other resident context uses; promote takes host
  // blocks; fill takes blocks whose only copy is on disk.
  std::vector<uint32_t> chosen;  // page indices
  try {
    chosen.reserve(c->pages.size());
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  for (uint32_t page = 0; page < c->pages.size(); ++page) {
    const BlockMeta& m = blocks_[c->pages[page]];
    const bool moves = kind == MoveLease::Kind::kDemote    ? m.tier == Tier::kDevice && m.activeRefs == 1
                       : kind == MoveLease::Kind::kPromote ? m.tier == Tier::kHost
                                                           : m.tier == Tier::kDisk;
    if (m.moving) return busyBlocks();
    if (!moves) continue;
    if (m.readers > 0) return busyBlocks();
    chosen.push_back(page);
  }
  const Tier to = kind == MoveLease::Kind::kPromote ? Tier::kDevice
                  : kind == MoveLease::Kind::kFill  ? fillTarget
                                                    : Tier::kHost;
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
  for (uint32_t page : chosen) {
    const uint32_t b = c->pages[page];
    BlockMeta& m = blocks_[b];
    const FrameGrant grant = takeFrameLocked(to, c->tenant);  // the whole frame is overwritten: no scrub
    lease->moves_.push_back({b, m.frame, grant, false, page, m.fill, m.checksum, 0});
    if (kind == MoveLease::Kind::kFill) lease->diskKeys_.push_back(m.diskKey);
    m.moving = true;
  }
  lease->pool_ = this;
  lease->kind_ = kind;
  lease->context_ = ctx;
  lease->fillTarget_ = fillTarget;
  c->busy = true;
  return Status::ok();
}

void PagedAllocator::commitMove(MoveLease* lease) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ContextSlot* c = findLocked(lease->context_);  // live: release is refused while busy
    const Tier from = lease->kind_ == MoveLease::Kind::kDemote    ? Tier::kDevice
                      : lease->kind_ == MoveLease::Kind::kPromote ? Tier::kHost
                                                                  : Tier::kDisk;
    for (const MoveLease::Move& move : lease->moves_) {
      if (from != Tier::kDisk) releaseFrameLocked(from, move.fromFrame);
      setTierLocked(move.block, move.to.tier, move.to.frame);
      BlockMeta& m = blocks_[move.block];
      m.moving = false;
    }
    if (lease->kind_ == MoveLease::Kind::kDemote) {
      for (uint32_t b : c->pages) --blocks_[b].activeRefs;
      c->resident = false;
    } else if (lease->kind_ == MoveLease::Kind::kPromote ||
               (lease->kind_ == MoveLease::Kind::kFill && lease->fillTarget_ == Tier::kDevice)) {
      // Every page is on the device now (a device fill starts only without host pages).
      for (uint32_t b : c->pages) ++blocks_[b].activeRefs;
      c->resident = true;
    }
    c->busy = false;
  }
}

void PagedAllocator::abortMove(MoveLease* lease) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const MoveLease::Move& move : lease->moves_) {
      returnGrantLocked(move.to, lease->copied_ || move.written);
      blocks_[move.block].moving = false;
    }
    if (ContextSlot* c = findLocked(lease->context_)) c->busy = false;
  }
}

Status PagedAllocator::beginSpill(Handle ctx, SpillLease* lease) {
  lease->reset();
  std::lock_guard<std::mutex> lock(mu_);
  ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  if (c->busy) return busyContext();
  try {
    lease->runs_.reserve(c->pages.size());
    lease->pages_.reserve(c->pages.size());
    lease->fills_.reserve(c->pages.size());
    lease->checksums_.reserve(c->pages.size());
  } catch (const std::bad_alloc&) {
    lease->reset();
    return outOfMemory();
  }
  for (uint32_t page = 0; page < c->pages.size(); ++page) {
    const uint32_t b = c->pages[page];
    const BlockMeta& m = blocks_[b];
    if (m.diskKey != 0) continue;  // already on disk: shared blocks are written once
    if (m.moving) {
      lease->reset();
      return busyBlocks();
    }
    lease->runs_.push_back({b, m.tier, m.frame, 0, layout_.tokensPerBlock});
    lease->pages_.push_back(page);
    lease->fills_.push_back(m.fill);
    lease->checksums_.push_back(m.checksum);
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    try {
      freedDiskKeys_.reserve(freedDiskKeys_.size() + count);
    } catch (const std::bad_alloc&) {
      return outOfMemory();
    }
    ContextSlot* c = findLocked(lease->context_);
    for (size_t i = 0; i < count; ++i) setDiskKeyLocked(lease->runs_[i].block, diskKeys[i]);
    endReadersLocked(lease->runs_);
    lease->runs_.clear();
    if (dropHostFrames && !c->resident) {
      for (uint32_t b : c->pages) {
        BlockMeta& m = blocks_[b];
        if (m.tier == Tier::kHost && m.diskKey != 0 && m.readers == 0 && !m.moving) {
          releaseFrameLocked(Tier::kHost, m.frame);
          setTierLocked(b, Tier::kDisk, 0);
        }
      }
    }
    c->busy = false;
  }
  return Status::ok();
}

void PagedAllocator::abortSpill(SpillLease* lease) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    endReadersLocked(lease->runs_);
    if (ContextSlot* c = findLocked(lease->context_)) c->busy = false;
  }
}

Status PagedAllocator::importContext(uint32_t tenant, uint64_t tokens, const uint64_t* diskKeys,
                                     const uint32_t* checksums, size_t pages, Handle* out) {
  if (tenant == 0) return Status(Code::kInvalidArgument, "tenant must be >= 1");
  if (checksums == nullptr && pages > 0) return Status(Code::kInvalidArgument, "checksums are required, one per page");
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
    ++diskOnlyBlocks_;  // tier kDisk from newBlockLocked
    setDiskKeyLocked(b, diskKeys[i]);
    blocks_[b].checksum = checksums[i];
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

template <typename T, typename Field>
Status PagedAllocator::perPage(Handle ctx, std::vector<T>* out, Field field) const {
  std::lock_guard<std::mutex> lock(mu_);
  const ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  try {
    out->resize(c->pages.size());
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  }
  for (size_t i = 0; i < c->pages.size(); ++i) (*out)[i] = field(blocks_[c->pages[i]]);
  return Status::ok();
}

Status PagedAllocator::pageDiskKeys(Handle ctx, std::vector<uint64_t>* out) const {
  return perPage(ctx, out, [](const BlockMeta& m) { return m.diskKey; });
}

Status PagedAllocator::pageTiers(Handle ctx, std::vector<Tier>* out) const {
  return perPage(ctx, out, [](const BlockMeta& m) { return m.tier; });
}

Status PagedAllocator::pageChecksums(Handle ctx, std::vector<uint32_t>* out) const {
  return perPage(ctx, out, [](const BlockMeta& m) { return m.checksum; });
}

Status PagedAllocator::forgetDiskCopies(Handle ctx, const uint64_t* keys, size_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  ContextSlot* c = findLocked(ctx);
  if (!c) return staleContext();
  if (c->busy) return busyContext();
  auto named = [&](uint64_t key) { return key != 0 && std::find(keys, keys + count, key) != keys + count; };
  for (uint32_t b : c->pages) {
    if (named(blocks_[b].diskKey) && blocks_[b].tier == Tier::kDisk) {
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

}  // namespace kvfabric
