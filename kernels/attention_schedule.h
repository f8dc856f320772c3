// attention_schedule.h: where the attention kernels' work goes, planned on the host
// from the metadata's host copies (plain C++: the host tests include it).
//  - The work list (order_attention_tiles): streams longest first, cut into L2
//    sections: consecutive streams whose K/V bytes together fit section_bytes (half the
//    device's L2; a stream larger than that is a section alone). Inside a section its
//    q-tiles go longest (most keys) first. A section's q-tiles read the same K/V tiles, so
//    they run close in time and read them from L2 rather than DRAM; the list still starts
//    with the batch's heaviest tiles.
//  - The persistent kernel's per-CTA lists (schedule_attention_entries): list scheduling
//    in that order, each entry to the CTA with the least work so far (the lowest index
//    on a tie), so entries start in list order and every CTA ends close to the others.
// Invariants: every q-tile of every stream exactly once, every entry exactly once; the
// same inputs give the same plan. The kernels re-read every bound from device memory,
// so a plan only moves work between CTAs, never changes a result's bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <queue>
#include <utility>
#include <vector>

namespace pb::kernels {

// One unit of attention work: q-tile `tile` of stream `stream`. A q-tile is the
// kernel's rows per tile of packed rows times all q heads of one GQA group.
struct AttnWorkItem {
  int32_t stream;
  int32_t tile;
};

// Keys the last row of q-tile `tile` of stream b sees: its chunk_start plus the
// tile's end (kv_len - count is the chunk_start; a missing kv_len means none).
inline long long attention_tile_keys(int rows, const std::vector<int32_t>& cu_seqlens_host,
                                     const std::vector<int32_t>& kv_lens_host, AttnWorkItem w) {
  const int count = std::max(cu_seqlens_host[w.stream + 1] - cu_seqlens_host[w.stream], 0);
  const int kv_len = w.stream < static_cast<int>(kv_lens_host.size()) ? std::max(kv_lens_host[w.stream], 0) : count;
  const long long chunk_start = std::max(kv_len - count, 0);
  return chunk_start + std::min(static_cast<long long>(w.tile + 1) * rows, static_cast<long long>(count));
}

// The work list: q-tiles of `rows` packed rows, in L2 sections of streams (above).
// kv_bytes_per_token: one token's K and V over all kv heads; 0 (or section_bytes 0)
// makes the whole batch one section, i.e. plain longest-first.
inline std::vector<AttnWorkItem> order_attention_tiles(int rows, const std::vector<int32_t>& cu_seqlens_host,
                                                       const std::vector<int32_t>& kv_lens_host,
                                                       uint64_t kv_bytes_per_token, uint64_t section_bytes) {
  const int n = cu_seqlens_host.empty() ? 0 : static_cast<int>(cu_seqlens_host.size()) - 1;
  if (rows <= 0) return {};
  struct Keyed {
    long long keys;
    AttnWorkItem item;
  };
  // Each stream's tiles, and its K/V extent (the keys of its last tile).
  std::vector<std::vector<Keyed>> tiles(n);
  std::vector<long long> extent(n, 0);
  for (int b = 0; b < n; ++b) {
    const int count = std::max(cu_seqlens_host[b + 1] - cu_seqlens_host[b], 0);
    for (int t = 0; static_cast<long long>(t) * rows < count; ++t) {
      const AttnWorkItem w{b, t};
      tiles[b].push_back({attention_tile_keys(rows, cu_seqlens_host, kv_lens_host, w), w});
      extent[b] = std::max(extent[b], tiles[b].back().keys);
    }
  }
  std::vector<int> streams(n);
  for (int b = 0; b < n; ++b) streams[b] = b;
  std::stable_sort(streams.begin(), streams.end(), [&](int a, int b) { return extent[a] > extent[b]; });
  std::vector<AttnWorkItem> work;
  std::vector<Keyed> section;
  uint64_t bytes = 0;
  auto flush = [&] {
    std::stable_sort(section.begin(), section.end(), [](const Keyed& a, const Keyed& b) { return a.keys > b.keys; });
    for (const Keyed& k : section) work.push_back(k.item);
    section.clear();
    bytes = 0;
  };
  const bool one_section = kv_bytes_per_token == 0 || section_bytes == 0;
  for (int b : streams) {
    if (tiles[b].empty()) continue;
    const uint64_t kv = static_cast<uint64_t>(extent[b]) * kv_bytes_per_token;
    if (!one_section && !section.empty() && bytes + kv > section_bytes) flush();
    section.insert(section.end(), tiles[b].begin(), tiles[b].end());
    bytes += kv;
  }
  flush();
  return work;
}

// The persistent kernel's schedule over `ctas` CTAs: entry x = item * per_item + j
// (j < per_item: the item's kv heads and head chunks) for each valid item of `work`
// (padding {-1, -1} has none), item by item in list order, each to the CTA with the
// least cost so far; an entry costs `cost[item]`. Returned as one array: offsets[0..ctas]
// then the entries, CTA i's being entries[offsets[i] .. offsets[i + 1]).
inline std::vector<int32_t> schedule_attention_entries(const std::vector<AttnWorkItem>& work,
                                                       const std::vector<long long>& cost, int per_item, int ctas) {
  std::vector<std::vector<int32_t>> lists(std::max(ctas, 0));
  if (ctas > 0 && per_item > 0) {
    using Load = std::pair<long long, int>;  // (cost so far, cta): the least first, then the lowest cta
    std::priority_queue<Load, std::vector<Load>, std::greater<Load>> free_at;
    for (int i = 0; i < ctas; ++i) free_at.push({0, i});
    for (size_t item = 0; item < work.size(); ++item) {
      if (work[item].stream < 0) continue;
      for (int j = 0; j < per_item; ++j) {
        const Load l = free_at.top();
        free_at.pop();
        lists[l.second].push_back(static_cast<int32_t>(item * per_item + j));
        free_at.push({l.first + std::max(cost[item], 1LL), l.second});
      }
    }
  }
  std::vector<int32_t> out(static_cast<size_t>(std::max(ctas, 0)) + 1, 0);
  for (int i = 0; i < ctas; ++i) out[i + 1] = out[i] + static_cast<int32_t>(lists[i].size());
  for (const auto& l : lists) out.insert(out.end(), l.begin(), l.end());
  return out;
}

}  // namespace pb::kernels
