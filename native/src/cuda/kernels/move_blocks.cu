// Copies `count` whole blocks, each `vecs` 16-byte vectors long, between the addresses of a table of
// (source, destination) pairs. Either side may be device memory or mapped pinned host memory, so one
// launch moves every scattered block of a lease over PCIe in both the offload and restore directions.
// blockIdx.y walks the blocks, blockIdx.x and the threads split one block.
struct alignas(16) Vec16 {
  unsigned long long lo, hi;
};
extern "C" __global__ void kvf_move_blocks(const unsigned long long* table, unsigned int count,
                                           unsigned long long vecs) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned int b = blockIdx.y; b < count; b += gridDim.y) {
    const Vec16* src = reinterpret_cast<const Vec16*>(table[2 * b]);
    Vec16* dst = reinterpret_cast<Vec16*>(table[2 * b + 1]);
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < vecs; i += stride) {
      dst[i] = src[i];
    }
  }
}
