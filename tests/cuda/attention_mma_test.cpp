// attention_mma_test.cpp: the tensor-core attention kernel (kernels/attention_mma.cu)
// against its oracle, the fp32 kernel (kernels/attention.cu), and a float64 CPU
// reference on sampled rows, on paged varlen batches with continuation chunks,
// odd block sizes and GQA ratios whose group does not divide the tile; then the
// NaN semantics the harness depends on (causal-off-by-one, NaN keys in and out
// of a row's range, bad block ids, a corrupted kv_len), that every output is
// written, and that two runs are bit-identical. Every tuning variant is tested.
// Own main(): without a CUDA device it prints "skipped: no CUDA device" and exits 77.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention_mma.h"
#include "kernels/attention_ws.h"
#include "kernels/kernels.h"
#include "lib/bf16.h"

namespace {
// Pseudo-variants of run(): the warp-specialized kernel (attention_ws.cu).
constexpr int kWsCp = 1000, kWs = 1001;

int g_failures = 0;
void fail(const std::string& what) {
  std::printf("FAIL %s\n", what.c_str());
  ++g_failures;
}

#define CK(call)                                                                                   \
  do {                                                                                             \
    const cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                       \
      std::printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));     \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

struct StreamDef {
  int chunk_start, count;
};

struct Case {
  std::string name;
  int head_dim, num_q_heads, num_kv_heads, block_size;
  std::vector<StreamDef> streams;
  uint64_t seed;
};

bool is_nan_bits(uint16_t u) { return (u & 0x7f80) == 0x7f80 && (u & 0x007f) != 0; }

