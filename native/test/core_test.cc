// The C++ core's own test: no Node-API involved. Exercises the allocator directly, including the
// lease paths (abort, zombie blocks) that the TypeScript suite can only reach indirectly.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "block_checksum.h"
#include "paged_allocator.h"
#include "stream_copy.h"

// The CUDA checksum kernel's own source, compiled for the CPU (kernel_host_shim.h).
#include "kernel_host_shim.h"
#include "sum_planes.cu"

using namespace kvfabric;

static int passed = 0, failed = 0;
#define CHECK(cond)                                                        \
  do {                                                                     \
    if (cond) {                                                            \
      ++passed;                                                            \
    } else {                                                               \
      ++failed;                                                            \
      std::fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                      \
  } while (0)

// The tests' pool: 8 bytes per token, 4 tokens per block.
static PoolConfig tinyConfig(uint32_t blocks, uint32_t hostBlocks = 0,
                             ScrubPolicy scrub = ScrubPolicy::kOnTenantChange) {
  PoolConfig config;
  config.shape = {2, 1, 2, 1};
  config.tokensPerBlock = 4;
  config.blockCount = blocks;
  config.hostBlockCount = hostBlocks;
  config.scrub = scrub;
  return config;
}

static std::unique_ptr<PagedAllocator> makePool(uint32_t blocks, ScrubPolicy scrub = ScrubPolicy::kOnTenantChange) {
  const PoolConfig config = tinyConfig(blocks, 0, scrub);
  std::unique_ptr<PagedAllocator> pool;
  Status st = PagedAllocator::create(config, nullptr, &pool);
  if (!st.isOk()) std::fprintf(stderr, "create: %s\n", st.message().c_str());
  return pool;
}

static std::vector<uint8_t> tokens(uint64_t count, uint8_t seed) {
  std::vector<uint8_t> bytes(count * 8);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(seed + i);
  return bytes;
}

static void testLayoutValidation() {
  BlockLayout layout;
  CHECK(BlockLayout::make({32, 8, 128, 2}, 16, &layout).isOk());
  CHECK(layout.bytesPerToken == 128 * 1024);
  CHECK(layout.blockBytes == 2 * 1024 * 1024);
  CHECK(BlockLayout::make({0, 8, 128, 2}, 16, &layout).code() == Code::kInvalidArgument);
  CHECK(BlockLayout::make({0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, 16, &layout).code() ==
        Code::kInvalidArgument);
  PoolConfig config;
  config.shape = {1, 1, 1, 1};
  config.blockCount = 0;
  std::unique_ptr<PagedAllocator> pool;
  CHECK(PagedAllocator::create(config, nullptr, &pool).code() == Code::kInvalidArgument);
}

static void testAppendReadForkCow() {
  auto pool = makePool(8);
  Handle a;
  CHECK(pool->createContext(7, &a).isOk());
  auto six = tokens(6, 1);
  CHECK(pool->append(a, six.data(), six.size()).isOk());
  std::vector<uint8_t> out;
  CHECK(pool->read(a, 0, 6, &out).isOk() && out == six);
  Handle b;
  CHECK(pool->fork(a, &b).isOk());
  CHECK(pool->stats().sharedBlocks == 2);
  auto more = tokens(1, 100);
  CHECK(pool->append(b, more.data(), more.size()).isOk());  // copy-on-write of the partial page
  CHECK(pool->stats().sharedBlocks == 1);
  CHECK(pool->stats().usedBlocks == 3);
  CHECK(pool->read(a, 0, 6, &out).isOk() && out == six);
  std::vector<uint8_t> expected = six;
  expected.insert(expected.end(), more.begin(), more.end());
  CHECK(pool->read(b, 0, 7, &out).isOk() && out == expected);
  CHECK(pool->read(a, 0, 7, &out).code() == Code::kOutOfRange);
  CHECK(pool->release(a).isOk());
  CHECK(pool->release(a).code() == Code::kStaleHandle);
  CHECK(pool->release(b).isOk());
  CHECK(pool->stats().freeBlocks == 8);
  CHECK(pool->stats().sharedBlocks == 0);
}

// A prefix fork shares the parent's first full pages only; the child's next append starts a block of its
// own, and the shared pages are freed with their last holder.
static void testForkPrefix() {
  auto pool = makePool(8);
  Handle a;
  CHECK(pool->createContext(7, &a).isOk());
  auto ten = tokens(10, 1);  // pages: 4 + 4 + 2
  CHECK(pool->append(a, ten.data(), ten.size()).isOk());
  Handle b;
  CHECK(pool->forkPrefix(a, 3, &b).code() == Code::kOutOfRange);  // the third page is not full
  CHECK(pool->stats().contexts == 1);
  CHECK(pool->forkPrefix(a, 1, &b).isOk());
  ContextStats s;
  CHECK(pool->contextStats(b, &s).isOk() && s.tokens == 4 && s.blocks == 1 && s.sharedBlocks == 1 && s.tenant == 7);
  auto other = tokens(5, 200);
  CHECK(pool->append(b, other.data(), other.size()).isOk());  // into new blocks: page 0 stays shared
  std::vector<uint8_t> out;
  std::vector<uint8_t> expected(ten.begin(), ten.begin() + 4 * 8);
  expected.insert(expected.end(), other.begin(), other.end());
  CHECK(pool->read(b, 0, 9, &out).isOk() && out == expected);
  CHECK(pool->read(a, 0, 10, &out).isOk() && out == ten);
  CHECK(pool->stats().sharedBlocks == 1 && pool->stats().usedBlocks == 5);
  Handle empty;
  CHECK(pool->forkPrefix(a, 0, &empty).isOk());
  CHECK(pool->contextStats(empty, &s).isOk() && s.tokens == 0 && s.blocks == 0);
  CHECK(pool->release(a).isOk());
  CHECK(pool->stats().usedBlocks == 3 && pool->stats().sharedBlocks == 0);
  CHECK(pool->release(b).isOk() && pool->release(empty).isOk());
  CHECK(pool->stats().freeBlocks == 8);
}

static void testExhaustionChangesNothing() {
  auto pool = makePool(2);
  Handle a;
  CHECK(pool->createContext(1, &a).isOk());
  auto nine = tokens(9, 3);
  CHECK(pool->append(a, nine.data(), nine.size()).code() == Code::kPoolExhausted);
  ContextStats s;
  CHECK(pool->contextStats(a, &s).isOk() && s.tokens == 0 && s.blocks == 0);
  CHECK(pool->stats().freeBlocks == 2);
  CHECK(pool->append(a, nine.data(), 7).code() == Code::kInvalidArgument);
}

static void testAbortedAppendRestoresEverything() {
  auto pool = makePool(4);
  Handle a;
  CHECK(pool->createContext(1, &a).isOk());
  {
    AppendLease lease;
    CHECK(pool->beginAppend(a, 8 * 5, &lease).isOk());
    CHECK(pool->stats().freeBlocks == 2);
    CHECK(pool->release(a).code() == Code::kBusy);
    Handle child;
    CHECK(pool->fork(a, &child).code() == Code::kBusy);
  }  // dropped without commit
  CHECK(pool->stats().freeBlocks == 4);
  ContextStats s;
  CHECK(pool->contextStats(a, &s).isOk() && s.tokens == 0);
  AppendLease uncopied;
  CHECK(pool->beginAppend(a, 8, &uncopied).isOk());
  CHECK(uncopied.commit().code() == Code::kInvalidState);
  CHECK(pool->stats().freeBlocks == 4);
}

static void testZombieBlockFreedByLastReader() {
  auto pool = makePool(4, ScrubPolicy::kAlways);
  Handle a;
  CHECK(pool->createContext(1, &a).isOk());
  auto four = tokens(4, 9);
  CHECK(pool->append(a, four.data(), four.size()).isOk());
  ReadLease lease;
  CHECK(pool->beginRead(a, 0, 4, &lease).isOk());
  CHECK(pool->release(a).isOk());  // reads do not block release
  CHECK(pool->stats().freeBlocks == 3);
  std::vector<uint8_t> out(lease.bytes());
  lease.copyTo(out.data());
  CHECK(out == four);  // the block was not reused while read
  lease = ReadLease();
  CHECK(pool->stats().freeBlocks == 4);
}

static void testScrubOnTenantChange() {
  auto pool = makePool(1);
  Handle a, b;
  CHECK(pool->createContext(1, &a).isOk());
  auto two = tokens(2, 50);
  CHECK(pool->append(a, two.data(), two.size()).isOk());
  CHECK(pool->release(a).isOk());
  CHECK(pool->createContext(2, &b).isOk());
  auto one = tokens(1, 200);
  CHECK(pool->append(b, one.data(), one.size()).isOk());
  ReadLease lease;
  CHECK(pool->beginReadBlock(b, 0, &lease).isOk());
  std::vector<uint8_t> raw(lease.bytes());
  lease.copyTo(raw.data());
  // Slot 1 of each plane held tenant 1's token; it must be zero now.
  bool clean = true;
  for (uint32_t plane = 0; plane < 4; ++plane) {
    for (uint32_t i = 0; i < 2; ++i) clean = clean && raw[plane * 8 + 2 + i] == 0;
  }
  CHECK(clean);
}

// Host memory whose scrubs fail as a device's would: nothing is zeroed and the failure shows only as fault().
class FailingScrubMemory final : public HostAddressedMemory {
 public:
  FailingScrubMemory(const BlockLayout& layout, uint32_t frames)
      : HostAddressedMemory(layout), bytes_(uint64_t{frames} * layout.blockBytes) {}
  void scrubBlock(uint32_t) override { fault_ = Status(Code::kUnavailable, "scrub failed"); }
  Status fault() const override { return fault_; }

 private:
  uint8_t* frameAddress(uint32_t frame) const override {
    return const_cast<uint8_t*>(bytes_.data()) + uint64_t{frame} * layout_.blockBytes;
  }
  std::vector<uint8_t> bytes_;
  Status fault_;
};

static std::unique_ptr<PagedAllocator> makeFailingScrubPool(uint32_t blocks, ScrubPolicy scrub) {
  const PoolConfig config = tinyConfig(blocks, 0, scrub);
  BlockLayout layout;
  std::unique_ptr<PagedAllocator> pool;
  if (!BlockLayout::make(config.shape, config.tokensPerBlock, &layout).isOk() ||
      !PagedAllocator::create(config, std::make_unique<FailingScrubMemory>(layout, blocks), nullptr, &pool).isOk()) {
    std::fprintf(stderr, "create failed\n");
  }
  return pool;
}

// A frame whose scrub failed may still hold its last tenant's bytes: it must never be handed out again.
static void testFailedScrubWithholdsFrame() {
  auto always = makeFailingScrubPool(2, ScrubPolicy::kAlways);
  Handle a;
  CHECK(always->createContext(1, &a).isOk());
  auto four = tokens(4, 9);
  CHECK(always->append(a, four.data(), four.size()).isOk());
  CHECK(always->release(a).isOk());  // nothing is zeroed on release: the frame is, when handed out again
  Handle handles[2];
  CHECK(always->allocateBlocks(1, 2, handles).code() == Code::kUnavailable);  // the same tenant: scrubbed all the same
  CHECK(always->stats().freeBlocks == 1);
  CHECK(always->allocateBlocks(1, 2, handles).code() == Code::kPoolExhausted);

  auto onChange = makeFailingScrubPool(1, ScrubPolicy::kOnTenantChange);
  CHECK(onChange->createContext(1, &a).isOk());
  CHECK(onChange->append(a, four.data(), four.size()).isOk());
  CHECK(onChange->release(a).isOk());  // tenant 1's bytes stay until another tenant takes the frame
  CHECK(onChange->allocateBlocks(2, 1, handles).code() == Code::kUnavailable);
  CHECK(onChange->stats().freeBlocks == 0);
  CHECK(onChange->allocateBlocks(2, 1, handles).code() == Code::kPoolExhausted);
}

static void testRawBlocks() {
  auto pool = makePool(4);
  Handle handles[4];
  CHECK(pool->allocateBlocks(1, 5, handles).code() == Code::kPoolExhausted);
  CHECK(pool->allocateBlocks(1, 3, handles).isOk());
  Handle twice[2] = {handles[0], handles[0]};
  CHECK(pool->freeBlocks(twice, 2).code() == Code::kStaleHandle);
  CHECK(pool->stats().freeBlocks == 1);
  CHECK(pool->freeBlocks(handles, 3).isOk());
  CHECK(pool->freeBlocks(handles, 1).code() == Code::kStaleHandle);
  CHECK(pool->stats().freeBlocks == 4);
}

static void testConcurrentContexts() {
  auto pool = makePool(4096);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 1);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 200; ++round) {
        Handle h;
        if (!pool->createContext(1 + t, &h).isOk()) {
          ok[t] = 0;
          return;
        }
        auto bytes = tokens(37, static_cast<uint8_t>(t * 31 + round));
        if (!pool->append(h, bytes.data(), bytes.size()).isOk()) ok[t] = 0;
        Handle child;
        if (!pool->fork(h, &child).isOk()) ok[t] = 0;
        std::vector<uint8_t> out;
        if (!pool->read(child, 0, 37, &out).isOk() || out != bytes) ok[t] = 0;
        if (!pool->release(h).isOk() || !pool->release(child).isOk()) ok[t] = 0;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(ok[0] && ok[1] && ok[2] && ok[3]);
  CHECK(pool->stats().freeBlocks == 4096);
  CHECK(pool->stats().contexts == 0);
}

static std::unique_ptr<PagedAllocator> makeTieredPool(uint32_t device, uint32_t host) {
  const PoolConfig config = tinyConfig(device, host);
  std::unique_ptr<PagedAllocator> pool;
  Status st = PagedAllocator::create(config, nullptr, &pool);
  if (!st.isOk()) std::fprintf(stderr, "create: %s\n", st.message().c_str());
  return pool;
}

static void testSharedBlocksMoveOnce() {
  auto pool = makeTieredPool(8, 8);
  Handle parent, child;
  auto six = tokens(6, 1);
  CHECK(pool->createContext(1, &parent).isOk());
  CHECK(pool->append(parent, six.data(), six.size()).isOk());
  CHECK(pool->fork(parent, &child).isOk());
  CHECK(pool->demote(parent).isOk());  // the child still uses both blocks: nothing moves
  CHECK(pool->stats().host.usedBlocks == 0);
  CHECK(pool->demote(child).isOk());  // now both move, once
  PoolStats s = pool->stats();
  CHECK(s.usedBlocks == 0 && s.host.usedBlocks == 2 && s.sharedBlocks == 2);
  std::vector<uint8_t> out;
  CHECK(pool->read(child, 0, 6, &out).isOk() && out == six);  // readable from the host tier
  auto one = tokens(1, 7);
  CHECK(pool->append(child, one.data(), one.size()).code() == Code::kInvalidState);
  CHECK(pool->promote(parent).isOk());
  s = pool->stats();
  CHECK(s.usedBlocks == 2 && s.host.usedBlocks == 0 && s.sharedBlocks == 2);
  CHECK(pool->promote(child).isOk());  // its blocks came back with the parent: still shared
  CHECK(pool->stats().usedBlocks == 2);
  CHECK(pool->read(child, 0, 6, &out).isOk() && out == six);
  CHECK(pool->release(parent).isOk() && pool->release(child).isOk());
  CHECK(pool->stats().freeBlocks == 8 && pool->stats().host.freeBlocks == 8);
}

// Per-tenant counts: a block shared by forks counts once, pinned counts only pinned contexts' blocks in
// memory, and each tier is counted where the blocks are.
static void testTenantBlocks() {
  auto pool = makeTieredPool(8, 8);
  Handle parent, child, other;
  auto six = tokens(6, 1);
  CHECK(pool->createContext(1, &parent).isOk());
  CHECK(pool->append(parent, six.data(), six.size()).isOk());
  CHECK(pool->fork(parent, &child).isOk());
  CHECK(pool->createContext(2, &other).isOk());
  CHECK(pool->append(other, six.data(), 4 * 8).isOk());
  CHECK(pool->pin(child).isOk());
  std::vector<TenantBlocks> all = pool->tenantBlocks();
  CHECK(all.size() == 2);
  CHECK(all[0].tenant == 1 && all[0].device == 2 && all[0].host == 0 && all[0].pinned == 2);
  CHECK(all[1].tenant == 2 && all[1].device == 1 && all[1].host == 0 && all[1].pinned == 0);
  CHECK(pool->demote(other).isOk());
  all = pool->tenantBlocks();
  CHECK(all[1].device == 0 && all[1].host == 1);
  CHECK(pool->unpin(child).isOk() && pool->release(parent).isOk() && pool->release(child).isOk());
  CHECK(pool->release(other).isOk());
  CHECK(pool->tenantBlocks().empty());
}

static void testSpillFillAndImport() {
  auto pool = makeTieredPool(4, 4);
  Handle a;
  auto five = tokens(5, 3);
  CHECK(pool->createContext(1, &a).isOk());
  CHECK(pool->append(a, five.data(), five.size()).isOk());
  CHECK(pool->demote(a).isOk());
  std::vector<std::vector<uint8_t>> disk;  // stands in for the disk tier
  {
    SpillLease spill;
    CHECK(pool->beginSpill(a, &spill).isOk() && spill.blocks() == 2);
    Handle other;
    CHECK(pool->fork(a, &other).code() == Code::kBusy);
    std::vector<uint64_t> keys;
    for (size_t i = 0; i < spill.blocks(); ++i) {
      disk.emplace_back(32);
      CHECK(spill.copyBlock(i, disk.back().data()).isOk());
      keys.push_back(100 + i);
    }
    CHECK(spill.commit(keys.data(), keys.size(), true).isOk());
  }
  std::vector<uint32_t> sumsOfA;  // what a manifest records beside the disk keys
  CHECK(pool->pageChecksums(a, &sumsOfA).isOk() && sumsOfA.size() == 2);
  PoolStats s = pool->stats();
  CHECK(s.host.usedBlocks == 0 && s.diskOnlyBlocks == 2 && s.diskCopies == 2);
  std::vector<uint8_t> out;
  CHECK(pool->read(a, 0, 5, &out).code() == Code::kInvalidState);
  CHECK(pool->promote(a).code() == Code::kInvalidState);
  {
    MoveLease fill;
    CHECK(pool->beginFill(a, &fill).isOk() && fill.diskKeys().size() == 2);
    CHECK(fill.write(0, disk[fill.diskKeys()[0] - 100].data(), 32).isOk());
  }  // dropped half-written: undone
  CHECK(pool->stats().host.usedBlocks == 0 && pool->stats().diskOnlyBlocks == 2);
  {
    MoveLease fill;
    CHECK(pool->beginFill(a, &fill).isOk());
    for (size_t i = 0; i < fill.diskKeys().size(); ++i) {
      CHECK(fill.write(i, disk[fill.diskKeys()[i] - 100].data(), 32).isOk());
    }
    CHECK(fill.commit().isOk());
  }
  CHECK(pool->promote(a).isOk());
  CHECK(pool->read(a, 0, 5, &out).isOk() && out == five);
  auto more = tokens(1, 9);
  CHECK(pool->append(a, more.data(), more.size()).isOk());  // in place: the last block's disk copy is stale
  std::vector<uint64_t> freed = pool->takeFreedDiskKeys();
  CHECK(freed.size() == 1 && freed[0] == 101);
  CHECK(pool->release(a).isOk());
  freed = pool->takeFreedDiskKeys();
  CHECK(freed.size() == 1 && freed[0] == 100);

  {
    // Straight to the device: a context whose pages are only on disk becomes resident in one fill.
    Handle direct;
    const uint64_t diskOnly[2] = {200, 201};
    CHECK(pool->importContext(1, 5, diskOnly, sumsOfA.data(), 2, &direct).isOk());
    const uint64_t deviceUsed = pool->stats().usedBlocks;
    {
      MoveLease fill;
      CHECK(pool->beginFill(direct, &fill, Tier::kDevice).isOk() && fill.diskKeys().size() == 2);
      CHECK(fill.write(0, disk[0].data(), 32).isOk());
    }  // dropped half-written: undone, no device frame kept
    CHECK(pool->stats().usedBlocks == deviceUsed && pool->stats().diskOnlyBlocks == 2);
    {
      MoveLease fill;
      CHECK(pool->beginFill(direct, &fill, Tier::kDevice).isOk());
      for (size_t i = 0; i < fill.diskKeys().size(); ++i) CHECK(fill.write(i, disk[i].data(), 32).isOk());
      CHECK(fill.commit().isOk());
    }
    ContextStats ds;
    CHECK(pool->contextStats(direct, &ds).isOk() && ds.resident && ds.devicePages == 2 && ds.hostPages == 0);
    CHECK(pool->stats().host.usedBlocks == 0 && pool->stats().usedBlocks == deviceUsed + 2);
    CHECK(pool->read(direct, 0, 5, &out).isOk() && out == five);
    // A context with a page in host memory fills to the host and promotes instead.
    CHECK(pool->demote(direct).isOk());
    MoveLease refused;
    CHECK(pool->beginFill(direct, &refused, Tier::kDevice).code() == Code::kInvalidState);
    CHECK(pool->beginFill(direct, &refused, Tier::kDisk).code() == Code::kInvalidArgument);
    CHECK(pool->release(direct).isOk());
    pool->takeFreedDiskKeys();
  }

  Handle imported;
  const uint64_t keys[2] = {100, 101};
  CHECK(pool->importContext(1, 9, keys, sumsOfA.data(), 2, &imported).code() == Code::kInvalidArgument);
  CHECK(pool->importContext(1, 5, keys, nullptr, 2, &imported).code() == Code::kInvalidArgument);  // checksums required
  CHECK(pool->importContext(1, 5, keys, sumsOfA.data(), 2, &imported).isOk());
  ContextStats cs;
  CHECK(pool->contextStats(imported, &cs).isOk() && !cs.resident && cs.diskOnlyPages == 2 && cs.tokens == 5);
  CHECK(pool->release(imported).isOk());
  CHECK(pool->takeFreedDiskKeys().size() == 2);
  CHECK(pool->stats().diskOnlyBlocks == 0 && pool->stats().diskCopies == 0);
}

static void testHostTierFull() {
  auto pool = makeTieredPool(4, 1);
  Handle a;
  auto eight = tokens(8, 5);
  CHECK(pool->createContext(1, &a).isOk());
  CHECK(pool->append(a, eight.data(), eight.size()).isOk());
  CHECK(pool->demote(a).code() == Code::kPoolExhausted);
  ContextStats cs;
  CHECK(pool->contextStats(a, &cs).isOk() && cs.resident && cs.devicePages == 2);
  CHECK(pool->stats().host.freeBlocks == 1);
}

// The checksum a page carries is CRC-32C of its tokens in token-major order, however they were appended;
// a byte changed in a tier is found by the move that copies it, which then moves nothing.
static void testChecksums() {
  const char* nine = "123456789";
  CHECK(crc32c(0, reinterpret_cast<const uint8_t*>(nine), 9) == 0xE3069283u);  // the standard check value
  std::vector<uint8_t> long_(50000);
  for (size_t i = 0; i < long_.size(); ++i) long_[i] = static_cast<uint8_t>(i * 7 + (i >> 9));
  const uint32_t whole = crc32c(0, long_.data(), long_.size());
  CHECK(crc32c(crc32c(0, long_.data(), 1234), long_.data() + 1234, long_.size() - 1234) == whole);
  CrcShift by30000;  // joins a CRC to the CRC of the 30,000 bytes after it
  by30000.make(30000);
  CHECK((by30000(crc32c(0, long_.data(), 20000)) ^ crc32c(0, long_.data() + 20000, 30000)) == whole);

  PoolConfig config;
  config.shape = {3, 2, 4, 2};  // 6 planes of 16-byte pieces: 96 bytes a token
  config.tokensPerBlock = 5;
  config.blockCount = 8;
  config.hostBlockCount = 8;
  std::unique_ptr<BlockMemory> hostMemory;
  BlockLayout layout;
  CHECK(PagedAllocator::validate(config, &layout).isOk());
  CHECK(HostBlockMemory::create(layout, config.hostBlockCount, &hostMemory).isOk());
  BlockMemory* host = hostMemory.get();
  std::unique_ptr<PagedAllocator> pool;
  CHECK(PagedAllocator::create(config, nullptr, std::move(hostMemory), &pool).isOk());

  Handle a, b;
  CHECK(pool->createContext(1, &a).isOk());
  std::vector<uint8_t> kv(12 * 96);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<uint8_t>(i * 31 + 5);
  // 12 tokens in three appends that split blocks differently; then a fork whose next append copies on write.
  CHECK(pool->append(a, kv.data(), 3 * 96).isOk());
  CHECK(pool->append(a, kv.data() + 3 * 96, 4 * 96).isOk());
  CHECK(pool->fork(a, &b).isOk());
  CHECK(pool->append(a, kv.data() + 7 * 96, 5 * 96).isOk());
  std::vector<uint32_t> sums;
  CHECK(pool->pageChecksums(a, &sums).isOk() && sums.size() == 3);
  for (size_t page = 0; page < 3; ++page) {
    CHECK(sums[page] == crc32c(0, kv.data() + page * 5 * 96, std::min<size_t>(5, 12 - page * 5) * 96));
  }
  std::vector<uint32_t> forkSums;
  CHECK(pool->pageChecksums(b, &forkSums).isOk() && forkSums.size() == 2);
  CHECK(forkSums[0] == sums[0] && forkSums[1] == crc32c(0, kv.data() + 5 * 96, 2 * 96));

  // Offloaded, one byte of page 1 flipped in host memory: the restore refuses, naming the page, and moves nothing.
  CHECK(pool->demote(a).isOk());
  uint8_t* flipped = nullptr;
  for (uint32_t frame = 0; frame < config.hostBlockCount && flipped == nullptr; ++frame) {
    uint8_t* bytes = host->hostAddress(frame);
    if (std::memcmp(bytes, kv.data() + 5 * 96, 16) == 0) flipped = bytes + 16 * 5 + 3;  // plane 1, token 0
  }
  CHECK(flipped != nullptr);
  if (flipped == nullptr) return;
  *flipped ^= 0x40;
  Status st = pool->promote(a);
  CHECK(st.code() == Code::kIntegrity && st.message().find("page 1 ") == 0);
  ContextStats cs;
  CHECK(pool->contextStats(a, &cs).isOk() && !cs.resident && cs.hostPages == 2);  // page 0 stays: the fork uses it
  // So does a spill: a changed block is not written to disk as if it were the appended one.
  {
    SpillLease spill;
    CHECK(pool->beginSpill(a, &spill).isOk());
    std::vector<uint8_t> out(layout.blockBytes);
    CHECK(spill.copyBlock(0, out.data()).isOk());
    CHECK(spill.copyBlock(1, out.data()).code() == Code::kIntegrity);
  }
  *flipped ^= 0x40;
  CHECK(pool->promote(a).isOk());
  std::vector<uint8_t> back;
  CHECK(pool->read(a, 0, 12, &back).isOk() && back == kv);

  // Disk: a fill checks each block against the page's checksum, an imported context's against its manifest's.
  CHECK(pool->demote(a).isOk());
  std::vector<std::vector<uint8_t>> disk;
  std::vector<uint64_t> keys;
  {
    SpillLease spill;
    CHECK(pool->beginSpill(a, &spill).isOk());
    for (size_t i = 0; i < spill.blocks(); ++i) {
      disk.emplace_back(layout.blockBytes);
      CHECK(spill.copyBlock(i, disk.back().data()).isOk());
      keys.push_back(300 + i);
    }
    CHECK(spill.commit(keys.data(), keys.size(), true).isOk());
  }
  Handle withSums;
  CHECK(pool->importContext(1, 12, keys.data(), sums.data(), 3, &withSums).isOk());
  {
    MoveLease fill;
    CHECK(pool->beginFill(withSums, &fill, Tier::kDevice).isOk());
    CHECK(fill.write(0, disk[1].data(), layout.blockBytes).code() == Code::kIntegrity);  // another page's bytes
  }
  CHECK(pool->contextStats(withSums, &cs).isOk() && cs.diskOnlyPages == 3);
  {
    MoveLease fill;
    CHECK(pool->beginFill(withSums, &fill, Tier::kDevice).isOk());
    for (size_t i = 0; i < 3; ++i) CHECK(fill.write(i, disk[i].data(), layout.blockBytes).isOk());
    CHECK(fill.commit().isOk());
    std::vector<uint32_t> kept;
    CHECK(pool->pageChecksums(withSums, &kept).isOk() && kept == sums);
    CHECK(pool->read(withSums, 0, 12, &back).isOk() && back == kv);
  }
}

// The device kernel's sums, joined on the host, equal the CPU's for any layout, fill and alignment:
// pieces of whole words, of odd sizes, blocks at odd addresses, several blocks in one launch.
static void testChecksumKernel() {
  const ModelShape shapes[] = {{3, 2, 4, 2}, {2, 1, 3, 1}, {1, 1, 1, 1}, {4, 3, 8, 1}, {2, 2, 64, 2}};
  const uint32_t tokenCounts[] = {1, 5, 16};
  uint32_t seed = 7;
  for (const ModelShape& shape : shapes) {
    for (uint32_t tokensPerBlock : tokenCounts) {
      BlockLayout layout;
      CHECK(BlockLayout::make(shape, tokensPerBlock, &layout).isOk());
      const BlockChecksum checksum(layout);
      std::vector<uint32_t> tables(BlockChecksum::kKernelTableWords);
      checksum.kernelTables(tables.data());
      const uint32_t count = tokensPerBlock + 1;  // every fill from 0 to full
      std::vector<uint8_t> bytes(count * (layout.blockBytes + 8) + 8);
      for (uint8_t& b : bytes) b = static_cast<uint8_t>((seed = seed * 1103515245 + 12345) >> 16);
      std::vector<unsigned long long> blocks(count);
      std::vector<uint32_t> fills(count);
      for (uint32_t i = 0; i < count; ++i) {
        blocks[i] = reinterpret_cast<uintptr_t>(bytes.data() + i * (layout.blockBytes + 8) + i % 8);  // any alignment
        fills[i] = i;
      }
      std::vector<uint32_t> planeSums(count * layout.planes, 0xDEADBEEF);
      const unsigned threads = 32;
      gridDim = {(count * layout.planes + threads - 1) / threads + 1, 1, 1};  // one more block than needed: idle
      blockDim = {threads, 1, 1};
      for (unsigned cta = 0; cta < gridDim.x; ++cta) {
        for (unsigned t = 0; t < threads; ++t) {
          blockIdx = {cta, 0, 0};
          threadIdx = {t, 0, 0};
          kvf_sum_planes(blocks.data(), fills.data(), count, layout.planes, layout.tokenPlaneBytes, layout.planeBytes,
                         tables.data(), planeSums.data());
        }
      }
      for (uint32_t i = 0; i < count; ++i) {
        const auto* block = reinterpret_cast<const uint8_t*>(blocks[i]);
        CHECK(checksum.joinPlanes(planeSums.data() + i * layout.planes) == checksum.of(block, fills[i]));
      }
    }
  }
}

// Checksums of whole blocks (of) and the copy that sums (copy) against the CRC of the same bytes gathered
// in token order, for piece sizes that take each path: 8-byte words (pieces not a multiple of 64), and
// 64-byte vectors folded where the CPU has AVX-512 VPCLMULQDQ (one vector a piece, and several).
static void testBlockChecksumPaths() {
  const uint32_t pieceBytes[] = {8, 24, 64, 128, 192, 256, 320, 1024, 2048, 2112};
  uint32_t seed = 11;
  for (uint32_t piece : pieceBytes) {
    for (uint32_t layers : {1u, 3u}) {
      BlockLayout layout;
      CHECK(BlockLayout::make({layers, 1, piece, 1}, 5, &layout).isOk());
      const BlockChecksum checksum(layout);
      // 64-byte aligned source and destination, as pool frames are.
      std::vector<uint8_t> memory(2 * layout.blockBytes + 128);
      uint8_t* src = memory.data() + (64 - reinterpret_cast<uintptr_t>(memory.data()) % 64);
      uint8_t* dst = src + (layout.blockBytes + 63) / 64 * 64;
      for (uint64_t i = 0; i < layout.blockBytes; ++i)
        src[i] = static_cast<uint8_t>((seed = seed * 1103515245 + 12345) >> 16);
      for (uint32_t fill = 0; fill <= layout.tokensPerBlock; ++fill) {
        std::vector<uint8_t> tokenMajor;
        for (uint32_t t = 0; t < fill; ++t) {
          for (uint32_t p = 0; p < layout.planes; ++p) {
            const uint8_t* at = src + p * layout.planeBytes + t * layout.tokenPlaneBytes;
            tokenMajor.insert(tokenMajor.end(), at, at + layout.tokenPlaneBytes);
          }
        }
        const uint32_t expected = crc32c(0, tokenMajor.data(), tokenMajor.size());
        CHECK(checksum.of(src, fill) == expected);
        std::fill(dst, dst + layout.blockBytes, 0);
        CHECK(checksum.copy(dst, src, fill) == expected);
        CHECK(std::memcmp(dst, src, layout.blockBytes) == 0);
      }
    }
  }
}

// A streamed copy equals memcpy at every alignment of either end and every length across a few lines:
// the ragged head and tail go by memcpy, the whole lines between by streamed stores.
static void testStreamCopy() {
  std::vector<uint8_t> src(512 + 64), dst(512 + 128);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  for (uint32_t from = 0; from < 64; from += 7) {
    bool all = true;  // one check per source alignment
    for (uint32_t to = 0; to < 64; ++to) {
      for (uint32_t n : {0u, 1u, 63u, 64u, 65u, 127u, 128u, 200u, 448u, 511u}) {
        std::fill(dst.begin(), dst.end(), 0xEE);
        streamCopy(dst.data() + to, src.data() + from, n);
        streamFence();
        const bool same = std::memcmp(dst.data() + to, src.data() + from, n) == 0;
        const bool untouched = std::all_of(dst.begin(), dst.begin() + to, [](uint8_t b) { return b == 0xEE; }) &&
                               std::all_of(dst.begin() + to + n, dst.end(), [](uint8_t b) { return b == 0xEE; });
        all = all && same && untouched;
      }
    }
    CHECK(all);
  }
}

// Under kAlways (the default) a tenant's new context never sees bytes of its released ones; a frame an
// append overwrites whole is not zeroed first (the failing memory would fail the append if it were).
static void testScrubAlwaysWithinTenant() {
  CHECK(PoolConfig().scrub == ScrubPolicy::kAlways);
  auto pool = makePool(1, ScrubPolicy::kAlways);
  Handle a, b;
  CHECK(pool->createContext(1, &a).isOk());
  auto four = tokens(4, 50);
  CHECK(pool->append(a, four.data(), four.size()).isOk());
  CHECK(pool->release(a).isOk());
  CHECK(pool->createContext(1, &b).isOk());
  auto one = tokens(1, 200);
  CHECK(pool->append(b, one.data(), one.size()).isOk());
  ReadLease lease;
  CHECK(pool->beginReadBlock(b, 0, &lease).isOk());
  std::vector<uint8_t> raw(lease.bytes());
  lease.copyTo(raw.data());
  bool clean = true;  // slots 1..3 of each of the 4 planes (2 bytes per token-plane)
  for (uint32_t plane = 0; plane < 4; ++plane) {
    for (uint32_t i = 2; i < 8; ++i) clean = clean && raw[plane * 8 + i] == 0;
  }
  CHECK(clean);

  auto failing = makeFailingScrubPool(1, ScrubPolicy::kAlways);
  CHECK(failing->createContext(1, &a).isOk());
  CHECK(failing->append(a, four.data(), four.size()).isOk());
  CHECK(failing->release(a).isOk());
  CHECK(failing->createContext(1, &b).isOk());
  CHECK(failing->append(b, four.data(), four.size()).isOk());  // a whole block: no scrub asked for
}

// An append handed over in pieces (copyNext) lands the same bytes and checksums as in one go, and one
// stopped midway appends nothing and leaves no mix of its bytes and the frame's previous owner's.
static void testAppendInPieces() {
  auto whole = makePool(4);
  auto pieces = makePool(4);
  Handle w, p;
  CHECK(whole->createContext(1, &w).isOk());
  CHECK(pieces->createContext(1, &p).isOk());
  auto three = tokens(3, 1);
  CHECK(whole->append(w, three.data(), three.size()).isOk());
  CHECK(pieces->append(p, three.data(), three.size()).isOk());
  auto nine = tokens(9, 77);
  CHECK(whole->append(w, nine.data(), nine.size()).isOk());
  AppendLease lease;
  CHECK(pieces->beginAppend(p, nine.size(), &lease).isOk());
  CHECK(lease.tokens() == 9);
  for (uint64_t at = 0; lease.tokensLeft() > 0;) {  // 2 tokens a piece: pieces cross block boundaries
    const uint64_t n = std::min<uint64_t>(2, lease.tokensLeft());
    lease.copyNext(nine.data() + at * 8, n);
    at += n;
  }
  CHECK(lease.commit().isOk());
  std::vector<uint8_t> a, b;
  CHECK(whole->read(w, 0, 12, &a).isOk());
  CHECK(pieces->read(p, 0, 12, &b).isOk());
  CHECK(a == b);
  std::vector<uint32_t> sumsA, sumsB;
  CHECK(whole->pageChecksums(w, &sumsA).isOk());
  CHECK(pieces->pageChecksums(p, &sumsB).isOk());
  CHECK(sumsA == sumsB);

  // Tenant 1's bytes in the only frame; tenant 2's append of a whole block stops after one token.
  auto pool = makePool(1);
  Handle one, two;
  CHECK(pool->createContext(1, &one).isOk());
  auto four = tokens(4, 9);
  CHECK(pool->append(one, four.data(), four.size()).isOk());
  CHECK(pool->release(one).isOk());
  CHECK(pool->createContext(2, &two).isOk());
  {
    AppendLease stopped;
    CHECK(pool->beginAppend(two, four.size(), &stopped).isOk());
    auto mine = tokens(4, 100);
    stopped.copyNext(mine.data(), 1);
    CHECK(stopped.tokensLeft() == 3);
  }  // destroyed uncommitted
  ContextStats stats;
  CHECK(pool->contextStats(two, &stats).isOk());
  CHECK(stats.tokens == 0 && stats.blocks == 0);
  CHECK(pool->stats().freeBlocks == 1);
  auto single = tokens(1, 200);
  CHECK(pool->append(two, single.data(), single.size()).isOk());
  ReadLease read;
  CHECK(pool->beginReadBlock(two, 0, &read).isOk());
  std::vector<uint8_t> raw(read.bytes());
  read.copyTo(raw.data());
  bool clean = true;
  for (uint32_t plane = 0; plane < 4; ++plane) {
    for (uint32_t i = 2; i < 8; ++i) clean = clean && raw[plane * 8 + i] == 0;
  }
  CHECK(clean);
}

// A plane-major copy lays each plane's rows (or transposed elements) where the layout says, reading a
// fork's shared pages and a range that starts and ends inside pages, and refuses a changed byte, naming
// the page, whatever part of the page the range covers.
static void testPlaneMajor() {
  PoolConfig config;
  config.shape = {2, 1, 4, 2};  // 4 planes of 8-byte rows: 32 bytes a token
  config.tokensPerBlock = 4;
  config.blockCount = 8;
  std::unique_ptr<BlockMemory> deviceMemory;
  BlockLayout layout;
  CHECK(PagedAllocator::validate(config, &layout).isOk());
  CHECK(HostBlockMemory::create(layout, config.blockCount, &deviceMemory).isOk());
  BlockMemory* device = deviceMemory.get();
  std::unique_ptr<PagedAllocator> pool;
  CHECK(PagedAllocator::create(config, std::move(deviceMemory), &pool).isOk());
  Handle parent, child;
  CHECK(pool->createContext(1, &parent).isOk());
  std::vector<uint8_t> kv(10 * 32);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<uint8_t>(i * 13 + i / 256 * 7 + 1);  // no two rows alike
  CHECK(pool->append(parent, kv.data(), 6 * 32).isOk());
  CHECK(pool->fork(parent, &child).isOk());
  CHECK(pool->append(child, kv.data() + 6 * 32, 4 * 32).isOk());

  // Tokens [1, 9) of the child: planes in the order V1, K0, V0, K1 after a 3-byte header; V0 transposed by 2.
  const uint64_t start = 1, tokens = 8, header = 3;
  PlaneMajorLayout target;
  target.tokens = tokens;
  target.offset = {header + 1 * tokens * 8, header + 2 * tokens * 8, header + 3 * tokens * 8, header};
  target.elementBytes = {0, 0, 2, 0};
  uint64_t end = 0;
  CHECK(target.extent(layout, &end).isOk() && end == header + 4 * tokens * 8);
  std::vector<uint8_t> file(end, 0xEE);
  {
    ReadLease lease;
    CHECK(pool->beginRead(child, start, tokens, &lease).isOk());
    CHECK(lease.copyPlaneMajor(target, file.data()).isOk());
  }
  bool exact = file[0] == 0xEE && file[2] == 0xEE;
  for (uint64_t t = 0; t < tokens; ++t) {
    for (uint32_t p = 0; p < 4; ++p) {
      for (uint32_t b = 0; b < 8; ++b) {
        const uint8_t want = kv[(start + t) * 32 + p * 8 + b];
        const uint64_t at = target.elementBytes[p] == 0 ? target.offset[p] + t * 8 + b
                                                        : target.offset[p] + ((b / 2) * tokens + t) * 2 + b % 2;
        exact = exact && file[at] == want;
      }
    }
  }
  CHECK(exact);

  // A layout that misses a plane or splits a row unevenly is refused before anything is read.
  PlaneMajorLayout missing = target;
  missing.offset.pop_back();
  CHECK(missing.extent(layout, &end).code() == Code::kInvalidArgument);
  PlaneMajorLayout uneven = target;
  uneven.elementBytes[0] = 3;
  CHECK(uneven.extent(layout, &end).code() == Code::kInvalidArgument);

  // A byte of the child's own page 2 (tokens 8-9) flipped: a range reaching into it is refused naming it,
  // even one that reads only token 8 of it, while a range before it still reads.
  uint8_t* flipped = nullptr;
  for (uint32_t frame = 0; frame < config.blockCount && flipped == nullptr; ++frame) {
    uint8_t* bytes = device->hostAddress(frame);
    if (std::memcmp(bytes, kv.data() + 8 * 32, 8) == 0) flipped = bytes + 8 + 1;  // plane 0, token 9
  }
  CHECK(flipped != nullptr);
  if (flipped == nullptr) return;
  *flipped ^= 0x10;
  PlaneMajorLayout eight = target;
  eight.elementBytes = {0, 0, 0, 0};
  {
    ReadLease lease;
    CHECK(pool->beginRead(child, start, tokens, &lease).isOk());
    const Status st = lease.copyPlaneMajor(eight, file.data());
    CHECK(st.code() == Code::kIntegrity && st.message().find("page 2 ") == 0);
  }
  {
    PlaneMajorLayout seven = eight;
    seven.tokens = 7;
    ReadLease lease;
    CHECK(pool->beginRead(child, start, 7, &lease).isOk());
    CHECK(lease.copyPlaneMajor(seven, file.data()).isOk());
  }
  *flipped ^= 0x10;
}

int main() {
  testLayoutValidation();
  testAppendReadForkCow();
  testForkPrefix();
  testExhaustionChangesNothing();
  testAbortedAppendRestoresEverything();
  testZombieBlockFreedByLastReader();
  testScrubOnTenantChange();
  testFailedScrubWithholdsFrame();
  testScrubAlwaysWithinTenant();
  testAppendInPieces();
  testRawBlocks();
  testConcurrentContexts();
  testSharedBlocksMoveOnce();
  testTenantBlocks();
  testSpillFillAndImport();
  testHostTierFull();
  testChecksums();
  testChecksumKernel();
  testBlockChecksumPaths();
  testStreamCopy();
  testPlaneMajor();
  std::printf("core: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
