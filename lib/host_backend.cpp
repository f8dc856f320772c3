// host_backend.cpp: the host backend plays the CUDA kernels' part in plain C++:
// it reads only the staged byte image (positions, slots, cu_seqlens, kv_lens,
// the block-table / h_state pointer arrays resolved inside its own buffers)
// and computes each batched layer as the kernels do (reference.h's contract,
// at kernel precision). Every address and index read from metadata is bounds
// checked (lib/stream_bounds.h), as a GPU would read garbage instead of
// crashing: a block id outside the cache reads as NaN poison, a pointer outside
// its buffer skips the stream (its output stays poisoned), cu_seqlens decode
// to rows inside the batch. Tiles: attention runs per (stream, kv head,
// q tile) with full key tiles as matrix products and the diagonal tile per row.
#include <Eigen/Dense>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "backend.h"
#include "parallel.h"
#include "stream_bounds.h"

namespace pb {

namespace {

constexpr int kQTile = 64;   // query tokens per work item
constexpr int kKTile = 64;   // keys per tile
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct AttnBuffers {
  std::vector<bf16> q, k, v, q_rot, k_rot, out, k_cache, v_cache, k_cache0, v_cache0;
};
struct GdnBuffers {
  std::vector<bf16> x, conv_w, conv_out, out, conv_state, conv_state0;
  std::vector<float> g, beta, h_state, h_state0;  // h_state: N * state floats
};
struct Layer {
  LayerKind kind;
  AttnBuffers a;
  GdnBuffers d;
};

const float kNaN = std::numeric_limits<float>::quiet_NaN();

void poison(std::vector<bf16>& v) { std::fill(v.begin(), v.end(), bf16{kBf16PoisonBits}); }

uint64_t addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// A view of one buffer the backend owns, to resolve metadata addresses into.
struct Region {
  const uint8_t* base;
  size_t bytes;
  template <typename T>
  const T* at(uint64_t a, size_t count) const {
    return bounded_address<T>(a, base, bytes, count);
  }
};

class HostBackend final : public Backend {
 public:
  explicit HostBackend(FaultSet faults) : faults_(faults) {}
  std::string name() const override { return "host"; }
  DeviceInfo device() const override {
    DeviceInfo d;
    d.name = "host CPU (" + std::to_string(std::thread::hardware_concurrency()) + " threads)";
    return d;
  }

  void allocate(const Batch& batch, const LayerShape& shape, size_t scratch_bytes,
                size_t arena_bytes) override {
    shape_ = shape;
    N_ = batch.num_streams;
    T_ = batch.total_tokens;
    scratch_.assign(round_up8(scratch_bytes), 0);
    arena_.assign(round_up8(arena_bytes), 0);
    layers_.clear();
    for (size_t l = 0; l < batch.layers.size(); ++l) {
      const LayerInputs& in = batch.layers[l];
      Layer L;
      L.kind = in.kind;
      if (in.kind == LayerKind::attn) {
        L.a.q = in.attn.q;
        L.a.k = in.attn.k;
        L.a.v = in.attn.v;
        L.a.q_rot.resize(L.a.q.size());
        L.a.k_rot.resize(L.a.k.size());
        L.a.out.resize(L.a.q.size());
        L.a.k_cache0 = initial_cache(batch, shape, static_cast<int>(l), false);
        L.a.v_cache0 = initial_cache(batch, shape, static_cast<int>(l), true);
      } else {
        const GdnInputs& g = in.gdn;
        L.d.x = g.x;
        L.d.conv_w = g.conv_w;
        L.d.g = g.g;
        L.d.beta = g.beta;
        L.d.conv_out.resize(g.x.size());
        L.d.out.resize(static_cast<size_t>(T_) * shape.num_v_heads * shape.v_dim);
        for (const auto& c : g.conv0) L.d.conv_state0.insert(L.d.conv_state0.end(), c.begin(), c.end());
        for (const auto& h : g.h0) L.d.h_state0.insert(L.d.h_state0.end(), h.begin(), h.end());
      }
      layers_.push_back(std::move(L));
    }
    for (size_t l = 0; l < layers_.size(); ++l) reset_layer(static_cast<int>(l));
  }