template <class T>
T* dev_upload(const std::vector<T>& h) {
  T* d = nullptr;
  CK(cudaMalloc(reinterpret_cast<void**>(&d), std::max<size_t>(h.size() * sizeof(T), 256)));
  if (!h.empty()) CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// One batch on the device: q_rot, the paged caches (NaN poison everywhere but
// each stream's positions < kv_len), block tables with a guard entry holding
// the poison block, then canary words, and the staged-style metadata arrays.
// Tokens per q-tile of the kernel under test: its work list's tiles (variant < 0: the
// fp32 kernel; kWs / kWsCp: the ws kernel, whose tiles may be larger; else the wgmma / mma.sync kernel).
int tile_rows(const pb::LayerShape& shape, int variant) {
  if (variant < 0) return pb::kernels::attention_rows_per_tile(shape);
  return variant >= kWsCp ? pb::kernels::attention_ws_rows_per_tile(shape)
                          : pb::kernels::attention_mma_rows_per_tile(shape);
}

struct Problem {
  Case c;
  pb::LayerShape shape;
  int T = 0, max_blocks = 0, poison_block = 0;
  std::vector<int32_t> cu, kv;
  std::vector<std::vector<int32_t>> blocks;  // per stream
  std::vector<uint16_t> q, kc, vc;           // host copies
  uint16_t *d_q = nullptr, *d_k = nullptr, *d_v = nullptr, *d_out = nullptr;
  int32_t *d_cu = nullptr, *d_kv = nullptr, *d_tables = nullptr;
  uint64_t* d_ptrs = nullptr;
  std::vector<int32_t> tables;  // arena
  int table_stride = 0;

  explicit Problem(const Case& cs) : c(cs) {
    std::mt19937_64 rng(c.seed);
    std::normal_distribution<float> nrm(0.f, 1.f);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    const int D = c.head_dim, Hq = c.num_q_heads, Hkv = c.num_kv_heads, bs = c.block_size;
    const int N = static_cast<int>(c.streams.size());
    cu.assign(N + 1, 0);
    int total_blocks = 0;
    for (int b = 0; b < N; ++b) {
      cu[b + 1] = cu[b] + c.streams[b].count;
      kv.push_back(c.streams[b].chunk_start + c.streams[b].count);
      const int nb = (kv[b] + bs - 1) / bs;
      max_blocks = std::max(max_blocks, nb);
      total_blocks += nb;
    }
    T = cu[N];
    const int num_blocks = total_blocks + 5;  // spare blocks stay NaN; one is the guard's poison block
    std::vector<int32_t> perm(num_blocks);
    for (int i = 0; i < num_blocks; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    int at = 0;
    blocks.resize(N);
    for (int b = 0; b < N; ++b)
      for (int k = 0; k < (kv[b] + bs - 1) / bs; ++k) blocks[b].push_back(perm[at++]);
    poison_block = perm[at];
    shape.num_q_heads = Hq;
    shape.num_kv_heads = Hkv;
    shape.head_dim = D;
    shape.rotary_dim = D;
    shape.block_size = bs;
    shape.num_blocks = num_blocks;
    shape.poison_block = poison_block;

    q.resize(static_cast<size_t>(T) * Hq * D);
    for (auto& x : q) x = pb::to_bf16(nrm(rng)).bits;
    const size_t cache_elems = static_cast<size_t>(num_blocks) * bs * Hkv * D;
    kc.assign(cache_elems, pb::kBf16PoisonBits);
    vc.assign(cache_elems, pb::kBf16PoisonBits);
    for (int b = 0; b < N; ++b)
      for (int pos = 0; pos < kv[b]; ++pos)
        for (int h = 0; h < Hkv; ++h)
          for (int d = 0; d < D; ++d) {
            const size_t i = cache_index(b, pos, h, d);
            kc[i] = pb::to_bf16(nrm(rng)).bits;
            vc[i] = pb::to_bf16(uni(rng)).bits;
          }
    table_stride = max_blocks + 4;
    tables.assign(static_cast<size_t>(N) * table_stride, static_cast<int32_t>(0x7eadbeef));  // canaries
    for (int b = 0; b < N; ++b) {
      std::copy(blocks[b].begin(), blocks[b].end(), tables.begin() + static_cast<size_t>(b) * table_stride);
      tables[static_cast<size_t>(b) * table_stride + blocks[b].size()] = poison_block;  // guard entry
    }
    d_q = dev_upload(q);
    d_k = dev_upload(kc);
    d_v = dev_upload(vc);
    d_cu = dev_upload(cu);
    d_kv = dev_upload(kv);
    d_tables = dev_upload(tables);
    std::vector<uint64_t> ptrs(N);
    for (int b = 0; b < N; ++b)
      ptrs[b] = reinterpret_cast<uint64_t>(d_tables + static_cast<size_t>(b) * table_stride);
    d_ptrs = dev_upload(ptrs);
    CK(cudaMalloc(reinterpret_cast<void**>(&d_out), std::max<size_t>(q.size() * 2, 256)));
  }
  ~Problem() {
    for (void* p : {static_cast<void*>(d_q), static_cast<void*>(d_k), static_cast<void*>(d_v),
                    static_cast<void*>(d_out), static_cast<void*>(d_cu), static_cast<void*>(d_kv),
                    static_cast<void*>(d_tables), static_cast<void*>(d_ptrs)})
      cudaFree(p);
  }
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;

  size_t cache_index(int b, int pos, int h, int d) const {
    const int bs = c.block_size;
    const size_t slot = static_cast<size_t>(blocks[b][pos / bs]) * bs + pos % bs;
    return (slot * c.num_kv_heads + h) * c.head_dim + d;
  }
  void set_k(int b, int pos, int h, int d, uint16_t bits) {
    const size_t i = cache_index(b, pos, h, d);
    CK(cudaMemcpy(d_k + i, &bits, 2, cudaMemcpyHostToDevice));
  }
  void set_v(int b, int pos, int h, int d, uint16_t bits) {
    const size_t i = cache_index(b, pos, h, d);
    CK(cudaMemcpy(d_v + i, &bits, 2, cudaMemcpyHostToDevice));
  }
  void restore_caches() {
    CK(cudaMemcpy(d_k, kc.data(), kc.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_v, vc.data(), vc.size() * 2, cudaMemcpyHostToDevice));
  }
  void set_table(int b, int index, int32_t value) {
    CK(cudaMemcpy(d_tables + static_cast<size_t>(b) * table_stride + index, &value, 4, cudaMemcpyHostToDevice));
  }
  void restore_tables() { CK(cudaMemcpy(d_tables, tables.data(), tables.size() * 4, cudaMemcpyHostToDevice)); }
  void set_kv_len(int b, int32_t value) { CK(cudaMemcpy(d_kv + b, &value, 4, cudaMemcpyHostToDevice)); }
  void restore_kv_lens() { CK(cudaMemcpy(d_kv, kv.data(), kv.size() * 4, cudaMemcpyHostToDevice)); }

  // variant < 0: the fp32 kernel; kWs / kWsCp: the warp-specialized kernel with
  // its TMA producer / cp.async only. Output poisoned with NaN first.
  std::vector<uint16_t> run(int variant, bool off_by_one = false) {
    CK(pb::kernels::launch_fill_u16(nullptr, d_out, q.size(), pb::kBf16PoisonBits));
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
    const std::vector<pb::kernels::AttnWorkItem> work =
        pb::kernels::plan_attention_tiles(shape, tile_rows(shape, variant), cu, kv);
    pb::kernels::AttnWorkItem* d_work = dev_upload(work);
    int32_t* d_schedule = nullptr;
    if (variant >= kWsCp) d_schedule = dev_upload(pb::kernels::plan_attention_ws_schedule(shape, work, cu, kv));
    const auto* qb = reinterpret_cast<const pb::bf16*>(d_q);
    const auto* kb = reinterpret_cast<const pb::bf16*>(d_k);
    const auto* vb = reinterpret_cast<const pb::bf16*>(d_v);
    auto* ob = reinterpret_cast<pb::bf16*>(d_out);
    const uint32_t N = static_cast<uint32_t>(c.streams.size());
    pb::kernels::AttnArgs a;
    a.shape = shape;
    a.batch_size = N;
    a.total_tokens = T;
    a.max_blocks_per_seq = max_blocks;
    a.cu_seqlens = reinterpret_cast<uint64_t>(d_cu);
    a.kv_lens = reinterpret_cast<uint64_t>(d_kv);
    a.block_table_ptrs = reinterpret_cast<uint64_t>(d_ptrs);
    a.work = d_work;
    a.num_work = static_cast<int>(work.size());
    a.schedule = d_schedule;
    a.q_rot = qb;
    a.k_cache = kb;
    a.v_cache = vb;
    a.out = ob;
    a.scale = scale;
    a.causal_off_by_one = off_by_one;
    a.variant = variant;
    const cudaError_t e = variant < 0        ? pb::kernels::launch_attention(nullptr, a)
                          : variant >= kWsCp ? pb::kernels::launch_attention_ws(nullptr, a, variant == kWs)
                                             : pb::kernels::launch_attention_mma(nullptr, a);
    CK(e);
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    cudaFree(d_work);
    cudaFree(d_schedule);
    std::vector<uint16_t> out(q.size());
    CK(cudaMemcpy(out.data(), d_out, out.size() * 2, cudaMemcpyDeviceToHost));
    return out;
  }

  // float64 attention of (stream b, token i, q head h) from the host copies.
  std::vector<double> reference_row(int b, int i, int h) const {
    const int D = c.head_dim, kvh = h / (c.num_q_heads / c.num_kv_heads);
    const int pos = c.streams[b].chunk_start + i;
    const size_t qrow = (static_cast<size_t>(cu[b] + i) * c.num_q_heads + h) * D;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    std::vector<double> s(pos + 1), o(D, 0.0);
    double m = -INFINITY;
    for (int j = 0; j <= pos; ++j) {
      double acc = 0;
      for (int d = 0; d < D; ++d)
        acc += static_cast<double>(pb::to_float({q[qrow + d]})) * pb::to_float({kc[cache_index(b, j, kvh, d)]});
      s[j] = acc * scale;
      m = std::max(m, s[j]);
    }
    double l = 0;
    for (int j = 0; j <= pos; ++j) {
      const double e = std::exp(s[j] - m);
      l += e;
      for (int d = 0; d < D; ++d) o[d] += e * pb::to_float({vc[cache_index(b, j, kvh, d)]});
    }
    for (double& x : o) x /= l;
    return o;
  }

  bool row_nan(const std::vector<uint16_t>& out, int b, int i, int h) const {
    const size_t base = (static_cast<size_t>(cu[b] + i) * c.num_q_heads + h) * c.head_dim;
    for (int d = 0; d < c.head_dim; ++d)
      if (is_nan_bits(out[base + d])) return true;
    return false;
  }
  bool row_all_nan(const std::vector<uint16_t>& out, int b, int i, int h) const {
    const size_t base = (static_cast<size_t>(cu[b] + i) * c.num_q_heads + h) * c.head_dim;
    for (int d = 0; d < c.head_dim; ++d)
      if (!is_nan_bits(out[base + d])) return false;
    return true;
  }
};

float bits_to_float(uint16_t u) { return pb::to_float({u}); }

// mma vs the fp32 oracle on every element, and both vs float64 on sampled rows
// (FlashAttention's rule: mma error at most 2x the oracle's plus rounding noise).
void check_numeric(Problem& P, int variant, const std::vector<uint16_t>& ref32, const char* vname) {
  const std::vector<uint16_t> got = P.run(variant);
  const std::string tag = P.c.name + " variant " + vname;
  double diff2 = 0, ref2 = 0, max_abs = 0;
  long long nonfinite = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float a = bits_to_float(got[i]), r = bits_to_float(ref32[i]);
    if (!std::isfinite(a)) {
      ++nonfinite;
      continue;
    }
    diff2 += static_cast<double>(a - r) * (a - r);
    ref2 += static_cast<double>(r) * r;
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(a - r)));
  }
  const double rel_l2 = std::sqrt(diff2 / std::max(ref2, 1e-30));
  std::mt19937 rng(static_cast<unsigned>(P.c.seed) + variant);
  double err_mma = 0, err_32 = 0;
  const int N = static_cast<int>(P.c.streams.size());
  for (int b = 0; b < N; ++b) {
    const int cnt = P.c.streams[b].count;
    std::vector<int> rows = {0, cnt - 1, cnt / 2};
    for (int k = 0; k < 3; ++k) rows.push_back(static_cast<int>(rng() % cnt));
    for (int i : rows)
      for (int h = 0; h < P.c.num_q_heads; h += std::max(1, P.c.num_q_heads / 5)) {
        const std::vector<double> o = P.reference_row(b, i, h);
        const size_t base = (static_cast<size_t>(P.cu[b] + i) * P.c.num_q_heads + h) * P.c.head_dim;
        for (int d = 0; d < P.c.head_dim; ++d) {
          err_mma = std::max(err_mma, std::fabs(bits_to_float(got[base + d]) - o[d]));
          err_32 = std::max(err_32, std::fabs(bits_to_float(ref32[base + d]) - o[d]));
        }
      }
  }
  const bool ok = nonfinite == 0 && rel_l2 <= 4e-3 && err_mma <= 2 * err_32 + 1e-3 && std::isfinite(err_mma);
  std::printf("%s %-44s rel_l2 vs fp32 %.2e, max_abs %.2e, non-finite %lld; vs float64: mma %.2e fp32 %.2e\n",
              ok ? "ok  " : "FAIL", tag.c_str(), rel_l2, max_abs, nonfinite, err_mma, err_32);
  if (!ok) fail(tag + ": numeric");
  const std::vector<uint16_t> again = P.run(variant);
  if (again != got) fail(tag + ": two runs differ (a race?)");
}

