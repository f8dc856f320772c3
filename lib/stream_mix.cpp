// stream_mix.cpp: expands a scenario's `streams:` list (explicit entries and generators)
// into the batch's streams, and checks them against the scenario's resources.
// Same scenario + seed => the same streams on every machine: only pb::Rng is used.
//
// Draw order (changing it changes every generated batch): one Rng, for_purpose(seed,
// kRngStreams). Entries in file order; explicit streams draw nothing. For each generator,
// for each of its `count` streams in order: first its tokens, then its chunk_start.
// A value is drawn only where it is random:
//   tokens   fixed: no draw (= tokens); uniform: uniform_int(min, max);
//            lognormal: round(median * exp(sigma * normal())) clamped to [min, max]
//            (normal() takes two raw draws); long_tail: the first long_count streams take
//            `long` with no draw, the rest uniform_int(min, max). Nothing is shuffled:
//            the long streams stay first, in packed order.
//   chunk_start  uniform_int(chunk_start, chunk_start_max) when chunk_start_max > 0,
//            else chunk_start with no draw.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "batch.h"
#include "rng.h"

namespace pb {

std::vector<StreamSpec> resolve_streams(const Scenario& s) {
  Rng rng = Rng::for_purpose(s.seed, kRngStreams);
  std::vector<StreamSpec> out;
  for (const StreamSource& src : s.streams) {
    if (src.stream) {
      out.push_back(*src.stream);
      continue;
    }
    if (!src.generate) continue;
    const StreamGenerator& g = *src.generate;
    for (int i = 0; i < g.count; ++i) {
      StreamSpec st;
      switch (g.dist) {
        case StreamDist::fixed:
          st.tokens = g.tokens;
          break;
        case StreamDist::uniform:
          st.tokens = int(rng.uniform_int(g.min, g.max));
          break;
        case StreamDist::lognormal: {
          const double x = std::round(g.median * std::exp(g.sigma * rng.normal()));
          // Clamp in double: exp may overflow to inf, which clamps to max.
          st.tokens = int(std::min(std::max(x, double(g.min)), double(g.max)));
          break;
        }
        case StreamDist::long_tail:
          st.tokens = i < g.long_count ? g.long_tokens : int(rng.uniform_int(g.min, g.max));
          break;
      }
      st.chunk_start = g.chunk_start_max > 0 ? int(rng.uniform_int(g.chunk_start, g.chunk_start_max))
                                             : g.chunk_start;
      out.push_back(std::move(st));
    }
  }
  return out;
}

namespace {

// Where resolved stream b came from: its field path and how to name it.
struct Origin {
  std::string field;  // "streams[3]" (the entry; a generator's entry for generated streams)
  std::string label;  // "stream 5" or "stream 5 (generated)"
  bool generated = false;
};

std::vector<Origin> origins(const Scenario& s, size_t n) {
  std::vector<Origin> o;
  for (size_t k = 0; k < s.streams.size(); ++k) {
    const std::string f = "streams[" + std::to_string(k) + "]";
    const int c = s.streams[k].generate ? s.streams[k].generate->count : s.streams[k].stream ? 1 : 0;
    for (int i = 0; i < c; ++i) {
      const std::string lbl = "stream " + std::to_string(o.size());
      o.push_back({f, s.streams[k].generate ? lbl + " (generated)" : lbl, bool(s.streams[k].generate)});
    }
  }
  if (o.size() != n) {  // streams not from this scenario's list: name them by index only
    o.clear();
    for (size_t b = 0; b < n; ++b) o.push_back({"streams", "stream " + std::to_string(b), false});
  }
  return o;
}

}  // namespace

void validate_batch(const Scenario& s, const std::vector<StreamSpec>& streams) {
  const std::vector<Origin> from = origins(s, streams.size());
  const int64_t bs = s.model.block_size;
  if (streams.empty()) throw s.error("streams", "expected at least one stream, found none");
  if (bs <= 0) throw s.error("model.block_size", "expected a positive block_size, found " + std::to_string(bs));

  int64_t total_tokens = 0, blocks_needed = 0;
  // Explicit block id -> (stream, index in its table), for repeats within and across streams.
  std::map<int32_t, std::pair<size_t, size_t>> owner;
  // Every stream's problems are collected (validate reports them all); the batch
  // totals are judged only when every stream was good.
  std::vector<std::string> problems;
  for (size_t b = 0; b < streams.size(); ++b) try {
    const StreamSpec& st = streams[b];
    const Origin& o = from[b];
    if (st.tokens <= 0)
      throw s.error(o.generated ? o.field : o.field + ".tokens",
                    o.label + ": expected a positive token count, found " + std::to_string(st.tokens));
    if (st.chunk_start < 0)
      throw s.error(o.generated ? o.field : o.field + ".chunk_start",
                    o.label + ": expected a non-negative chunk_start, found " + std::to_string(st.chunk_start));
    const int64_t kv_len = int64_t(st.chunk_start) + st.tokens;
    if (kv_len > std::numeric_limits<int32_t>::max())
      throw s.error(o.field, o.label + ": kv_len " + std::to_string(kv_len) + " does not fit the i32 kv_lens");
    const int64_t need = (kv_len + bs - 1) / bs;
    blocks_needed += need;
    total_tokens += st.tokens;

    if (!st.blocks.empty()) {
      const std::string bf = o.field + ".blocks";
      if (s.kv_num_blocks <= 0)
        throw s.error(bf, o.label + ": explicit block ids need kv_cache.num_blocks (the cache they index)");
      if (int64_t(st.blocks.size()) != need)
        throw s.error(bf, o.label + ": block table has " + std::to_string(st.blocks.size()) +
                              " entries but the stream needs " + std::to_string(need) + " (kv_len " +
                              std::to_string(kv_len) + ", block_size " + std::to_string(bs) + ")");
      for (size_t j = 0; j < st.blocks.size(); ++j) {
        const int32_t id = st.blocks[j];
        const std::string ef = bf + "[" + std::to_string(j) + "]";
        if (id < 0 || id >= s.kv_num_blocks)
          throw s.error(ef, o.label + ": block id " + std::to_string(id) + " is outside the KV cache [0, " +
                                std::to_string(s.kv_num_blocks) + ") (kv_cache.num_blocks)");
        auto [it, fresh] = owner.insert({id, {b, j}});
        if (!fresh)
          throw s.error(ef, o.label + ": block id " + std::to_string(id) + " is already used by stream " +
                                std::to_string(it->second.first) + " (entry " + std::to_string(it->second.second) +
                                "); a physical block belongs to one stream once");
      }
    }

    int64_t prev_end = 0;
    for (size_t j = 0; j < st.images.size(); ++j) {
      const ImageSegment& im = st.images[j];
      const std::string ef = o.field + ".images[" + std::to_string(j) + "]";
      const int64_t n = int64_t(im.grid_t) * im.grid_h * im.grid_w;
      if (im.grid_t <= 0 || im.grid_h <= 0 || im.grid_w <= 0)
        throw s.error(ef, o.label + ": image grid must be positive");
      if (!s.model.mrope.enabled) throw s.error(ef, o.label + ": image segments need model.mrope");
      if (im.start < prev_end)
        throw s.error(ef, o.label + ": image segments must be sorted and non-overlapping: starts at " +
                              std::to_string(im.start) + ", the previous one ends at " + std::to_string(prev_end));
      if (im.start + n > kv_len)
        throw s.error(ef, o.label + ": image tokens [" + std::to_string(im.start) + ", " +
                              std::to_string(im.start + n) + ") reach past the sequence [0, " +
                              std::to_string(kv_len) + ")");
      prev_end = im.start + n;
    }
  } catch (const InputError& e) {
    problems.insert(problems.end(), e.problems().begin(), e.problems().end());
  }
  if (!problems.empty()) throw InputError(problems);
  if (total_tokens > std::numeric_limits<int32_t>::max())
    throw s.error("streams", "total_tokens " + std::to_string(total_tokens) + " does not fit the i32 cu_seqlens");

  if (s.kv_num_blocks > 0 && s.kv_num_blocks < blocks_needed + 1)
    throw s.error("kv_cache.num_blocks",
                  "KV cache too small: needs " + std::to_string(blocks_needed + 1) + " blocks (" +
                      std::to_string(blocks_needed) + " for " + std::to_string(streams.size()) +
                      " streams at block_size " + std::to_string(bs) + ", plus 1 poison block), given " +
                      std::to_string(s.kv_num_blocks));
}

}  // namespace pb
