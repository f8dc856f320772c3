// batch_jsonl.h: batches captured from an engine, one JSON object per line
// (docs/DESIGN.md "Engine-captured batches"). Canonical form {"streams":
// [{"chunk_start": C, "tokens": N}, ...]}; also the engine's host arrays
// {"cu_seqlens": [0, n0, n0+n1, ...], "kv_lens": [k0, k1, ...]} (chunk_start = kv_len - count).
#pragma once
#include <string>
#include <vector>

#include "scenario.h"

namespace pb {

// The file's lines that hold a batch: every line that is not blank, 1-based.
// Throws a located InputError when the file cannot be read or holds no batch.
std::vector<int> jsonl_batch_lines(const std::string& path);

// The streams of line `line` (1-based). Throws InputError "FILE:LINE:COL: FIELD:
// ..." for a missing file, a line out of range or blank, bad JSON, an unknown or
// missing field, a value that is not an integer in range, cu_seqlens that do not
// start at 0 or do not grow, kv_lens of another length or shorter than the count.
std::vector<StreamSpec> read_jsonl_batch(const std::string& path, int line);

}  // namespace pb