// Row i of stream b belongs to the q-tile (i / rows); the highest key that
// tile loads is chunk_start + last row of the tile (+1 under the fault).
int tile_last_key(const Problem& P, int variant, int b, int i, int extra) {
  const int rows = tile_rows(P.shape, variant);
  const int last = std::min((i / rows + 1) * rows, P.c.streams[b].count) - 1;
  return P.c.streams[b].chunk_start + last + extra;
}

void check_nan_semantics(Problem& P, int variant, const char* vname) {
  const int N = static_cast<int>(P.c.streams.size()), Hq = P.c.num_q_heads;
  const int group = Hq / P.c.num_kv_heads;
  const std::string tag = P.c.name + " variant " + vname;
  int bad = 0;
  auto expect = [&](bool cond, const std::string& what) {
    if (!cond && bad++ < 5) fail(tag + ": " + what);
  };

  // Correct run: no NaN anywhere although everything past kv_len is NaN poison.
  const std::vector<uint16_t> clean = P.run(variant);
  long long nan_clean = 0;
  for (uint16_t u : clean) nan_clean += is_nan_bits(u);
  expect(nan_clean == 0, "correct run has " + std::to_string(nan_clean) + " NaN/unwritten outputs");

  // causal-off-by-one: each stream's last token reads key kv_len (poison): NaN;
  // rows of earlier q-tiles stay finite. The fp32 kernel agrees on the last row.
  const std::vector<uint16_t> off = P.run(variant, true), off32 = P.run(-1, true);
  for (int b = 0; b < N; ++b) {
    const int cnt = P.c.streams[b].count;
    const int rows = tile_rows(P.shape, variant);
    for (int h = 0; h < Hq; ++h) {
      expect(P.row_all_nan(off, b, cnt - 1, h), "off-by-one: stream " + std::to_string(b) + " last row not NaN");
      expect(P.row_nan(off32, b, cnt - 1, h), "off-by-one (fp32): stream " + std::to_string(b) + " last row not NaN");
    }
    for (int i = 0; i < ((cnt - 1) / rows) * rows; ++i)
      for (int h = 0; h < Hq; ++h)
        expect(!P.row_nan(off, b, i, h), "off-by-one: stream " + std::to_string(b) + " row " + std::to_string(i) +
                                             " of an earlier tile is NaN");
  }

  // A NaN key (K) at position p0 of kv head 0 in the stream with the most rows:
  // rows at positions >= p0 of that head's group are NaN, every other row is finite.
  int sb = 0;
  for (int b = 1; b < N; ++b)
    if (P.c.streams[b].count > P.c.streams[sb].count) sb = b;
  const int cs = P.c.streams[sb].chunk_start, cnt = P.c.streams[sb].count;
  const int p0 = cs + cnt / 2;
  P.set_k(sb, p0, 0, 3, 0x7fc1);
  const std::vector<uint16_t> knan = P.run(variant);
  P.restore_caches();
  for (int i = 0; i < cnt; ++i)
    for (int h = 0; h < Hq; ++h) {
      const bool want = h < group && cs + i >= p0;
      expect(P.row_nan(knan, sb, i, h) == want,
             "K NaN at " + std::to_string(p0) + ": row " + std::to_string(i) + " head " + std::to_string(h) +
                 (want ? " not NaN" : " NaN"));
    }
  for (int b = 0; b < N; ++b)
    if (b != sb)
      for (int i = 0; i < P.c.streams[b].count; ++i)
        for (int h = 0; h < Hq; ++h) expect(!P.row_nan(knan, b, i, h), "K NaN leaked into another stream");

  // A NaN value (V) at p0: rows at positions >= p0 of the group are NaN; rows of
  // q-tiles that load no key >= p0 are finite (inside the diagonal tile a 0 * NaN
  // of the tensor core may reach earlier rows too).
  P.set_v(sb, p0, 0, 5, 0x7fc1);
  const std::vector<uint16_t> vnan = P.run(variant);
  P.restore_caches();
  for (int i = 0; i < cnt; ++i)
    for (int h = 0; h < Hq; ++h) {
      if (h < group && cs + i >= p0) expect(P.row_nan(vnan, sb, i, h), "V NaN: a row in range not NaN");
      if (h >= group || tile_last_key(P, variant, sb, i, 0) < p0)
        expect(!P.row_nan(vnan, sb, i, h), "V NaN: row " + std::to_string(i) + " head " + std::to_string(h) +
                                               " of a tile that never loads it is NaN");
    }

  // A block id outside [0, num_blocks) (either side) reads as NaN, not dereferenced.
  for (int32_t badid : {P.shape.num_blocks + 3, -7}) {
    const int bi = std::min(static_cast<int>(P.blocks[sb].size()) - 1, (p0 / P.c.block_size));
    P.set_table(sb, bi, badid);
    const std::vector<uint16_t> bnan = P.run(variant);
    P.restore_tables();
    const int first_key = bi * P.c.block_size;
    for (int i = 0; i < cnt; ++i)
      for (int h = 0; h < Hq; ++h) {
        if (cs + i >= first_key) expect(P.row_nan(bnan, sb, i, h), "bad block id: a row reading it is not NaN");
        if (tile_last_key(P, variant, sb, i, 0) < first_key)
          expect(!P.row_nan(bnan, sb, i, h), "bad block id: a row of a tile before it is NaN");
      }
  }

  // A corrupted kv_len (device copy only) in the shortest stream: that stream's
  // rows read poison and go NaN; the other streams are bit-identical.
  int shortb = 0;
  for (int b = 1; b < N; ++b)
    if (P.kv[b] < P.kv[shortb]) shortb = b;
  P.set_kv_len(shortb, 1 << 30);
  const std::vector<uint16_t> kvbad = P.run(variant);
  P.restore_kv_lens();
  bool any = false;
  for (int i = 0; i < P.c.streams[shortb].count; ++i)
    for (int h = 0; h < Hq; ++h) any = any || P.row_nan(kvbad, shortb, i, h);
  expect(any, "corrupted kv_len: the stream shows no NaN");
  for (int b = 0; b < N; ++b) {
    if (b == shortb) continue;
    const size_t lo = static_cast<size_t>(P.cu[b]) * Hq * P.c.head_dim;
    const size_t hi = static_cast<size_t>(P.cu[b + 1]) * Hq * P.c.head_dim;
    expect(std::equal(kvbad.begin() + lo, kvbad.begin() + hi, clean.begin() + lo),
           "corrupted kv_len changed another stream");
  }
  std::printf("%s %-44s NaN semantics (off-by-one, K/V NaN, bad block ids, kv_len)\n", bad ? "FAIL" : "ok  ",
              tag.c_str());
}

}  // namespace

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  for (int D : {64, 128, 256}) {
    for (const pb::kernels::AttnMmaVariant& v : pb::kernels::attention_mma_variants(D))
      std::printf("info d%d v%d %-16s %s BM %d BN %d stages %d %s: %d regs, %zu B local, %zu B smem, %d CTA/SM%s\n",
                  D, v.variant, v.name, v.wgmma ? "wgmma" : "mma.sync", v.block_m, v.block_n, v.stages,
                  v.q_in_regs ? "Q regs" : "Q smem", v.regs, v.local_bytes, v.smem_bytes, v.ctas_per_sm,
                  v.variant == pb::kernels::attention_mma_default_variant(D) ? " (default)" : "");
  }
  const std::vector<StreamDef> mix = {{0, 7}, {0, 130}, {37, 200}, {0, 1}, {100, 1}, {0, 300}, {500, 64}, {3, 45}};
  std::vector<Case> cases;
  uint64_t seed = 1;
  const int heads[][2] = {{16, 2}, {4, 4}, {6, 2}, {8, 1}};
  const int bsizes[] = {16, 7, 64, 1};
  int k = 0;
  for (int D : {64, 128, 256})
    for (const auto& hh : heads) {
      const int bs = bsizes[k++ % 4];
      cases.push_back({"d" + std::to_string(D) + " h" + std::to_string(hh[0]) + "/" + std::to_string(hh[1]) +
                           " bs" + std::to_string(bs),
                       D, hh[0], hh[1], bs, mix, seed++});
    }
  // Many rows per tile (MHA), a long first chunk and a long continuation.
  cases.push_back({"d128 h2/2 bs16 long", 128, 2, 2, 16, {{0, 1100}, {900, 333}, {0, 5}}, seed++});
  for (const Case& c : cases) {
    Problem P(c);
    const std::vector<uint16_t> ref32 = P.run(-1);
    for (const pb::kernels::AttnMmaVariant& v : pb::kernels::attention_mma_variants(c.head_dim)) {
      check_numeric(P, v.variant, ref32, v.name);
      // NaN semantics: the first variant of each kernel version, and the default.
      if ((c.num_q_heads == 16 || c.num_q_heads == 6) &&
          (v.variant == 0 || v.variant == pb::kernels::kFirstWgmmaVariant ||
           v.variant == pb::kernels::attention_mma_default_variant(c.head_dim)))
        check_nan_semantics(P, v.variant, v.name);
    }
    if (pb::kernels::attention_ws_supported(P.shape)) {
      const bool tma = pb::kernels::attention_ws_tma_rows(P.shape) > 0;
      check_numeric(P, kWs, ref32, tma ? "ws (TMA)" : "ws (cp.async: block size)");
      check_numeric(P, kWsCp, ref32, "ws:cp");
      check_nan_semantics(P, kWs, tma ? "ws (TMA)" : "ws (cp.async: block size)");
      check_nan_semantics(P, kWsCp, "ws:cp");
    }
  }
  std::printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "PASSED", g_failures);
  return g_failures ? 1 : 0;
}
