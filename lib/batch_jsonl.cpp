// batch_jsonl.cpp: reads one engine-captured batch from a JSON Lines file
// (batch_jsonl.h). Every refusal names the file, the line and the field.
#include "batch_jsonl.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace pb {

namespace {

constexpr int64_t kMaxTokens = int64_t(1) << 20;  // per stream and for chunk_start, as in a scenario
constexpr size_t kMaxStreams = 4096;
constexpr uint64_t kMaxFileBytes = uint64_t(64) << 20;

using json = nlohmann::json;

std::vector<std::string> read_lines(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    throw InputError(located(path, Mark{}, "", std::string("cannot open the batch file: ") + std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw InputError(located(path, Mark{}, "", "not a regular file; a batch file is JSON Lines"));
  if (uint64_t(st.st_size) > kMaxFileBytes)
    throw InputError(located(path, Mark{}, "", fmt::format("the file holds {} bytes, more than the {} a batch file may "
                                                           "(64 MiB)", st.st_size, kMaxFileBytes)));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(located(path, Mark{}, "", "cannot open the batch file (missing or unreadable)"));
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  if (in.bad()) throw InputError(located(path, Mark{}, "", "cannot read the batch file"));
  return lines;
}

bool blank(const std::string& l) { return l.find_first_not_of(" \t\r") == std::string::npos; }

}  // namespace

std::vector<int> jsonl_batch_lines(const std::string& path) {
  const std::vector<std::string> lines = read_lines(path);
  std::vector<int> out;
  for (size_t i = 0; i < lines.size(); ++i)
    if (!blank(lines[i])) out.push_back(static_cast<int>(i + 1));
  if (out.empty()) throw InputError(located(path, Mark{}, "", "the batch file holds no batch (no non-blank line)"));
  return out;
}

std::vector<StreamSpec> read_jsonl_batch(const std::string& path, int line) {
  const std::vector<std::string> lines = read_lines(path);
  const Mark at{line, 1};
  auto bad = [&](const std::string& field, const std::string& what) {
    return InputError(located(path, at, field, what));
  };
  if (line < 1 || static_cast<size_t>(line) > lines.size())
    throw InputError(located(path, Mark{}, "line", fmt::format("line {} is out of range: the file has {} line(s)",
                                                               line, lines.size())));
  if (blank(lines[line - 1])) throw bad("", "the line is blank; it holds no batch");
  json j;
  try {
    j = json::parse(lines[line - 1]);
  } catch (const json::parse_error& e) {
    // e.byte is 1-based within the line.
    throw InputError(located(path, Mark{line, static_cast<int>(e.byte)}, "",
                             std::string("bad JSON: ") + e.what()));
  }
  if (!j.is_object()) throw bad("", "expected a JSON object ({\"streams\": [...]} or {\"cu_seqlens\": [...], "
                                    "\"kv_lens\": [...]}), found " + std::string(j.type_name()));
  auto integer = [&](const json& v, const std::string& field, int64_t lo, int64_t hi) {
    if (!v.is_number_integer())
      throw bad(field, fmt::format("expected an integer, found {}", v.is_null() ? "null" : v.dump()));
    // A value above INT64_MAX reads as unsigned.
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi))
      throw bad(field, fmt::format("expected an integer in [{}, {}], found {}", lo, hi, v.dump()));
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) throw bad(field, fmt::format("expected an integer in [{}, {}], found {}", lo, hi, x));
    return x;
  };
  auto array = [&](const std::string& field) -> const json& {
    const json& v = j.at(field);
    if (!v.is_array()) throw bad(field, fmt::format("expected an array, found {}", v.type_name()));
    return v;
  };
  std::vector<StreamSpec> out;
  const bool canonical = j.contains("streams"), engine = j.contains("cu_seqlens") || j.contains("kv_lens");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "streams" && it.key() != "cu_seqlens" && it.key() != "kv_lens")
      throw bad(it.key(), "unknown field (known: streams; or cu_seqlens and kv_lens)");
  if (canonical && engine) throw bad("streams", "give either streams or cu_seqlens and kv_lens, not both");
  if (canonical) {
    const json& ss = array("streams");
    if (ss.empty() || ss.size() > kMaxStreams)
      throw bad("streams", fmt::format("expected 1 to {} streams, found {}", kMaxStreams, ss.size()));
    for (size_t i = 0; i < ss.size(); ++i) {
      const std::string p = fmt::format("streams[{}]", i);
      if (!ss[i].is_object()) throw bad(p, fmt::format("expected {{\"chunk_start\": C, \"tokens\": N}}, found {}", ss[i].dump()));
      for (auto it = ss[i].begin(); it != ss[i].end(); ++it)
        if (it.key() != "chunk_start" && it.key() != "tokens")
          throw bad(p + "." + it.key(), "unknown field (known: chunk_start, tokens)");
      if (!ss[i].contains("tokens")) throw bad(p + ".tokens", "required field missing");
      StreamSpec st;
      st.tokens = int(integer(ss[i]["tokens"], p + ".tokens", 1, kMaxTokens));
      if (ss[i].contains("chunk_start")) st.chunk_start = int(integer(ss[i]["chunk_start"], p + ".chunk_start", 0, kMaxTokens));
      out.push_back(st);
    }
    return out;
  }
  if (!engine) throw bad("", "expected {\"streams\": [...]} or {\"cu_seqlens\": [...], \"kv_lens\": [...]}");
  if (!j.contains("cu_seqlens")) throw bad("cu_seqlens", "required field missing (kv_lens is given)");
  if (!j.contains("kv_lens")) throw bad("kv_lens", "required field missing (cu_seqlens is given)");
  const json& cu = array("cu_seqlens");
  const json& kv = array("kv_lens");
  if (cu.size() < 2 || cu.size() > kMaxStreams + 1)
    throw bad("cu_seqlens", fmt::format("expected 2 to {} entries (0, then each stream's end), found {}",
                                        kMaxStreams + 1, cu.size()));
  if (kv.size() != cu.size() - 1)
    throw bad("kv_lens", fmt::format("expected one entry per stream, {} (cu_seqlens has {} entries), found {}",
                                     cu.size() - 1, cu.size(), kv.size()));
  if (integer(cu[0], "cu_seqlens[0]", 0, 0) != 0) throw bad("cu_seqlens[0]", "expected 0");
  int64_t prev = 0;
  for (size_t i = 1; i < cu.size(); ++i) {
    const std::string p = fmt::format("cu_seqlens[{}]", i);
    const int64_t end = integer(cu[i], p, 0, kMaxTokens * int64_t(kMaxStreams));
    if (end <= prev)
      throw bad(p, fmt::format("expected more than cu_seqlens[{}] = {} (stream {} needs at least one token), "
                               "found {}", i - 1, prev, i - 1, end));
    const int64_t count = end - prev;
    if (count > kMaxTokens)
      throw bad(p, fmt::format("stream {} has {} tokens, at most {}", i - 1, count, kMaxTokens));
    const std::string kp = fmt::format("kv_lens[{}]", i - 1);
    const int64_t kv_len = integer(kv[i - 1], kp, 1, 2 * kMaxTokens);
    if (kv_len < count)
      throw bad(kp, fmt::format("expected at least the stream's token count {} (cu_seqlens[{}] - cu_seqlens[{}]), "
                                "found {}: kv_len counts the chunk's tokens too", count, i, i - 1, kv_len));
    if (kv_len - count > kMaxTokens)
      throw bad(kp, fmt::format("chunk_start {} (kv_len - count) is more than {}", kv_len - count, kMaxTokens));
    StreamSpec st;
    st.chunk_start = int(kv_len - count);
    st.tokens = int(count);
    out.push_back(st);
    prev = end;
  }
  return out;
}

}  // namespace pb
