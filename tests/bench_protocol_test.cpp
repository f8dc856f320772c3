// bench_protocol_test.cpp: the benchmark programs' timing-protocol flags
// (bench/bench_protocol.h): each flag sets its value and leaves the argument list,
// every other argument stays for Google Benchmark in order, and a bad or missing value
// is refused with the flag named.
#include "bench/bench_protocol.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

struct Args {
  std::vector<std::string> text;
  std::vector<char*> ptrs;
  int argc = 0;
  explicit Args(std::vector<std::string> a) : text(std::move(a)) {
    for (auto& s : text) ptrs.push_back(s.data());
    ptrs.push_back(nullptr);
    argc = static_cast<int>(text.size());
  }
  std::vector<std::string> left() const { return {ptrs.begin(), ptrs.begin() + argc}; }
};

TEST(BenchProtocol, DefaultsAreDeviceBenchValues) {
  const BenchProtocol p;
  EXPECT_EQ(p.rest_ms, 250);
  EXPECT_EQ(p.warmup, 3);
  EXPECT_EQ(p.samples, 20);
  EXPECT_TRUE(p.l2_cold);
}

TEST(BenchProtocol, FlagsSetTheirValuesAndLeaveTheRestInOrder) {
  Args a({"prog", "--benchmark_filter=x", "--rest-ms", "0", "--warmup", "1", "--samples", "7", "--l2", "hot",
          "--benchmark_out=o.json"});
  BenchProtocol p;
  std::string err;
  ASSERT_TRUE(parse_bench_protocol(a.argc, a.ptrs.data(), p, err)) << err;
  EXPECT_EQ(p.rest_ms, 0);
  EXPECT_EQ(p.warmup, 1);
  EXPECT_EQ(p.samples, 7);
  EXPECT_FALSE(p.l2_cold);
  EXPECT_EQ(a.left(), (std::vector<std::string>{"prog", "--benchmark_filter=x", "--benchmark_out=o.json"}));
  EXPECT_EQ(a.ptrs[a.argc], nullptr);
}

TEST(BenchProtocol, NoFlagsChangeNothing) {
  Args a({"prog", "--export", "dir"});
  BenchProtocol p;
  p.samples = 5;
  std::string err;
  ASSERT_TRUE(parse_bench_protocol(a.argc, a.ptrs.data(), p, err));
  EXPECT_EQ(p.samples, 5);
  EXPECT_EQ(a.left(), (std::vector<std::string>{"prog", "--export", "dir"}));
}

TEST(BenchProtocol, BadValuesAreRefusedWithTheFlagNamed) {
  const std::vector<std::vector<std::string>> bad = {
      {"prog", "--samples", "0"},   {"prog", "--samples", "x"},  {"prog", "--warmup", "-1"},
      {"prog", "--rest-ms", "1.5"}, {"prog", "--l2", "warm"},    {"prog", "--samples"},
      {"prog", "--warmup", ""},     {"prog", "--samples", "100001"}};
  for (const auto& v : bad) {
    Args a(v);
    BenchProtocol p;
    std::string err;
    EXPECT_FALSE(parse_bench_protocol(a.argc, a.ptrs.data(), p, err)) << v.back();
    EXPECT_NE(err.find(v[1]), std::string::npos) << err;
  }
}

}  // namespace
