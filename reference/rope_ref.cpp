// rope_ref.cpp: RoPE / MRoPE of the reference (NeoX "rotate half", partial
// rotary), in the two precisions of the contract (reference.h): hp in double,
// lp as the kernels do it (inv_freq double -> float, angle and sin/cos in float,
// result rounded to bf16).
#include <cmath>
#include <stdexcept>
#include <string>

#include "reference/reference.h"
#include "reference/reference_internal.h"

namespace pb {

int rope_section(const LayerShape& shape, int i) {
  if (!shape.mrope) return 0;
  const int s_t = shape.mrope_sections[0], s_h = shape.mrope_sections[1],
            s_w = shape.mrope_sections[2];
  if (shape.mrope_interleaved) {
    if (i % 3 == 1 && i < 3 * s_h) return 1;
    if (i % 3 == 2 && i < 3 * s_w) return 2;
    return 0;
  }
  if (i < s_t) return 0;
  if (i < s_t + s_h) return 1;
  return 2;
}

namespace detail {

RopeFreqs rope_freqs(const LayerShape& shape) {
  if (shape.rotary_dim < 0 || shape.rotary_dim % 2 != 0 || shape.rotary_dim > shape.head_dim)
    throw std::invalid_argument("rope: rotary_dim " + std::to_string(shape.rotary_dim) +
                                " must be even and within head_dim " +
                                std::to_string(shape.head_dim));
  RopeFreqs f;
  f.half = shape.rotary_dim / 2;
  f.inv_hp.resize(f.half);
  f.inv_lp.resize(f.half);
  f.sel.resize(f.half);
  const double theta = static_cast<double>(shape.rope_theta);
  for (int i = 0; i < f.half; ++i) {
    f.inv_hp[i] = std::pow(theta, -2.0 * i / shape.rotary_dim);
    f.inv_lp[i] = static_cast<float>(f.inv_hp[i]);
    f.sel[i] = rope_section(shape, i);
  }
  return f;
}

namespace {

void fill_row(const RopeFreqs& f, const uint32_t pos[3], RopeTable* t, size_t row) {
  const size_t base = row * f.half;
  for (int i = 0; i < f.half; ++i) {
    const uint32_t p = pos[f.sel[i]];
    const double a_hp = static_cast<double>(p) * f.inv_hp[i];
    t->cos_hp[base + i] = std::cos(a_hp);
    t->sin_hp[base + i] = std::sin(a_hp);
    const float a_lp = static_cast<float>(p) * f.inv_lp[i];
    t->cos_lp[base + i] = std::cos(a_lp);
    t->sin_lp[base + i] = std::sin(a_lp);
  }
}

void size_table(const RopeFreqs& f, size_t rows, RopeTable* t) {
  t->half = f.half;
  t->cos_hp.resize(rows * f.half);
  t->sin_hp.resize(rows * f.half);
  t->cos_lp.resize(rows * f.half);
  t->sin_lp.resize(rows * f.half);
}

}  // namespace

RopeTable rope_table(const RopeFreqs& f, const StreamTruth& s) {
  const size_t n = static_cast<size_t>(s.count);
  bool uses_hw = false;
  for (int sel : f.sel) uses_hw |= sel != 0;
  if (s.pos_t.size() != n || (uses_hw && (s.pos_h.size() != n || s.pos_w.size() != n)))
    throw std::invalid_argument("rope: stream with count " + std::to_string(s.count) +
                                " has " + std::to_string(s.pos_t.size()) + "/" +
                                std::to_string(s.pos_h.size()) + "/" +
                                std::to_string(s.pos_w.size()) + " T/H/W positions");
  RopeTable t;
  size_table(f, n, &t);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t pos[3] = {s.pos_t[i], uses_hw ? s.pos_h[i] : 0u, uses_hw ? s.pos_w[i] : 0u};
    fill_row(f, pos, &t, i);
  }
  return t;
}

RopeTable rope_table_one(const RopeFreqs& f, uint32_t pos_t, uint32_t pos_h, uint32_t pos_w) {
  RopeTable t;
  size_table(f, 1, &t);
  const uint32_t pos[3] = {pos_t, pos_h, pos_w};
  fill_row(f, pos, &t, 0);
  return t;
}

void rope_head_hp(const double* cos, const double* sin, int half, int head_dim, const bf16* x,
                  float* y) {
  for (int i = 0; i < half; ++i) {
    const double x1 = to_float(x[i]), x2 = to_float(x[i + half]);
    y[i] = static_cast<float>(x1 * cos[i] - x2 * sin[i]);
    y[i + half] = static_cast<float>(x2 * cos[i] + x1 * sin[i]);
  }
  for (int d = 2 * half; d < head_dim; ++d) y[d] = to_float(x[d]);
}

void rope_head_lp(const float* cos, const float* sin, int half, int head_dim, const bf16* x,
                  float* y) {
  for (int i = 0; i < half; ++i) {
    const float x1 = to_float(x[i]), x2 = to_float(x[i + half]);
    y[i] = round_bf16(x1 * cos[i] - x2 * sin[i]);
    y[i + half] = round_bf16(x2 * cos[i] + x1 * sin[i]);
  }
  for (int d = 2 * half; d < head_dim; ++d) y[d] = to_float(x[d]);
}

}  // namespace detail
}  // namespace pb
