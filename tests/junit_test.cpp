// junit_test.cpp: the JUnit XML of `run --junit`: well-formed and of the common
// JUnit shape (tests/validate_junit.py, xml.etree plus structural assertions;
// skipped without /usr/bin/python3), counts equal to the checks, failing checks
// with their findings, not-run checks skipped with the reason, and hostile text
// (markup, quotes, control characters, invalid UTF-8) escaped so that it reads
// back as what was meant.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/test_util.h"
#include <nlohmann/json.hpp>

#include "lib/report_junit.h"
#include "lib/scenario.h"

namespace pb {
namespace {

using pb::test::run_command;

std::string temp_path(const std::string& name) {
  return fmt::format("{}pb_junit_test_{}_{}", ::testing::TempDir(), getpid(), name);
}

bool have_python() { return access("/usr/bin/python3", X_OK) == 0; }

// validate_junit.py on `xml`; the parsed report (--dump) when it is valid.
nlohmann::json validate(const std::string& xml, const char* name) {
  const std::string path = temp_path(name);
  {
    std::ofstream f(path, std::ios::binary);
    f << xml;
  }
  std::string out;
  const int rc = run_command(fmt::format("/usr/bin/python3 '{}/tests/validate_junit.py' '{}' --dump 2>&1",
                                         pb::test::source_dir(), path), &out);
  std::remove(path.c_str());
  EXPECT_EQ(rc, 0) << out << "\n" << xml;
  if (rc != 0) return nullptr;
  return nlohmann::json::parse(out);
}

RunResult hand_run() {
  RunResult r;
  r.scenario_path = "scenarios/smoke.yaml";
  r.scenario_name = "smoke";
  r.backend = "host";
  r.device.name = "host CPU";
  r.wall_s = 0.25;
  for (const std::string& n : all_check_names()) {
    CheckResult c;
    c.name = n;
    r.checks.push_back(c);
  }
  r.checks[3].fail(0, 2, "stream 2 (chunk_start 0, kv_len 1, 1 blocks): 1 of 1 output rows NaN");
  r.checks[3].fail(0, 1, "stream 1: reads block 12 it does not own");
  r.checks[3].findings.resize(2);
  r.checks[3].finding_count = 5;
  r.checks[6].ran = false;
  r.checks[6].not_run_why = "no MRoPE in this scenario";
  return r;
}

TEST(Junit, ShapeCountsFailuresAndSkips) {
  if (!have_python()) GTEST_SKIP() << "/usr/bin/python3 missing: cannot validate the XML";
  RunResult other = hand_run();
  other.backend = "cuda";
  other.checks[3] = CheckResult{};
  other.checks[3].name = kCheckCausalBound;
  const std::string xml = junit_xml({hand_run(), other}, {"2024-05-01T12:00:00", "ci-host"});
  std::cout << xml;
  const nlohmann::json j = validate(xml, "shape.xml");
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j.at("attrib").at("tests"), std::to_string(2 * all_check_names().size()));
  EXPECT_EQ(j.at("attrib").at("failures"), "1");
  EXPECT_EQ(j.at("attrib").at("skipped"), "2");
  ASSERT_EQ(j.at("testsuites").size(), 2u);
  const nlohmann::json& s = j.at("testsuites")[0];
  EXPECT_EQ(s.at("name"), "smoke [host]");
  EXPECT_EQ(j.at("testsuites")[1].at("name"), "smoke [cuda]");
  EXPECT_EQ(s.at("attrib").at("timestamp"), "2024-05-01T12:00:00");
  EXPECT_EQ(s.at("attrib").at("hostname"), "ci-host");
  EXPECT_EQ(s.at("attrib").at("time"), "0.250");
  EXPECT_EQ(s.at("properties").at("backend"), "host");
  const nlohmann::json& cases = s.at("testcases");
  ASSERT_EQ(cases.size(), all_check_names().size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(cases[i].at("classname"), "prefill-bench.smoke");
    EXPECT_EQ(cases[i].at("name"), all_check_names()[i]);
  }
  EXPECT_EQ(cases[0].at("outcome"), "passed");
  const nlohmann::json& causal = cases[3];
  EXPECT_EQ(causal.at("outcome"), "failure");
  EXPECT_EQ(causal.at("message"),
            "causal_bound failed: 5 findings; first: layer 0 stream 2: stream 2 (chunk_start 0, kv_len 1, 1 "
            "blocks): 1 of 1 output rows NaN");
  EXPECT_EQ(causal.at("text"),
            "layer 0 stream 2: stream 2 (chunk_start 0, kv_len 1, 1 blocks): 1 of 1 output rows NaN\n"
            "layer 0 stream 1: stream 1: reads block 12 it does not own\n(+3 more findings)\n");
  EXPECT_EQ(cases[6].at("outcome"), "skipped");
  EXPECT_EQ(cases[6].at("message"), "no MRoPE in this scenario");
}

TEST(Junit, EscapesHostileText) {
  EXPECT_EQ(xml_escape("a<b>&\"c'", true), "a&lt;b&gt;&amp;&quot;c&apos;");
  EXPECT_EQ(xml_escape("a<b>&\"c'", false), "a&lt;b&gt;&amp;\"c'");
  EXPECT_EQ(xml_escape("x\ny\tz", true), "x&#10;y&#9;z");
  EXPECT_EQ(xml_escape("x\ny", false), "x\ny");
  EXPECT_EQ(xml_escape(std::string("bell\x07") + "\xff" + "]]>", false), "bell\xEF\xBF\xBD\xEF\xBF\xBD]]&gt;");
  EXPECT_EQ(xml_escape("caf\xC3\xA9 \xE2\x9C\x93", false), "caf\xC3\xA9 \xE2\x9C\x93");  // valid UTF-8 kept
  EXPECT_EQ(xml_escape("\xC0\xAF", false), "\xEF\xBF\xBD\xEF\xBF\xBD");                 // overlong '/'
  EXPECT_EQ(xml_escape("\xED\xA0\x80", false), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate

  if (!have_python()) GTEST_SKIP() << "/usr/bin/python3 missing: cannot validate the XML";
  RunResult r = hand_run();
  r.scenario_name = "odd <name> & \"quotes\" 'too'";
  r.checks[3].findings[0].message = "found </failure><x a=\"1\"> & ]]> \x01 bytes \xfe and caf\xC3\xA9\nline two";
  r.checks[6].not_run_why = "why: <none> & \"none\"";
  const nlohmann::json j = validate(junit_xml({r}), "hostile.xml");
  ASSERT_FALSE(j.is_null());
  const nlohmann::json& s = j.at("testsuites")[0];
  EXPECT_EQ(s.at("name"), "odd <name> & \"quotes\" 'too' [host]");
  EXPECT_EQ(s.at("testcases")[3].at("classname"), "prefill-bench.odd <name> & \"quotes\" 'too'");
  const std::string text = s.at("testcases")[3].at("text");
  EXPECT_EQ(text.substr(0, text.find('\n', text.find("line two"))),
            "layer 0 stream 2: found </failure><x a=\"1\"> & ]]> \xEF\xBF\xBD bytes \xEF\xBF\xBD and "
            "caf\xC3\xA9\nline two");
  const std::string message = s.at("testcases")[3].at("message");
  EXPECT_NE(message.find("found </failure><x a=\"1\"> & ]]>"), std::string::npos) << message;
  EXPECT_NE(message.find("caf\xC3\xA9\nline two"), std::string::npos) << message;  // &#10; kept the newline
  EXPECT_EQ(s.at("testcases")[6].at("message"), "why: <none> & \"none\"");
}

// A real run with a fault: the check it trips is a <failure> naming the stream.
TEST(Junit, RealRunWithAFault) {
  if (!have_python()) GTEST_SKIP() << "/usr/bin/python3 missing: cannot validate the XML";
  const Scenario s = load_scenario(pb::test::source_dir() + "/scenarios/smoke.yaml");
  RunOptions o;
  o.backend = "host";
  o.inject.add(Fault::kv_lens_max);
  const RunResult r = run_scenario(s, o);
  const std::string path = temp_path("real.xml");
  write_junit(path, {r});
  std::ifstream in(path);
  const std::string xml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  const nlohmann::json j = validate(xml, "real.xml");
  ASSERT_FALSE(j.is_null());
  const nlohmann::json& cases = j.at("testsuites")[0].at("testcases");
  bool causal_failed = false;
  for (const nlohmann::json& c : cases)
    if (c.at("name") == kCheckCausalBound) {
      causal_failed = c.at("outcome") == "failure";
      EXPECT_NE(c.at("text").get<std::string>().find("stream 2"), std::string::npos) << c.dump();
    }
  EXPECT_TRUE(causal_failed) << j.dump(2);
  EXPECT_EQ(j.at("testsuites")[0].at("properties").at("faults_injected"), "kv-lens-max");
}

// The validator itself rejects what CI servers would choke on.
TEST(Junit, ValidatorRejectsBadShapes) {
  if (!have_python()) GTEST_SKIP() << "/usr/bin/python3 missing";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"not xml", "<testsuites><testsuite"},
      {"count", "<?xml version=\"1.0\"?><testsuites tests=\"2\" failures=\"0\" errors=\"0\">"
                "<testsuite name=\"s\" tests=\"2\" failures=\"0\" errors=\"0\" time=\"0\">"
                "<testcase classname=\"c\" name=\"n\"/></testsuite></testsuites>"},
      {"no message", "<?xml version=\"1.0\"?><testsuites tests=\"1\" failures=\"1\" errors=\"0\">"
                     "<testsuite name=\"s\" tests=\"1\" failures=\"1\" errors=\"0\" time=\"0\">"
                     "<testcase classname=\"c\" name=\"n\"><failure/></testcase></testsuite></testsuites>"},
  };
  for (const auto& [what, xml] : bad) {
    const std::string path = temp_path("bad.xml");
    {
      std::ofstream f(path, std::ios::binary);
      f << xml;
    }
    std::string out;
    EXPECT_EQ(run_command(fmt::format("/usr/bin/python3 '{}/tests/validate_junit.py' '{}' 2>&1", pb::test::source_dir(), path),
                          &out), 1)
        << what << ": " << out;
    std::remove(path.c_str());
  }
}

}  // namespace
}  // namespace pb
