// gdn_walk_plan.h: whether the chunked GDN walk takes its work queue for a batch, planned on
// the host from the streams' chunk counts (plain C++: the host tests include it).
// The lockstep walk (gdn_chunked.cu) runs per_stream items per stream (v heads x v
// blocks); each item is a chain of its stream's chunks, walked one after the other. It has
// two launches:
//  - the grid: one CTA an item, two resident a multiprocessor. The first sms CTAs start one
//    an SM but for sms / kFirstWaveSharedEvery of them, which start beside the first ones (the
//    longest items) and leave as many SMs empty; the rest fill the free slots, and an SM takes
//    the next CTA as one of its own ends. A CTA sharing its SM walks a chunk kSharedStep times
//    slower than one alone.
//  - the queue: one CTA an SM, each claiming the next item in launch order until none is
//    left. Launch order is longest first, so the queue is a longest-first list schedule:
//    a long stream's chains start at once, each on an SM of its own.
// The grid walks more chunks a second while every SM has two CTAs (2 / kSharedStep over 1);
// the queue wins where a few long chains pace the batch: sharing their SMs, they finish
// long after the rest. The plan simulates both schedules, in alone steps, every item
// costing its chunks plus kItemSteps (its state's load and store), and takes the queue
// where the grid's estimate is at least kMinGain times the queue's.
// gdn_chunked.cu's plan_gdn_chunked_walk asks at 64-row v blocks only, where the traits
// were fitted (at 32 rows a shared step costs less: PERF-NOTES "Session 40").
// Invariants: the same items either way (the plan moves work between CTAs only and never
// changes a result's bits); the simulation is deterministic and costs O(items log sms);
// batches past kMaxItems (their items' own cost alone keeps two CTAs an SM busy for about
// 1270 steps at 132 SMs, so only a chain of over 40k tokens could pace them), or of at most
// sms items (the grid is then one CTA an SM already), take the grid.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

namespace pb::kernels {

struct GdnWalkPlanTraits {
  // Fitted to session 40's H100 call (kernels/PERF-NOTES.md "Session 40"), grid against
  // queue on uniform batches: a shared chunk step over an alone one 1.63-1.73 (8 x 2048,
  // 32 x 512, 16 / 64 heads 4 x 2048), an item's own cost about 1.8 alone steps.
  static constexpr double kSharedStep = 1.7;
  static constexpr double kItemSteps = 2.0;
  static constexpr double kMinGain = 1.10;   // the estimated gain that takes the queue
  // The block scheduler's first wave (session 41's probe on an H100, 132 SMs, %smid per CTA
  // of a two-per-SM grid, plain and programmatic-dependent launches alike): the first 132
  // CTAs landed on 124 distinct SMs. Which ones pair is not known, so the plan takes the
  // case that costs a longest-first launch most: the last sms / 16 beside the first. It
  // explains 2 x 6000 + 12 x 300 at 16 / 32 heads (grid measured 1.32 ms, estimated 1.37
  // so, 1.02 with every first-wave CTA alone; the queue measured 1.13).
  static constexpr int kFirstWaveSharedEvery = 16;
  static constexpr long long kMaxItems = 1LL << 16;  // bounds the host's simulation (about 6 ms)
};

// The estimated time, in alone chunk steps, of walking the items of streams with these chunk
// counts (launch order, per_stream items each) on sms multiprocessors holding ctas_per_sm
// CTAs each (1: the queue; 2: the grid), items taken in order by the SM that frees first.
inline double gdn_walk_steps(const std::vector<int32_t>& chunks, int per_stream, int sms, int ctas_per_sm) {
  using T = GdnWalkPlanTraits;
  if (per_stream <= 0 || sms <= 0 || ctas_per_sm < 1 || ctas_per_sm > 2) return 0.0;
  // The items in launch order, each stream's per_stream in turn (not materialised: a batch
  // may have kMaxItems).
  size_t stream = 0;
  int taken = 0;  // of stream's items
  auto next_item = [&](double* cost) {
    if (stream >= chunks.size()) return false;
    *cost = std::max(chunks[stream], 0) + T::kItemSteps;
    if (++taken == per_stream) {
      ++stream;
      taken = 0;
    }
    return true;
  };
  struct Sm {
    double at = 0.0;       // the time `left` was last brought up to date
    double left[2] = {};   // work left of the items it holds (alone steps)
    int held = 0;
    int version = 0;       // heap entries of an older version are stale
  };
  std::vector<Sm> sm(static_cast<size_t>(sms));
  // The first wave: sms items, one an SM but for the last `paired`, which go beside the
  // first `paired` (the grid only, and only a grid of more than sms CTAs: a smaller one asks
  // for more than half an SM's shared memory, gdn_chunked.cu); then every free slot, SM by SM.
  const bool full = static_cast<long long>(chunks.size()) * per_stream > sms;
  const int paired = ctas_per_sm == 2 && full ? sms / T::kFirstWaveSharedEvery : 0;
  for (int j = 0; j < sms - paired; ++j)
    if (next_item(&sm[j].left[0])) sm[j].held = 1;
  for (int j = 0; j < paired; ++j)
    if (sm[j].held == 1 && next_item(&sm[j].left[1])) sm[j].held = 2;
  for (int slot = 0; slot < ctas_per_sm; ++slot)
    for (auto& m : sm)
      if (m.held == slot && next_item(&m.left[slot])) ++m.held;
  auto rate = [&](const Sm& m) { return m.held == 2 ? 1.0 / T::kSharedStep : 1.0; };
  auto ends = [&](const Sm& m) { return m.at + std::min(m.left[0], m.held == 2 ? m.left[1] : m.left[0]) / rate(m); };
  using Event = std::pair<double, std::pair<int, int>>;  // (time, (sm, version))
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  for (int j = 0; j < sms; ++j)
    if (sm[j].held) events.push({ends(sm[j]), {j, 0}});
  double t = 0.0;
  while (!events.empty()) {
    const auto [when, id] = events.top();
    events.pop();
    Sm& m = sm[id.first];
    if (id.second != m.version) continue;
    t = when;
    const double done = (when - m.at) * rate(m);
    int kept = 0;
    for (int i = 0; i < m.held; ++i)
      if (m.left[i] - done > 1e-9) m.left[kept++] = m.left[i] - done;
    m.held = kept;
    m.at = when;
    while (m.held < ctas_per_sm && next_item(&m.left[m.held])) ++m.held;
    ++m.version;
    if (m.held) events.push({ends(m), {id.first, m.version}});
  }
  return t;
}

// chunks: each stream's chunk count, in launch order. True: the batch takes the queue.
inline bool plan_gdn_walk_queue(const std::vector<int32_t>& chunks, int per_stream, int sms) {
  using T = GdnWalkPlanTraits;
  if (per_stream <= 0 || sms <= 0) return false;
  const long long items = static_cast<long long>(chunks.size()) * per_stream;
  if (items <= sms || items > T::kMaxItems) return false;
  const double queue = gdn_walk_steps(chunks, per_stream, sms, 1);
  return queue > 0.0 && gdn_walk_steps(chunks, per_stream, sms, 2) >= T::kMinGain * queue;
}

}  // namespace pb::kernels
