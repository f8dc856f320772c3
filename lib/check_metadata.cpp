// check_metadata.cpp: the metadata check: decodes every staged array from the
// scratch and arena bytes read back from the backend, following the metadata's
// own addresses as a kernel would, and compares each value with the ground truth.
// Every address is bounded: nothing is read outside the two read-back buffers.
#include <fmt/format.h>

#include <cstring>

#include "checks.h"

namespace pb {

namespace {

std::string hex(uint64_t a) { return fmt::format("0x{:x}", a); }

// One read-back buffer at the device address it starts at.
struct Image {
  const char* name;
  const std::vector<uint8_t>& bytes;
  uint64_t base;
  bool holds(uint64_t a, size_t n) const {
    return a >= base && a - base <= bytes.size() && n <= bytes.size() - (a - base);
  }
  template <typename T>
  T get(uint64_t a) const {  // only after holds(a, sizeof(T))
    T v;
    std::memcpy(&v, bytes.data() + (a - base), sizeof(T));
    return v;
  }
};

// An array of `count` elements of `elem` bytes at `addr` lies inside `img`,
// aligned to its element size; else a finding names the field and the address.
bool readable(const Image& img, const std::string& field, uint64_t addr, size_t count, size_t elem,
              int stream, CheckResult& r) {
  if (addr % elem != 0) {
    r.fail(-1, stream, fmt::format("{} -> {} is not {}-byte aligned", field, hex(addr), elem));
    return false;
  }
  if (!img.holds(addr, count * elem)) {
    r.fail(-1, stream, fmt::format("{} -> {} ({} bytes) lies outside the read-back {} [{}, {})", field,
                                   hex(addr), count * elem, img.name, hex(img.base),
                                   hex(img.base + img.bytes.size())));
    return false;
  }
  return true;
}

Figure count_figure(const std::string& what, long long wrong, long long of) {
  Figure f;
  f.what = what;
  f.mismatched = wrong;
  f.elements = of;
  f.pass = wrong == 0;
  return f;
}

// The truth of one per-token array, and how its value is explained.
struct TokenField {
  const char* name;
  uint64_t addr;
  size_t elem;  // 4 (u32 positions) or 8 (i64 slots)
  int64_t (*want)(const Batch&, const StreamTruth&, int i);
};

int64_t want_t(const Batch&, const StreamTruth& st, int i) { return st.pos_t[i]; }
int64_t want_h(const Batch&, const StreamTruth& st, int i) { return st.pos_h[i]; }
int64_t want_w(const Batch&, const StreamTruth& st, int i) { return st.pos_w[i]; }
int64_t want_slot(const Batch& batch, const StreamTruth& st, int i) {
  const int p = st.chunk_start + i, bs = batch.block_size;
  return static_cast<int64_t>(st.blocks[p / bs]) * bs + p % bs;
}

void check_token_field(const Batch& batch, const Image& scratch, const TokenField& f, CheckResult& r) {
  const size_t T = batch.total_tokens;
  long long wrong_total = 0;
  if (!readable(scratch, f.name, f.addr, T, f.elem, -1, r)) {
    r.figures.push_back(count_figure(f.name, static_cast<long long>(T), static_cast<long long>(T)));
    return;
  }
  for (int b = 0; b < batch.num_streams; ++b) {
    const StreamTruth& st = batch.streams[b];
    long long wrong = 0;
    std::string first;
    for (int i = 0; i < st.count; ++i) {
      const size_t row = static_cast<size_t>(st.row_begin) + i;
      const uint64_t at = f.addr + f.elem * row;
      const int64_t got = f.elem == 4 ? static_cast<int64_t>(scratch.get<uint32_t>(at)) : scratch.get<int64_t>(at);
      const int64_t want = f.want(batch, st, i);
      if (got == want) continue;
      if (wrong++ == 0) {
        const int p = st.chunk_start + i;
        first = fmt::format("{}[{}] (stream {} token {}, position {}) holds {}, expected {}", f.name, row, b,
                            i, p, got, want);
        if (f.want == want_slot)
          first += fmt::format(" (block {} offset {})", st.blocks[p / batch.block_size], p % batch.block_size);
      }
    }
    if (wrong)
      r.fail(-1, b, fmt::format("{}; {} of the stream's {} {} differ", first, wrong, st.count, f.name));
    wrong_total += wrong;
  }
  r.figures.push_back(count_figure(f.name, wrong_total, static_cast<long long>(T)));
}

// Which stream's planned arena slot `addr` is, or -1.
int owner_of(const std::vector<size_t>& offsets, uint64_t arena_base, uint64_t addr) {
  for (size_t c = 0; c < offsets.size(); ++c)
    if (arena_base + offsets[c] == addr) return static_cast<int>(c);
  return -1;
}

std::string where_in_arena(const std::vector<size_t>& offsets, const Image& arena, uint64_t addr,
                           const char* what) {
  const int c = owner_of(offsets, arena.base, addr);
  if (c >= 0) return fmt::format("stream {}'s {}", c, what);
  if (arena.holds(addr, 0)) return fmt::format("arena offset {}, no stream's {}", addr - arena.base, what);
  return "outside the arena";
}

void check_block_tables(const Batch& batch, const BatchedAttnMetadata& m, const Image& scratch,
                        const Image& arena, const TableArena& plan, CheckResult& r) {
  const int N = batch.num_streams;
  long long wrong_ptrs = 0, wrong_entries = 0, entries = 0;
  for (const StreamTruth& st : batch.streams) entries += static_cast<long long>(st.blocks.size()) + 1;
  if (!readable(scratch, "block_table_ptrs", m.block_table_ptrs, N, 8, -1, r)) {
    r.figures.push_back(count_figure("block_table_ptrs", N, N));
    r.figures.push_back(count_figure("block_table_entries", entries, entries));
    return;
  }
  for (int b = 0; b < N; ++b) {
    const StreamTruth& st = batch.streams[b];
    const size_t n = st.blocks.size();
    const uint64_t ptr = scratch.get<uint64_t>(m.block_table_ptrs + 8 * b);
    const uint64_t own = arena.base + plan.table_offset[b];
    const std::string field = fmt::format("block_table_ptrs[{}]", b);
    if (ptr != own) {
      ++wrong_ptrs;
      r.fail(-1, b, fmt::format("{} -> {} is {}, expected stream {}'s table at {} (arena offset {})", field,
                                hex(ptr), where_in_arena(plan.table_offset, arena, ptr, "table"), b,
                                hex(own), plan.table_offset[b]));
    }
    // What a kernel reads through the pointer: the table, its guard entry, and
    // (an over-read) up to max_blocks_per_seq + 1 entries, all inside the arena.
    if (!readable(arena, field, ptr, n + 1, 4, b, r)) {
      wrong_entries += static_cast<long long>(n) + 1;
      continue;
    }
    if (!arena.holds(ptr, 4 * (static_cast<size_t>(batch.max_blocks_per_seq) + 1)))
      r.fail(-1, b, fmt::format("{} -> {}: a read of max_blocks_per_seq + 1 = {} entries leaves the arena",
                                field, hex(ptr), batch.max_blocks_per_seq + 1));
    long long wrong = 0;
    std::string first;
    for (size_t e = 0; e < n; ++e) {
      const int32_t got = arena.get<int32_t>(ptr + 4 * e);
      if (got != st.blocks[e] && wrong++ == 0)
        first = fmt::format("entry {} holds block {}, expected block {}", e, got, st.blocks[e]);
    }
    if (wrong)
      r.fail(-1, b, fmt::format("stream {}'s block table via {} -> {}: {}; {} of its {} entries differ", b, field,
                                hex(ptr), first, wrong, n));
    const int32_t guard = arena.get<int32_t>(ptr + 4 * n);
    if (guard != batch.poison_block) {
      ++wrong;
      std::string whose;
      for (int c = 0; c < N && whose.empty(); ++c)
        for (int32_t id : batch.streams[c].blocks)
          if (id == guard) whose = fmt::format(" (a live block of stream {})", c);
      r.fail(-1, b, fmt::format("stream {}'s block table via {} -> {}: guard entry {} holds block {}{}, "
                                "expected the poison block {}: a read one entry past the table reads live KV",
                                b, field, hex(ptr), n, guard, whose, batch.poison_block));
    }
    wrong_entries += wrong;
  }
  r.figures.push_back(count_figure("block_table_ptrs", wrong_ptrs, N));
  r.figures.push_back(count_figure("block_table_entries", wrong_entries, entries));
}

void check_seq_lens(const Batch& batch, const BatchedAttnMetadata& m, const Image& scratch,
                    const Image& arena, const TableArena& plan, CheckResult& r) {
  const int N = batch.num_streams;
  if (!readable(scratch, "seq_len_ptrs", m.seq_len_ptrs, N, 8, -1, r)) {
    r.figures.push_back(count_figure("seq_len_ptrs", N, N));
    return;
  }
  long long wrong = 0;
  for (int b = 0; b < N; ++b) {
    const StreamTruth& st = batch.streams[b];
    const uint64_t ptr = scratch.get<uint64_t>(m.seq_len_ptrs + 8 * b);
    const uint64_t own = arena.base + plan.seq_len_offset[b];
    const std::string field = fmt::format("seq_len_ptrs[{}]", b);
    if (!readable(arena, field, ptr, 1, 4, b, r)) {
      ++wrong;
      continue;
    }
    const int32_t got = arena.get<int32_t>(ptr);
    if (got == st.kv_len && ptr == own) continue;
    ++wrong;
    r.fail(-1, b, fmt::format("{} -> {} holds {}, expected kv_len {} ({}; stream {}'s seq_len is at {})", field,
                              hex(ptr), got, st.kv_len,
                              where_in_arena(plan.seq_len_offset, arena, ptr, "seq_len"), b, hex(own)));
  }
  r.figures.push_back(count_figure("seq_len_ptrs", wrong, N));
}

// An int32 per-stream array, staged (`addr` inside scratch) or a host copy.
void check_i32_array(const std::string& name, const std::vector<int32_t>& got, const std::vector<int32_t>& want,
                     int num_streams, CheckResult& r) {
  long long wrong = 0;
  if (got.size() != want.size()) {
    r.fail(-1, -1, fmt::format("{} holds {} entries, expected {}", name, got.size(), want.size()));
    wrong = static_cast<long long>(want.size());
  } else {
    for (size_t i = 0; i < want.size(); ++i)
      if (got[i] != want[i] && ++wrong)
        r.fail(-1, std::min(static_cast<int>(i), num_streams - 1),
               fmt::format("{}[{}] holds {}, expected {}", name, i, got[i], want[i]));
  }
  r.figures.push_back(count_figure(name, wrong, static_cast<long long>(want.size())));
}

std::vector<int32_t> read_i32(const Image& scratch, uint64_t addr, size_t n) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scratch.get<int32_t>(addr + 4 * i);
  return v;
}

}  // namespace

