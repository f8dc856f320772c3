// check_scratch_guard.cpp: the scratch guard check: byte-compares the scratch
// buffer read back after a layer with what it must hold (encoded from the truth,
// expected_scratch.h), and names each region (front guard, a metadata field, its
// padding, h_state_ptrs, rear guard) whose bytes differ, and whether they were
// staged wrong or changed by the layer; then the table arena the same way.
#include <fmt/format.h>

#include <cstring>

#include "checks.h"
#include "expected_scratch.h"

namespace pb {

namespace {

struct NamedRange {
  std::string name;
  size_t begin, end;
};

std::vector<NamedRange> scratch_regions(const Batch& batch, bool mrope, size_t capacity) {
  const StagedLayout L = compute_layout(batch.num_streams, batch.total_tokens, mrope);
  const size_t off = plan_scratch(L, capacity).off;
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
  out.push_back({"rear guard", h_end, capacity});
  return out;
}

// Whether bytes that differ from the truth were staged so (the upload already
// held them and the layer left them) or changed by the layer.
const char* how(bool staged_wrong, bool changed) {
  return staged_wrong && changed ? "staged wrong, then changed by the layer"
         : staged_wrong          ? "staged wrong (the layer left it as uploaded)"
                                 : "changed by the layer";
}

}  // namespace

void check_scratch_guard(const Batch& batch, bool mrope, const StagedImage& img,
                         const std::vector<uint8_t>& expected, const std::vector<uint8_t>& scratch,
                         const std::vector<uint8_t>& arena, int layer, CheckResult& r, const ScratchBefore& before,
                         const std::string& when) {
  const std::vector<uint8_t>& staged = img.scratch;
  // A byte that already held this value before the layer was reported there.
  auto earlier = [](const std::vector<uint8_t>* b, size_t i, uint8_t v) { return b && i < b->size() && (*b)[i] == v; };
  for (const NamedRange& reg : scratch_regions(batch, mrope, expected.size())) {
    size_t first = reg.end, differ = 0;
    bool staged_wrong = false, changed = false;
    for (size_t i = reg.begin; i < reg.end && i < scratch.size() && i < expected.size(); ++i)
      if (scratch[i] != expected[i] && !earlier(before.scratch, i, scratch[i])) {
        first = std::min(first, i);
        ++differ;
        const bool uploaded = i < staged.size() && staged[i] == scratch[i];
        staged_wrong = staged_wrong || uploaded;
        changed = changed || !uploaded;
      }
    if (differ)
      r.fail(layer, -1, fmt::format("scratch region '{}' [{}, {}): {} byte(s) differ from the truth, first at "
                                    "offset {} (expected 0x{:02x}, found 0x{:02x}): {}{}",
                                    reg.name, reg.begin, reg.end, differ, first, expected[first],
                                    scratch[first], how(staged_wrong, changed), when));
  }
  // The arena against the truth's tables, guard entries, canary words and seq_lens.
  const std::vector<uint8_t> want = expected_arena_image(batch);
  const TableArena ta = plan_table_arena(batch);
  auto word = [](const std::vector<uint8_t>& v, size_t o) {
    int32_t w = 0;
    if (o + 4 <= v.size()) std::memcpy(&w, &v[o], 4);
    return w;
  };
  auto check_word = [&](size_t o, int b, const std::string& what) {
    const int32_t got = word(arena, o), expect = word(want, o);
    if (got == expect || (before.arena && o + 4 <= before.arena->size() && word(*before.arena, o) == got)) return;
    r.fail(layer, b, fmt::format("stream {} {} holds {}, expected {}: {}{}", b, what, got, expect,
                                 how(word(img.arena, o) == got, word(img.arena, o) != got), when));
  };
  for (int b = 0; b < batch.num_streams; ++b) {
    const size_t at = ta.table_offset[b], n = batch.streams[b].blocks.size();
    for (size_t e = 0; e < n; ++e) check_word(at + 4 * e, b, fmt::format("block table entry {}", e));
    check_word(at + 4 * n, b, "block table guard entry");
    check_word(at + 4 * n + 4, b, "block table canary word");
    check_word(ta.seq_len_offset[b], b, "seq_len");
  }
}

}  // namespace pb