  uint64_t scratch_base() const override { return addr(scratch_.data()); }
  uint64_t arena_base() const override { return addr(arena_.data()); }
  uint64_t h_state_address(int layer, int stream) const override {
    return addr(layers_[layer].d.h_state.data() + static_cast<size_t>(stream) * state_elems());
  }

  void upload_metadata(const std::vector<uint8_t>& scratch, const std::vector<uint8_t>& arena) override {
    std::memcpy(scratch_.data(), scratch.data(), std::min(scratch.size(), scratch_.size()));
    std::memcpy(arena_.data(), arena.data(), std::min(arena.size(), arena_.size()));
  }
  void write_scratch(size_t offset, const void* data, size_t bytes) override {
    if (offset + bytes <= scratch_.size()) std::memcpy(scratch_.data() + offset, data, bytes);
  }

  void reset_layer(int layer) override {
    Layer& L = layers_[layer];
    if (L.kind == LayerKind::attn) {
      L.a.k_cache = L.a.k_cache0;
      L.a.v_cache = L.a.v_cache0;
      poison(L.a.q_rot);
      poison(L.a.k_rot);
      poison(L.a.out);
    } else {
      L.d.conv_state = L.d.conv_state0;
      L.d.h_state = L.d.h_state0;
      poison(L.d.conv_out);
      poison(L.d.out);
    }
  }

  std::vector<KernelTime> run_layer(int layer, const BatchedAttnMetadata& meta,
                                    uint64_t h_state_ptrs) override {
    Layer& L = layers_[layer];
    std::vector<KernelTime> times;
    auto timed = [&](const char* name, auto&& fn) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      const auto t1 = std::chrono::steady_clock::now();
      times.push_back({name, std::chrono::duration<double, std::milli>(t1 - t0).count()});
    };
    if (L.kind == LayerKind::attn) {
      timed("rope", [&] { rope(L.a, meta); });
      timed("kv_write", [&] { kv_write(L.a, meta); });
      timed("attention", [&] { attention(L.a, meta); });
    } else {
      timed("conv1d", [&] { conv1d(L.d, meta); });
      timed("gdn", [&] { gdn(L.d, meta, h_state_ptrs); });
    }
    return times;
  }

  LayerOutputs read_layer(int layer) override {
    const Layer& L = layers_[layer];
    LayerOutputs o;
    if (L.kind == LayerKind::attn) {
      o.out = L.a.out;
      o.k_cache = L.a.k_cache;
      o.v_cache = L.a.v_cache;
    } else {
      o.out = L.d.out;
      o.conv_state = L.d.conv_state;
      for (int b = 0; b < N_; ++b)
        o.h_state.emplace_back(L.d.h_state.begin() + b * state_elems(),
                               L.d.h_state.begin() + (b + 1) * state_elems());
    }
    return o;
  }
  std::vector<uint8_t> read_scratch() override { return scratch_; }
  std::vector<uint8_t> read_arena() override { return arena_; }

 private:
  static size_t round_up8(size_t n) { return (n + 7) & ~size_t(7); }
  size_t state_elems() const {
    return static_cast<size_t>(shape_.num_v_heads) * shape_.v_dim * shape_.k_dim;
  }
  Region scratch_region() const { return {scratch_.data(), scratch_.size()}; }
  Region arena_region() const { return {arena_.data(), arena_.size()}; }

  // Stream b's packed rows [begin, end) from the device cu_seqlens, clamped.
  bool stream_rows(const BatchedAttnMetadata& m, int b, int* begin, int* end) const {
    const int32_t* cu = scratch_region().at<int32_t>(m.cu_seqlens, N_ + 1);
    if (!cu) return false;
    const StreamRows s = decode_stream_rows(cu, b, T_);
    *begin = s.begin;
    *end = s.end;
    return true;
  }

  // RoPE section of frequency i: 0 = T, 1 = H, 2 = W.
  int section(int i) const {
    if (!shape_.mrope) return 0;
    const int* s = shape_.mrope_sections;
    if (shape_.mrope_interleaved) {
      if (i % 3 == 1 && i < 3 * s[1]) return 1;
      if (i % 3 == 2 && i < 3 * s[2]) return 2;
      return 0;
    }
    return i < s[0] ? 0 : i < s[0] + s[1] ? 1 : 2;
  }

