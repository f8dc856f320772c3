// gdn_chunk_list.cu: the host side of gdn_chunk_list.h (layout and plan).
#include "kernels/gdn_chunk_list.h"

#include <algorithm>

namespace pb::kernels {

GdnChunkList gdn_chunk_list_layout(uint32_t total_tokens, uint32_t batch_size, int chunk) {
  GdnChunkList l;
  l.max_chunks = static_cast<uint32_t>(uint64_t(total_tokens) / chunk + batch_size);
  l.count = 0;
  l.items = 256;
  l.chunk_first = l.items + gdn_round256(uint64_t(l.max_chunks + 1) * sizeof(GdnChunkItem));
  l.bytes = l.chunk_first + gdn_round256((uint64_t(batch_size) + 1) * 4);
  return l;
}

void plan_gdn_chunks(const std::vector<int32_t>& cu, const std::vector<int32_t>& order,
                     std::vector<GdnChunkItem>* items, std::vector<int32_t>* chunk_first, int chunk) {
  const int n = cu.empty() ? 0 : static_cast<int>(cu.size()) - 1;
  chunk_first->assign(static_cast<size_t>(n) + 1, 0);
  for (int b = 0; b < n; ++b) {
    const int len = std::max(0, cu[b + 1] - cu[b]);
    (*chunk_first)[b + 1] = (*chunk_first)[b] + (len + chunk - 1) / chunk;
  }
  items->clear();
  for (const int32_t b : order) {
    if (b < 0 || b >= n) continue;
    for (int t0 = cu[b], c = (*chunk_first)[b]; t0 < cu[b + 1]; t0 += chunk, ++c) items->push_back({b, t0, c, 0});
  }
}

}  // namespace pb::kernels
