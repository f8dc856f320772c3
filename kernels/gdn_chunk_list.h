// gdn_chunk_list.h: the list of chunks (32 tokens; 64 for gdn_bf16.cu) that the GDN
// kernels with a per-chunk pass (gdn_chunked.cu's prep, gdn_split.cu, gdn_bf16.cu)
// launch over, written into the workspace by prepare (host, untimed) and read back
// bounded by the kernels.
// Invariants: sizes come from total_tokens and batch_size only (chunks <=
// total_tokens / chunk + batch_size), so a graph replay with another batch of the
// same bucket stays within them; chunk_first[b] is stream b's first chunk index
// (streams in batch order, chunks in token order), size batch_size + 1.
#pragma once
#include <cstdint>
#include <vector>

namespace pb::kernels {

constexpr int kGdnChunk = 32;  // tokens per chunk, for every chunked GDN kernel

// One chunk of one stream: its stream, first token row, and chunk index.
struct GdnChunkItem {
  int32_t stream, t0, chunk, pad;
};

// Byte offsets, from the start of the list's region: the item count (int32), the
// items (in `order`, the streams' launch order) and chunk_first.
struct GdnChunkList {
  uint64_t count = 0, items = 0, chunk_first = 0, bytes = 0;
  uint32_t max_chunks = 0;
};
GdnChunkList gdn_chunk_list_layout(uint32_t total_tokens, uint32_t batch_size, int chunk = kGdnChunk);

// The list for these streams (cu_seqlens_host, size batch + 1), streams in `order`,
// `chunk` tokens a chunk.
void plan_gdn_chunks(const std::vector<int32_t>& cu_seqlens_host, const std::vector<int32_t>& order,
                     std::vector<GdnChunkItem>* items, std::vector<int32_t>* chunk_first, int chunk = kGdnChunk);

// The list as the kernels read it: device pointers into the workspace region at
// `scratch`, and the capacity every index read back is bounded by.
struct GdnChunkListView {
  const int32_t* count;
  const GdnChunkItem* items;
  const int32_t* chunk_first;
  int max_chunks;
};
inline GdnChunkListView gdn_chunk_list_view(uint64_t scratch, const GdnChunkList& l) {
  return {reinterpret_cast<const int32_t*>(scratch + l.count), reinterpret_cast<const GdnChunkItem*>(scratch + l.items),
          reinterpret_cast<const int32_t*>(scratch + l.chunk_first), static_cast<int>(l.max_chunks)};
}

inline uint64_t gdn_round256(uint64_t n) { return (n + 255) & ~uint64_t(255); }

}  // namespace pb::kernels