  void rope(AttnBuffers& a, const BatchedAttnMetadata& m) const {
    const Region sr = scratch_region();
    const uint32_t* pos[3] = {sr.at<uint32_t>(m.positions_stacked, T_),
                              sr.at<uint32_t>(m.positions_h_stacked, T_),
                              sr.at<uint32_t>(m.positions_w_stacked, T_)};
    if (!pos[0] || !pos[1] || !pos[2]) return;
    const int D = shape_.head_dim, half = shape_.rotary_dim / 2;
    std::vector<float> inv_freq(half);
    std::vector<int> sec(half);
    for (int i = 0; i < half; ++i) {
      inv_freq[i] = static_cast<float>(std::pow(static_cast<double>(shape_.rope_theta),
                                                -2.0 * i / shape_.rotary_dim));
      sec[i] = section(i);
    }
    parallel_for(T_, [&](int r) {
      std::vector<float> c(half), s(half);
      for (int i = 0; i < half; ++i) {
        const float ang = static_cast<float>(pos[sec[i]][r]) * inv_freq[i];
        c[i] = std::cos(ang);
        s[i] = std::sin(ang);
      }
      auto rot = [&](const std::vector<bf16>& in, std::vector<bf16>& out, int heads) {
        for (int h = 0; h < heads; ++h) {
          const bf16* x = &in[(r * heads + h) * static_cast<size_t>(D)];
          bf16* y = &out[(r * heads + h) * static_cast<size_t>(D)];
          for (int i = 0; i < half; ++i) {
            const float x1 = to_float(x[i]), x2 = to_float(x[i + half]);
            y[i] = to_bf16(x1 * c[i] - x2 * s[i]);
            y[i + half] = to_bf16(x2 * c[i] + x1 * s[i]);
          }
          for (int i = 2 * half; i < D; ++i) y[i] = x[i];
        }
      };
      rot(a.q, a.q_rot, shape_.num_q_heads);
      rot(a.k, a.k_rot, shape_.num_kv_heads);
    });
  }

  void kv_write(AttnBuffers& a, const BatchedAttnMetadata& m) const {
    const int64_t* slots = scratch_region().at<int64_t>(m.slot_stacked, T_);
    if (!slots) return;
    const size_t row = static_cast<size_t>(shape_.num_kv_heads) * shape_.head_dim;
    const int64_t nslots = static_cast<int64_t>(shape_.num_blocks) * shape_.block_size;
    for (int r = 0; r < T_; ++r) {
      const int64_t s = slots[r];
      if (s < 0 || s >= nslots) continue;
      std::copy_n(&a.k_rot[r * row], row, &a.k_cache[s * row]);
      std::copy_n(&a.v[r * row], row, &a.v_cache[s * row]);
    }
  }

  void attention(AttnBuffers& a, const BatchedAttnMetadata& m) const {
    const Region sr = scratch_region(), ar = arena_region();
    const int32_t* kv_lens = sr.at<int32_t>(m.kv_lens, N_);
    const uint64_t* tables = sr.at<uint64_t>(m.block_table_ptrs, N_);
    if (!kv_lens || !tables) return;
    const int Hq = shape_.num_q_heads, Hkv = shape_.num_kv_heads, G = Hq / Hkv;
    const int D = shape_.head_dim, bs = shape_.block_size;
    const int max_entries = static_cast<int>(m.max_blocks_per_seq);
    const int extra = faults_.has(Fault::causal_off_by_one) ? 1 : 0;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));

