// number_format.h: how the report table and the compare table print figures
// and times, so both read the same way.
#pragma once
#include <fmt/format.h>

#include <cmath>
#include <string>

namespace pb {

// A figure: "nan", "inf", "0" or three significant digits ("2.69e-03").
inline std::string format_figure(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0";
  return fmt::format("{:.2e}", v);
}

// Milliseconds with about five significant digits.
inline std::string format_ms(double v) {
  if (!std::isfinite(v)) return format_figure(v);
  if (v >= 1000) return fmt::format("{:.1f}", v);
  if (v >= 100) return fmt::format("{:.2f}", v);
  if (v >= 10) return fmt::format("{:.3f}", v);
  return fmt::format("{:.4f}", v);
}

}  // namespace pb
