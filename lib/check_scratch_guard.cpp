// check_scratch_guard.cpp: the scratch guard check: byte-compares the scratch
// buffer read back after a layer with what it must hold, and names each region
// (front guard, a metadata field, its padding, h_state_ptrs, rear guard) whose
// bytes changed; then the table arena (tables, guard entries, canary words).
#include <fmt/format.h>

#include <cstring>

#include "checks.h"

namespace pb {

namespace {

struct NamedRange {
  std::string name;
  size_t begin, end;
};

std::vector<NamedRange> scratch_regions(const Batch& batch, bool mrope, const StagedImage& img) {
  const StagedLayout L = compute_layout(batch.num_streams, batch.total_tokens, mrope);
  const size_t off = img.plan.off;
  std::vector<NamedRange> out = {{"front guard", 0, off}};
  size_t at = off;
  for (const FieldSpan& f : L.fields()) {
    if (f.alias) continue;
    const size_t used = f.count * f.elem_bytes;
    out.push_back({f.name, off + f.offset, off + f.offset + used});
    if (used < f.bytes) out.push_back({std::string("padding after ") + f.name, off + f.offset + used, off + f.offset + f.bytes});
    at = off + f.offset + f.bytes;
  }
  const size_t h_end = at + 8 * static_cast<size_t>(batch.num_streams);
  out.push_back({"h_state_ptrs", at, h_end});
  out.push_back({"rear guard", h_end, img.scratch.size()});
  return out;
}

}  // namespace

void check_scratch_guard(const Batch& batch, bool mrope, const StagedImage& img,
                         const std::vector<uint8_t>& expected, const std::vector<uint8_t>& scratch,
                         const std::vector<uint8_t>& arena, int layer, CheckResult& r) {
  for (const NamedRange& reg : scratch_regions(batch, mrope, img)) {
    size_t first = reg.end, changed = 0;
    for (size_t i = reg.begin; i < reg.end && i < scratch.size() && i < expected.size(); ++i)
      if (scratch[i] != expected[i]) {
        first = std::min(first, i);
        ++changed;
      }
    if (changed)
      r.fail(layer, -1, fmt::format("scratch region '{}' [{}, {}) changed: {} byte(s), first at "
                                    "offset {} (expected 0x{:02x}, found 0x{:02x})",
                                    reg.name, reg.begin, reg.end, changed, first, expected[first],
                                    scratch[first]));
  }
  const TableArena ta = plan_table_arena(batch);
  for (int b = 0; b < batch.num_streams; ++b) {
    const size_t at = ta.table_offset[b], n = batch.streams[b].blocks.size();
    auto word_changed = [&](size_t o) { return std::memcmp(&arena[o], &img.arena[o], 4) != 0; };
    for (size_t e = 0; e < n; ++e)
      if (word_changed(at + 4 * e))
        r.fail(layer, b, fmt::format("stream {} block table entry {} changed", b, e));
    if (word_changed(at + 4 * n)) r.fail(layer, b, fmt::format("stream {} block table guard entry changed", b));
    if (word_changed(at + 4 * n + 4)) r.fail(layer, b, fmt::format("stream {} block table canary word changed", b));
    if (word_changed(ta.seq_len_offset[b])) r.fail(layer, b, fmt::format("stream {} seq_len changed", b));
  }
}

}  // namespace pb