    struct Item { int b, h, i0, i1; };
    std::vector<Item> items;
    for (int b = 0; b < N_; ++b) {
      int begin = 0, end = 0;
      if (!stream_rows(m, b, &begin, &end)) return;
      for (int h = 0; h < Hkv; ++h)
        for (int i0 = 0; i0 < end - begin; i0 += kQTile)
          items.push_back({b, h, i0, std::min(i0 + kQTile, end - begin)});
    }
    parallel_for(static_cast<int>(items.size()), [&](int it) {
      const Item w = items[it];
      int begin = 0, end = 0;
      stream_rows(m, w.b, &begin, &end);
      const int count = end - begin;
      const int kv_len = std::clamp(kv_lens[w.b], 0, max_entries * bs);
      const int cs = std::max(kv_len - count, 0);
      // The table is read for up to max_blocks_per_seq + 1 entries (the
      // arena's poison slack keeps an over-read inside the arena).
      const int32_t* table = ar.at<int32_t>(tables[w.b], max_entries + 1);
      if (!table) return;
      const int nr = w.i1 - w.i0, rows = nr * G;
      MatF Q(rows, D), O = MatF::Zero(rows, D);
      std::vector<float> mrow(rows, -std::numeric_limits<float>::infinity()), lrow(rows, 0.f);
      for (int i = 0; i < nr; ++i)
        for (int g = 0; g < G; ++g) {
          const bf16* q = &a.q_rot[((begin + w.i0 + i) * static_cast<size_t>(Hq) + w.h * G + g) * D];
          for (int d = 0; d < D; ++d) Q(i * G + g, d) = to_float(q[d]) * scale;
        }
      const size_t kv_row = static_cast<size_t>(Hkv) * D;
      auto load_key = [&](int j, float* k, float* v) {
        const int e = j / bs;
        const int32_t blk = e <= max_entries ? table[e] : -1;
        if (blk < 0 || blk >= shape_.num_blocks) {
          std::fill_n(k, D, kNaN);
          std::fill_n(v, D, kNaN);
          return;
        }
        const size_t at = (static_cast<size_t>(blk) * bs + j % bs) * kv_row + w.h * D;
        for (int d = 0; d < D; ++d) {
          k[d] = to_float(a.k_cache[at + d]);
          v[d] = to_float(a.v_cache[at + d]);
        }
      };
      const int first_bound = cs + w.i0 + extra;      // the smallest row bound in the tile
      const int last_bound = cs + w.i1 - 1 + extra;   // the largest
      MatF K(kKTile, D), V(kKTile, D), S;
      for (int j0 = 0; j0 <= last_bound; j0 += kKTile) {
        const int nk = std::min(kKTile, last_bound + 1 - j0);
        for (int j = 0; j < nk; ++j) load_key(j0 + j, &K(j, 0), &V(j, 0));
        if (j0 + nk - 1 <= first_bound) {
          // Full tile: every row sees every key.
          S.noalias() = Q * K.topRows(nk).transpose();
          MatF P(rows, nk);
          for (int r = 0; r < rows; ++r) {
            const float mnew = std::max(mrow[r], S.row(r).maxCoeff());
            const float alpha = std::exp(mrow[r] - mnew);
            float sum = 0;
            for (int j = 0; j < nk; ++j) {
              const float p = std::exp(S(r, j) - mnew);
              sum += p;
              P(r, j) = round_bf16(p);
            }
            lrow[r] = lrow[r] * alpha + sum;
            O.row(r) *= alpha;
            mrow[r] = mnew;
          }
          O.noalias() += P * V.topRows(nk);
        } else {
          // Diagonal tile: each row takes only the keys up to its own bound.
          for (int r = 0; r < rows; ++r) {
            const int bound = cs + w.i0 + r / G + extra;
            const int n = std::min(nk, bound - j0 + 1);
            if (n <= 0) continue;
            float mnew = mrow[r];
            std::vector<float> s(n);
            for (int j = 0; j < n; ++j) {
              s[j] = Q.row(r).dot(K.row(j));
              mnew = std::max(mnew, s[j]);
            }
            if (std::isnan(mnew)) mnew = kNaN;
            const float alpha = std::exp(mrow[r] - mnew);
            O.row(r) *= alpha;
            float sum = 0;
            for (int j = 0; j < n; ++j) {
              const float p = std::exp(s[j] - mnew);
              sum += p;
              O.row(r) += round_bf16(p) * V.row(j);
            }
            lrow[r] = lrow[r] * alpha + sum;
            mrow[r] = mnew;
          }
        }
      }
      for (int i = 0; i < nr; ++i)
        for (int g = 0; g < G; ++g) {
          bf16* o = &a.out[((begin + w.i0 + i) * static_cast<size_t>(Hq) + w.h * G + g) * D];
          const int r = i * G + g;
          for (int d = 0; d < D; ++d) o[d] = to_bf16(O(r, d) / lrow[r]);
        }
    });
  }

  void conv1d(GdnBuffers& d, const BatchedAttnMetadata& m) const {
    const int32_t* cu = scratch_region().at<int32_t>(m.cu_seqlens, N_ + 1);
    if (!cu) return;
    const int C = shape_conv_dim(), K = shape_.d_conv, W = K - 1;
    const bool bleed = faults_.has(Fault::conv_state_bleed);
    parallel_for(T_, [&](int r) {
      StreamRows rows;
      const int b = decode_stream_of_row(cu, N_, T_, r, &rows);
      if (b < 0) return;  // a row no stream owns stays poisoned
      const int begin = rows.begin;
      for (int c = 0; c < C; ++c) {
        float u = 0;
        for (int j = 0; j < K; ++j) {
          const long src = r - W + j;
          float xin;
          if (src >= begin || (bleed && b > 0 && src >= 0))
            xin = to_float(d.x[src * C + c]);
          else
            xin = to_float(d.conv_state[(static_cast<size_t>(b) * C + c) * W + (W + (src - begin))]);
          u += to_float(d.conv_w[c * K + j]) * xin;
        }
        d.conv_out[r * C + c] = to_bf16(u / (1.0f + std::exp(-u)));
      }
    });
    // The new conv_state: the last W inputs of (old state ++ the stream's rows).
    for (int b = 0; b < N_; ++b) {
      const StreamRows rows = decode_stream_rows(cu, b, T_);
      const int begin = rows.begin, end = rows.end;
      for (int c = 0; c < C; ++c) {
        bf16* st = &d.conv_state[(static_cast<size_t>(b) * C + c) * W];
        std::vector<bf16> joined(st, st + W);
        for (int r = begin; r < end; ++r) joined.push_back(d.x[static_cast<size_t>(r) * C + c]);
        std::copy(joined.end() - W, joined.end(), st);
      }
    }
  }

  int shape_conv_dim() const {
    return 2 * shape_.num_k_heads * shape_.k_dim + shape_.num_v_heads * shape_.v_dim;
  }

  void gdn(GdnBuffers& d, const BatchedAttnMetadata& m, uint64_t h_state_ptrs) const {
    const uint64_t* ptrs = scratch_region().at<uint64_t>(h_state_ptrs, N_);
    if (!ptrs) return;
    const Region hr{reinterpret_cast<const uint8_t*>(d.h_state.data()), d.h_state.size() * 4};
    const int Hk = shape_.num_k_heads, Hv = shape_.num_v_heads, dk = shape_.k_dim, dv = shape_.v_dim;
    const int C = shape_conv_dim();
    const float qscale = 1.0f / std::sqrt(static_cast<float>(dk));
    parallel_for(N_ * Hv, [&](int item) {
      const int b = static_cast<int>(item / Hv), h = static_cast<int>(item % Hv);
      int begin = 0, end = 0;
      if (!stream_rows(m, b, &begin, &end)) return;
      const float* base = hr.at<float>(ptrs[b], state_elems());
      if (!base) return;
      Eigen::Map<MatF> S(const_cast<float*>(base) + static_cast<size_t>(h) * dv * dk, dv, dk);
      const int kh = h / (Hv / Hk);
      Eigen::VectorXf q(dk), k(dk), v(dv);
      for (int r = begin; r < end; ++r) {
        const bf16* y = &d.conv_out[static_cast<size_t>(r) * C];
        for (int i = 0; i < dk; ++i) {
          q[i] = to_float(y[kh * dk + i]);
          k[i] = to_float(y[Hk * dk + kh * dk + i]);
        }
        for (int i = 0; i < dv; ++i) v[i] = to_float(y[2 * Hk * dk + h * dv + i]);
        q /= std::sqrt(q.squaredNorm() + 1e-6f);
        k /= std::sqrt(k.squaredNorm() + 1e-6f);
        const float decay = std::exp(d.g[static_cast<size_t>(r) * Hv + h]);
        const float beta = d.beta[static_cast<size_t>(r) * Hv + h];
        S *= decay;
        const Eigen::VectorXf delta = beta * (v - S * k);
        S.noalias() += delta * k.transpose();
        const Eigen::VectorXf o = (S * q) * qscale;
        bf16* out = &d.out[(static_cast<size_t>(r) * Hv + h) * dv];
        for (int i = 0; i < dv; ++i) out[i] = to_bf16(o[i]);
      }
    });
  }

  FaultSet faults_;
  LayerShape shape_;
  int N_ = 0, T_ = 0;
  std::vector<uint8_t> scratch_, arena_;
  std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Backend> make_host_backend(FaultSet faults) {
  return std::make_unique<HostBackend>(faults);
}

}  // namespace pb
