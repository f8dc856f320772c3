// report_junit.h: the JUnit XML report of a set of runs (`run --junit FILE`), the
// shape CI servers (Jenkins, GitLab, GitHub test reporters) read: <testsuites>,
// one <testsuite> per run (name "SCENARIO [BACKEND]"), one <testcase> per check
// (classname "prefill-bench.SCENARIO", name = the check's name). A failing check
// holds <failure message="..."> with its findings as text; a check that did not
// run holds <skipped message="why"/>. Every attribute and text is XML-escaped,
// and what XML 1.0 cannot hold (control characters, invalid UTF-8) becomes U+FFFD.
#pragma once
#include <string>
#include <vector>

#include "run.h"

namespace pb {

struct JunitOptions {
  std::string timestamp;  // "YYYY-MM-DDTHH:MM:SS" (UTC); empty: now
  std::string hostname;   // empty: this machine's
};

std::string junit_xml(const std::vector<RunResult>& runs, const JunitOptions& options = {});

// Writes junit_xml() to `path` (a missing parent directory is made); throws
// std::runtime_error naming the path when it cannot be written.
void write_junit(const std::string& path, const std::vector<RunResult>& runs,
                 const JunitOptions& options = {});

// `text` escaped for XML 1.0 text and attribute values (& < > " ' and, for
// attributes, tab / newline / carriage return as character references).
std::string xml_escape(const std::string& text, bool attribute);

}  // namespace pb
