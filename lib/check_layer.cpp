// check_layer.cpp: one layer's output checks (check_layer.h): the reference from
// the truth, then each check that runs.
#include "check_layer.h"

#include "checks.h"

namespace pb {

void check_layer(const Scenario& s, const Batch& batch, const LayerShape& shape, int layer, Backend& backend,
                 const LayerOutputs& first, int ref_sample, const std::vector<int32_t>& staged_kv_lens,
                 std::map<std::string, CheckResult>& checks) {
  auto on = [&](const char* name) { return checks[name].ran; };
  if (s.layers[layer] == LayerKind::attn) {
    const AttnReference ref = attention_reference(batch, shape, layer, ref_sample, s.seed);
    if (on(kCheckNumeric) || on(kCheckCausalBound)) {
      CheckResult numeric = checks[kCheckNumeric], causal = checks[kCheckCausalBound];
      check_attention(batch, shape, layer, ref, first, s.tol_bf16, staged_kv_lens, numeric, causal);
      if (on(kCheckNumeric)) checks[kCheckNumeric] = numeric;
      if (on(kCheckCausalBound)) checks[kCheckCausalBound] = causal;
    }
    if (on(kCheckKvWrite)) check_kv_write(batch, shape, layer, ref, first, checks[kCheckKvWrite]);
    if (on(kCheckPositions)) check_rope_sections(batch, shape, layer, first, checks[kCheckPositions]);
  } else {
    const GdnReference ref = gdn_reference(batch, shape, layer, backend.gdn_precision(layer));
    if (on(kCheckNumeric) || on(kCheckState)) {
      CheckResult numeric = checks[kCheckNumeric], state = checks[kCheckState];
      check_gdn(batch, shape, layer, ref, first, s.tol_bf16, numeric, state);
      if (on(kCheckNumeric)) checks[kCheckNumeric] = numeric;
      if (on(kCheckState)) checks[kCheckState] = state;
    }
  }
}

}  // namespace pb
