// export.cpp: the batch JSON of export.h, from the resolved streams (the same
// resolve_streams the generator uses, so generated stream mixes match).
#include "export.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "batch.h"
#include "input_error.h"
#include "utf8.h"

namespace pb {

std::string batch_json(const Scenario& s) {
  const std::vector<StreamSpec> streams = resolve_streams(s);
  nlohmann::ordered_json j;
  j["schema"] = "prefill-bench.batch/1";
  j["name"] = s.name;
  j["scenario"] = s.path;
  j["seed"] = s.seed;
  j["model"] = {{"num_q_heads", s.model.num_q_heads},
                {"num_kv_heads", s.model.num_kv_heads},
                {"head_dim", s.model.head_dim},
                {"block_size", s.model.block_size},
                {"dtype", "bf16"}};
  j["causal"] = true;
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  long long total = 0;
  double pairs = 0;
  for (const StreamSpec& st : streams) {
    arr.push_back({{"chunk_start", st.chunk_start}, {"count", st.tokens}, {"kv_len", st.chunk_start + st.tokens}});
    total += st.tokens;
    pairs += static_cast<double>(st.tokens) * st.chunk_start + 0.5 * st.tokens * (st.tokens + 1.0);
  }
  j["streams"] = arr;
  j["total_tokens"] = total;
  j["attention_flops"] = 4.0 * s.model.num_q_heads * s.model.head_dim * pairs;
  // Invalid UTF-8 in a name cannot reach here from the CLI (refused up front); replaced, never thrown on.
  return j.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

void export_batch(const Scenario& s, const std::string& path) {
  if (!valid_utf8(s.path))
    throw InputError(s.path + ": the file name is not valid UTF-8; export writes it into JSON: rename the file");
  const std::string text = batch_json(s);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("export: cannot open " + path + " for writing");
  f << text;
  f.close();
  if (!f) throw std::runtime_error("export: writing " + path + " failed");
}

}  // namespace pb
