// report.h: the two reports of a set of runs (docs/DESIGN.md "Reports"): a table for
// people (fmt, every line at most kReportWidth columns, colour only on request)
// and a JSON document for machines that lib/report_schema.json describes.
// Non-finite figures become JSON null; the schema allows null there.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run.h"

namespace pb {

// Bumped on any change of the JSON layout; lib/report_schema.json holds it as a const.
// 2: "verdict" (passed|failed|not_checked|error) beside "passed" on each run and the
// report, "error" on each run; "passed" is true only for the verdict passed. Figures name their
// counts: nonfinite, mismatched, never_written, read_poison.
constexpr int kReportSchemaVersion = 2;
// The table never writes a line wider than this (colour codes not counted).
constexpr int kReportWidth = 100;

// Per run: a header, the streams with their per-check verdicts, one summary per
// check with its worst figure and first findings, the kernel timings; then one
// line "N scenarios, M passed, K failed". ANSI colour only when `color`.
std::string format_table(const std::vector<RunResult>& runs, bool color);

// The report document: schema_version, tool (version, git revision, build
// flags), one entry per run, and the overall verdict.
nlohmann::json report_json(const std::vector<RunResult>& runs);

// Writes `report` (indented, one trailing newline) to `path`; throws
// std::runtime_error naming the path when it cannot be written.
void write_json(const std::string& path, const nlohmann::json& report);

}  // namespace pb
