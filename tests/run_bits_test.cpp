// run_bits_test.cpp: every script the README runs directly has its run bit:
// scripts/*.sh, scripts/*.py, tests/*.py and .ci/run. A script committed
// without it fails here instead of with "permission denied" on a user's machine.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>
#include "test_util.h"

namespace {

namespace fs = std::filesystem;

// The scripts (*.sh, *.py) of `dir` that lack the owner's execute bit.
std::vector<std::string> missing_run_bit(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".sh" && ext != ".py")) continue;
    if ((e.status().permissions() & fs::perms::owner_exec) == fs::perms::none)
      out.push_back(e.path().filename().string());
  }
  return out;
}

TEST(RunBits, EveryShippedScriptIsExecutable) {
  const fs::path root(pb::test::source_dir());
  for (const char* dir : {"scripts", "tests"})
    EXPECT_EQ(missing_run_bit(root / dir), std::vector<std::string>{})
        << dir << "/: git update-index --chmod=+x on these";
  EXPECT_NE(fs::status(root / ".ci/run").permissions() & fs::perms::owner_exec, fs::perms::none);
}

TEST(RunBits, FindsAScriptWithoutIt) {
  const fs::path dir = fs::temp_directory_path() / ("pb_run_bits_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char* name : {"ok.sh", "bad.sh", "bad.py", "notes.txt"}) std::ofstream(dir / name) << "#!/bin/sh\n";
  fs::permissions(dir / "ok.sh", fs::perms::owner_exec, fs::perm_options::add);
  for (const char* name : {"bad.sh", "bad.py", "notes.txt"})
    fs::permissions(dir / name, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                    fs::perm_options::remove);
  std::vector<std::string> missing = missing_run_bit(dir);
  std::sort(missing.begin(), missing.end());
  EXPECT_EQ(missing, (std::vector<std::string>{"bad.py", "bad.sh"}));
  fs::remove_all(dir);
}

}  // namespace
