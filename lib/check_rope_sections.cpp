// check_rope_sections.cpp: the positions check as the kernel applied them: the
// roped k an attention layer stored at each token's own slot, split by RoPE
// section, against the rotation by that section's positions (and by the other
// sections', to say which positions a wrong section used). Only tokens whose
// slot holds their own v bit for bit are judged; a misplaced write is kv_write's.
#include <fmt/format.h>

#include <cmath>

#include "checks.h"

namespace pb {

namespace {

const char* const kSectionName[3] = {"T", "H", "W"};

// The kv_write check's rule for a roped k: 2 bf16 ulps of the value plus one of
// the head row's largest input (RoPE's cancellation scales with the inputs).
bool same_k(float got, float want, float row_max) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  return std::abs(got - want) <= std::ldexp(std::abs(want), -7) + std::ldexp(row_max, -8) + 1e-30f;
}

// "rotary dims 16..39 and 80..103", or for an interleaved section
// "rotary frequencies 1, 4, ..., 58, dims i and i + 64".
std::string describe(const std::vector<int>& freqs, int half) {
  if (freqs.empty()) return "no rotary dims";
  const int a = freqs.front(), b = freqs.back();
  if (b - a + 1 == static_cast<int>(freqs.size()))
    return fmt::format("rotary dims {}..{} and {}..{}", a, b, a + half, b + half);
  const int step = freqs.size() > 1 ? freqs[1] - freqs[0] : 1;
  bool even = true;
  for (size_t k = 1; k < freqs.size(); ++k) even = even && freqs[k] - freqs[k - 1] == step;
  if (even)
    return fmt::format("rotary frequencies {}, {}, ..., {}, dims i and i + {}", a, a + step, b, half);
  std::string list;
  for (int f : freqs) list += (list.empty() ? "" : ",") + std::to_string(f);
  return fmt::format("rotary frequencies {}, dims i and i + {}", list, half);
}

struct Tally {
  long long tokens = 0, wrong = 0;
  long long matches[3] = {0, 0, 0};  // wrong tokens that fit another section's positions
  std::string first;                 // the first wrong token, explained
  int first_stream = -1;
};

}  // namespace

void check_rope_sections(const Batch& batch, const LayerShape& shape, int layer, const LayerOutputs& out,
                         CheckResult& r) {
  const int half = shape.rotary_dim / 2, D = shape.head_dim, Hkv = shape.num_kv_heads, bs = shape.block_size;
  const int sections = shape.mrope ? 3 : 1;
  if (half == 0) return;
  std::vector<float> inv(half);
  std::vector<int> sec(half);
  std::vector<std::vector<int>> freqs(3);
  for (int i = 0; i < half; ++i) {
    inv[i] = static_cast<float>(std::pow(static_cast<double>(shape.rope_theta), -2.0 * i / shape.rotary_dim));
    sec[i] = rope_section(shape, i);
    freqs[sec[i]].push_back(i);
  }
  const AttnInputs& in = batch.layers[layer].attn;
  const size_t row = static_cast<size_t>(Hkv) * D;
  Tally tally[3];
  std::vector<float> cs(3 * static_cast<size_t>(half)), sn(cs.size());
  for (int b = 0; b < batch.num_streams; ++b) {
    const StreamTruth& st = batch.streams[b];
    for (int i = 0; i < st.count; ++i) {
      const int p = st.chunk_start + i;
      const size_t slot = static_cast<size_t>(st.blocks[p / bs]) * bs + p % bs;
      const size_t r_in = (static_cast<size_t>(st.row_begin) + i) * row, r_cache = slot * row;
      if (r_cache + row > out.k_cache.size() || r_cache + row > out.v_cache.size()) continue;
      bool own_v = true;
      for (size_t e = 0; e < row && own_v; ++e) own_v = out.v_cache[r_cache + e].bits == in.v[r_in + e].bits;
      if (!own_v) continue;
      const uint32_t pos[3] = {st.pos_t[i], st.pos_h[i], st.pos_w[i]};
      for (int c = 0; c < 3; ++c)
        for (int f = 0; f < half; ++f) {
          const float ang = static_cast<float>(pos[c]) * inv[f];
          cs[c * half + f] = std::cos(ang);
          sn[c * half + f] = std::sin(ang);
        }
      for (int s = 0; s < sections; ++s) {
        if (freqs[s].empty()) continue;
        bool fits[3] = {true, true, true};
        for (int h = 0; h < Hkv; ++h) {
          const bf16* x = &in.k[r_in + static_cast<size_t>(h) * D];
          const bf16* y = &out.k_cache[r_cache + static_cast<size_t>(h) * D];
          float row_max = 0;
          for (int d = 0; d < D; ++d) row_max = std::max(row_max, std::abs(to_float(x[d])));
          for (int f : freqs[s]) {
            const float x1 = to_float(x[f]), x2 = to_float(x[f + half]);
            const float y1 = to_float(y[f]), y2 = to_float(y[f + half]);
            for (int c = 0; c < 3; ++c) {
              if (!fits[c]) continue;
              const float c_ = cs[c * half + f], s_ = sn[c * half + f];
              fits[c] = same_k(y1, round_bf16(x1 * c_ - x2 * s_), row_max) &&
                        same_k(y2, round_bf16(x2 * c_ + x1 * s_), row_max);
            }
          }
        }
        Tally& t = tally[s];
        ++t.tokens;
        if (fits[s]) continue;
        std::string instead;
        for (int c = 0; c < 3; ++c)
          if (c != s && pos[c] != pos[s] && fits[c]) {
            ++t.matches[c];
            if (instead.empty()) instead = fmt::format("; its keys fit the {} position {}", kSectionName[c], pos[c]);
          }
        if (t.wrong++ == 0) {
          t.first_stream = b;
          t.first = fmt::format("first stream {} token {} (position {}, {} position {}){}", b, i, p,
                                kSectionName[s], pos[s],
                                instead.empty() ? "; its keys fit none of the token's T/H/W positions" : instead);
        }
      }
    }
  }
  for (int s = 0; s < sections; ++s) {
    const Tally& t = tally[s];
    Figure fig;
    fig.layer = layer;
    fig.what = fmt::format("roped_k_{}", kSectionName[s]);
    fig.mismatched = t.wrong;
    fig.elements = t.tokens;
    fig.pass = t.wrong == 0;
    r.figures.push_back(fig);
    if (!t.wrong) continue;
    std::string matched;
    for (int c = 0; c < 3; ++c)
      if (t.matches[c])
        matched += fmt::format("{}{} of them fit the {} positions", matched.empty() ? "; " : ", ", t.matches[c],
                               kSectionName[c]);
    r.fail(layer, t.first_stream,
           fmt::format("the {} section ({}) of the roped keys uses wrong positions on {} of {} tokens{}; {}",
                       kSectionName[s], describe(freqs[s], half), t.wrong, t.tokens, matched, t.first));
  }
}

}  // namespace pb
