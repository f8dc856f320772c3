// test_util.h: helpers several test files share.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace pb::test {

// The source tree whose scenarios/ and tests/ the tests read: $PB_SOURCE_DIR when set (a
// pb_tests binary carried to another machine, run from a checkout there), else the tree it
// was built from.
inline std::string source_dir() {
  const char* env = std::getenv("PB_SOURCE_DIR");
  return env && *env ? env : PB_SOURCE_DIR;
}

// A file of that tree: source_path("scenarios/smoke.yaml").
inline std::string source_path(const std::string& rel) { return source_dir() + "/" + rel; }

// Runs `command` in the shell; returns its exit status (-1 when it did not
// exit normally) and appends what it printed to `output` (stderr too unless
// the command redirects it itself).
inline int run_command(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) output->append(buf, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace pb::test
