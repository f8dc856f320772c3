// graph_bucket.cpp: the --graph bucket's second batch (graph_bucket.h). Counts:
// batch 1's rotated by one stream, then N random transfers between streams inside
// [1, chunk_len]; chunk starts drawn in [0, min(max_blocks_per_seq * block_size -
// count, batch 1's largest chunk start + block_size)], cut back to 0 (largest
// first) while the blocks exceed the cache; block tables and inputs from the
// generator under seed' = seed ^ kBucketSeedSalt, with batch 1's poison block.
#include "graph_bucket.h"

#include <algorithm>
#include <numeric>

#include "rng.h"

namespace pb {

namespace {

constexpr uint64_t kBucketSeedSalt = 0x9e3779b97f4a7c15ull;

int blocks_of(int kv_len, int bs) { return (kv_len + bs - 1) / bs; }

}  // namespace

Batch generate_bucket_batch(const Scenario& s, const Batch& first) {
  const int N = first.num_streams, C = first.chunk_len, bs = first.block_size;
  const int max_kv = first.max_blocks_per_seq * bs;
  const uint64_t seed = s.seed ^ kBucketSeedSalt;
  Rng rng = Rng::for_purpose(seed, kRngStreams);

  std::vector<int> count(N), start(N, 0);
  for (int b = 0; b < N; ++b) count[b] = first.streams[(b + 1) % N].count;
  for (int t = 0; N > 1 && t < N; ++t) {
    const int i = static_cast<int>(rng.uniform_int(0, N - 1)), j = static_cast<int>(rng.uniform_int(0, N - 1));
    const int room = std::min(count[i] - 1, C - count[j]);
    if (i == j || room < 1) continue;
    const int d = static_cast<int>(rng.uniform_int(1, room));
    count[i] -= d;
    count[j] += d;
  }
  int max_start = 0;
  for (const StreamTruth& st : first.streams) max_start = std::max(max_start, st.chunk_start);
  for (int b = 0; b < N; ++b)
    start[b] = static_cast<int>(rng.uniform_int(0, std::max(0, std::min(max_kv - count[b], max_start + bs))));
  // The cache holds num_blocks - 1 stream blocks (one is the poison block).
  auto blocks = [&] {
    int n = 0;
    for (int b = 0; b < N; ++b) n += blocks_of(start[b] + count[b], bs);
    return n;
  };
  while (blocks() > first.num_blocks - 1) {
    const int b = static_cast<int>(std::max_element(start.begin(), start.end()) - start.begin());
    if (start[b] == 0) break;
    start[b] = 0;
  }
  if (blocks() > first.num_blocks - 1)  // the new counts do not fit: batch 1's counts, fresh starts of 0
    for (int b = 0; b < N; ++b) count[b] = first.streams[b].count, start[b] = 0;
  // Nothing varied (one stream and no room to move): move its start by one where it fits.
  bool same = true;
  for (int b = 0; b < N; ++b) same = same && count[b] == first.streams[b].count && start[b] == first.streams[b].chunk_start;
  if (same) {
    const int b = 0;
    if (start[b] + 1 + count[b] <= max_kv && blocks_of(start[b] + 1 + count[b], bs) - blocks_of(start[b] + count[b], bs) + blocks() <= first.num_blocks - 1)
      ++start[b];
    else if (start[b] > 0)
      --start[b];
  }

  const std::vector<StreamSpec> specs1 = resolve_streams(s);
  std::vector<StreamSpec> specs(N);
  for (int b = 0; b < N; ++b) {
    specs[b].chunk_start = start[b];
    specs[b].tokens = count[b];
    // Image segments stay where the scenario put them; a chunk that ends inside
    // one takes the tokens it reaches.
    if (b < static_cast<int>(specs1.size())) specs[b].images = specs1[b].images;
  }
  return generate_batch(s, specs, seed, first.num_blocks, first.poison_block);
}

BucketDiff bucket_diff(const Batch& a, const Batch& b) {
  BucketDiff d;
  const size_t n = std::min(a.streams.size(), b.streams.size());
  for (size_t i = 0; i < n; ++i) {
    d.counts = d.counts || a.streams[i].count != b.streams[i].count;
    d.chunk_starts = d.chunk_starts || a.streams[i].chunk_start != b.streams[i].chunk_start;
    d.kv_lens = d.kv_lens || a.streams[i].kv_len != b.streams[i].kv_len;
    d.block_tables = d.block_tables || a.streams[i].blocks != b.streams[i].blocks;
  }
  d.inputs = a.inputs_checksum != b.inputs_checksum;
  if (a.num_streams == 1)
    d.note = "one stream: its count is total_tokens; only its chunk start, kv_len, block table and inputs vary";
  else if (a.total_tokens == a.num_streams * a.chunk_len)
    d.note = "every stream is at chunk_len (total_tokens = batch_size x chunk_len): counts cannot vary; chunk starts, "
             "kv_lens, block tables and inputs do";
  return d;
}

}  // namespace pb