void check_metadata(const Batch& batch, const BatchedAttnMetadata& m, const std::vector<uint8_t>& scratch_bytes,
                    uint64_t scratch_base, const std::vector<uint8_t>& arena_bytes, uint64_t arena_base,
                    CheckResult& r) {
  const Image scratch{"scratch", scratch_bytes, scratch_base};
  const Image arena{"arena", arena_bytes, arena_base};
  const int N = batch.num_streams;

  const struct { const char* name; long long got, want; } scalars[] = {
      {"batch_size", m.batch_size, N},
      {"total_tokens", m.total_tokens, batch.total_tokens},
      {"chunk_len", m.chunk_len, batch.chunk_len},
      {"max_blocks_per_seq", m.max_blocks_per_seq, batch.max_blocks_per_seq},
  };
  for (const auto& s : scalars)
    if (s.got != s.want) r.fail(-1, -1, fmt::format("{} is {}, expected {}", s.name, s.got, s.want));

  const TokenField tokens[] = {
      {"positions", m.positions_stacked, 4, want_t},
      {"positions_h", m.positions_h_stacked, 4, want_h},
      {"positions_w", m.positions_w_stacked, 4, want_w},
      {"slots", m.slot_stacked, 8, want_slot},
  };
  for (const TokenField& f : tokens) check_token_field(batch, scratch, f, r);

  const TableArena plan = plan_table_arena(batch);
  check_block_tables(batch, m, scratch, arena, plan, r);
  check_seq_lens(batch, m, scratch, arena, plan, r);

  std::vector<int32_t> cu(N + 1, 0), kv(N);
  for (int b = 0; b < N; ++b) {
    cu[b] = batch.streams[b].row_begin;
    kv[b] = batch.streams[b].kv_len;
  }
  cu[N] = batch.total_tokens;
  if (readable(scratch, "cu_seqlens", m.cu_seqlens, N + 1, 4, -1, r))
    check_i32_array("cu_seqlens", read_i32(scratch, m.cu_seqlens, N + 1), cu, N, r);
  else
    r.figures.push_back(count_figure("cu_seqlens", N + 1, N + 1));
  if (readable(scratch, "kv_lens", m.kv_lens, N, 4, -1, r))
    check_i32_array("kv_lens", read_i32(scratch, m.kv_lens, N), kv, N, r);
  else
    r.figures.push_back(count_figure("kv_lens", N, N));
  check_i32_array("cu_seqlens_host", m.cu_seqlens_host, cu, N, r);
  check_i32_array("kv_lens_host", m.kv_lens_host, kv, N, r);
}

}  // namespace pb
