// reference_internal.h: pieces of the CPU reference shared by its files and its
// tests (not part of the public API): the work splitter, the RoPE tables and the
// per-stream Gated DeltaNet in float64 with a float64 state.
// Invariant: every result is independent of the number of threads (each output
// element is computed by exactly one task, in a fixed order).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "lib/batch.h"
#include "lib/bf16.h"
#include "lib/metadata.h"
#include "reference/reference.h"

namespace pb::detail {

// RoPE frequencies of one layer shape (the contract in reference.h):
// inv_hp[i] = theta^(-2i/rotary_dim) in double, inv_lp[i] the same rounded to
// float (what the kernels get from the host), sel[i] = rope_section(shape, i).
struct RopeFreqs {
  int half = 0;
  std::vector<double> inv_hp;
  std::vector<float> inv_lp;
  std::vector<int> sel;
};
RopeFreqs rope_freqs(const LayerShape& shape);

// cos/sin of every token of one stream, [count][half]: hp in double from a
// double angle, lp in float from a float angle (float(pos) * inv_lp).
struct RopeTable {
  int half = 0;
  std::vector<double> cos_hp, sin_hp;
  std::vector<float> cos_lp, sin_lp;
};
RopeTable rope_table(const RopeFreqs& freqs, const StreamTruth& stream);
// The same for one token with explicit T/H/W positions.
RopeTable rope_table_one(const RopeFreqs& freqs, uint32_t pos_t, uint32_t pos_h, uint32_t pos_w);

// Rotates one head vector x[head_dim] ("rotate half" over the first 2*half dims;
// the rest pass through). hp: in double, result kept unrounded in float. lp: in
// float, result rounded to bf16 (returned as the float of that bf16).
void rope_head_hp(const double* cos, const double* sin, int half, int head_dim, const bf16* x,
                  float* y);
void rope_head_lp(const float* cos, const float* sin, int half, int head_dim, const bf16* x,
                  float* y);

// e[j] = exp(s[j] * scale - m) in double for j < n (arguments <= 0, as in a
// softmax after its max); returns the sum of e, accumulated in order.
double exp_scores_hp(const float* s, int n, double scale, double m, double* e);

// One stream of a Gated DeltaNet layer in high precision, with the state in and
// out in double (GdnReference::h_hp is f32; chunk-split tests need the state
// unrounded). `h0` empty: the state starts from GdnInputs::h0[stream] (or zero).
// out: [count, Hv, v_dim]; h_final: [Hv, v_dim, k_dim].
void gdn_stream_hp(const Batch& batch, const LayerShape& shape, int layer, int stream,
                   const std::vector<double>& h0, std::vector<double>* out,
                   std::vector<double>* h_final);

// fp32 -> tf32 as cvt.rn.tf32.f32 does it for mma operands: round to nearest
// on the 10 stored mantissa bits, ties to even; the low 13 bits zero.
// NaN and infinity pass through.
float round_tf32(float f);

// Tokens per chunk of kernels/gdn_chunked.cu (its kC); chunks start at the
// stream's first token.
constexpr int kGdnChunkTokens = 32;

// How the tf32 emulation sums the products of an mma: in fp32 as the kernel's
// accumulators do (the lp), or in double, rounded to fp32 where the kernel
// stores (a tensor core summing wider or in another order; tests use it as a
// kernel stand-in that is not the lp itself).
enum class Tf32Sums { fp32, wide };

// One chunk (1 <= n <= kGdnChunkTokens tokens) of one v head in exactly the
// arithmetic of kernels/gdn_chunked.cu (GdnPrecision::tf32_chunked): q, k
// [n][dk] L2-normalised, v [n][dv], g and beta [n]; S [dv][dk] the fp32 state
// in and out; o_t (rounded to bf16) to out + t * out_stride.
void gdn_chunk_tf32(int n, int dk, int dv, const float* q, const float* k, const float* v,
                    const float* g, const float* beta, float* S, float* out, size_t out_stride,
                    Tf32Sums sums = Tf32Sums::fp32);
// The same chunk in the arithmetic of kernels/gdn_split.cu (GdnPrecision::
// tf32_split, reference/gdn_split_lp.cpp): the WY terms U, W first, then the
// state's product with W; same arguments.
void gdn_chunk_split(int n, int dk, int dv, const float* q, const float* k, const float* v,
                     const float* g, const float* beta, float* S, float* out, size_t out_stride,
                     Tf32Sums sums = Tf32Sums::fp32);

// Tokens per chunk of GdnPrecision::bf16_chunk64 (fla's chunk size); chunks start at the
// stream's first token.
constexpr int kGdnBf16ChunkTokens = 64;
// The same chunk (1 <= n <= kGdnBf16ChunkTokens tokens) in the arithmetic of
// GdnPrecision::bf16_chunk64 (reference/gdn_bf16_lp.cpp): bf16 operands where fla's
// chunk_gated_delta_rule rounds, fp32 sums and state; same arguments.
void gdn_chunk_bf16(int n, int dk, int dv, const float* q, const float* k, const float* v,
                    const float* g, const float* beta, float* S, float* out, size_t out_stride,
                    Tf32Sums sums = Tf32Sums::fp32);

// A chunked kernel's arithmetic as the lp recurrence runs it: its chunk function (the
// signature above) and its chunk length in tokens (chunks start at the stream's first token
// and divide gdn_ref.cpp's 64-token tiles).
using GdnChunkFn = void (*)(int n, int dk, int dv, const float* q, const float* k, const float* v, const float* g,
                            const float* beta, float* S, float* out, size_t out_stride, Tf32Sums sums);
struct GdnChunkForm {
  GdnChunkFn fn = nullptr;
  int tokens = 0;
};
// The chunk form of a chunked precision (tf32_chunked, tf32_split, bf16_chunk64); fn is
// null for fp32 (the token recurrence).
GdnChunkForm gdn_chunk_form(GdnPrecision p);

// One stream of a Gated DeltaNet layer at kernel precision `p` (what
// gdn_reference's out_lp / h_lp hold for it, with `sums` for the chunked precisions).
// out: [count, Hv, v_dim] (bf16 values); h_final: [Hv, v_dim, k_dim].
void gdn_stream_lp(const Batch& batch, const LayerShape& shape, int layer, int stream,
                   GdnPrecision p, Tf32Sums sums, std::vector<float>* out,
                   std::vector<float>* h_final);
// The same for any chunk form: a candidate kernel's arithmetic, studied on the host before
// it is a declared precision (tests/gdn_precision_test.cpp).
void gdn_stream_chunks(const Batch& batch, const LayerShape& shape, int layer, int stream, GdnChunkForm form,
                       Tf32Sums sums, std::vector<float>* out, std::vector<float>* h_final);

}  // namespace pb::detail
