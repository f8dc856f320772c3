// diff_stats.h: accumulates the figures of one compared region (a stream in a
// layer): max |got - hp|, relative L2 against hp, max |lp - hp| (the
// same-precision drift the tolerance is built from) and non-finite outputs
// where the reference is finite.
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "check_result.h"
#include "scenario.h"

namespace pb {

class DiffStats {
 public:
  void add(double got, double hp, double lp) {
    if (!std::isfinite(hp)) return;
    ++elements_;
    if (!std::isfinite(got)) {
      ++nonfinite_;
      return;
    }
    const double e = std::abs(got - hp);
    max_abs_ = std::max(max_abs_, e);
    err2_ += e * e;
    ref2_ += hp * hp;
    lowp_ = std::max(lowp_, std::abs(lp - hp));
  }
  // The figure, judged by FlashAttention's rule: max_abs <= factor * lowp + atol, all finite.
  Figure figure(int layer, int stream, const char* what, const Tolerance& tol) const {
    Figure f;
    f.layer = layer;
    f.stream = stream;
    f.what = what;
    f.max_abs = max_abs_;
    f.rel_l2 = ref2_ > 0 ? std::sqrt(err2_ / ref2_) : std::sqrt(err2_);
    f.lowp_max_abs = lowp_;
    f.limit = tol.factor * lowp_ + tol.atol;
    f.nonfinite = nonfinite_;
    f.elements = elements_;
    f.pass = nonfinite_ == 0 && max_abs_ <= f.limit;
    return f;
  }

 private:
  double max_abs_ = 0, err2_ = 0, ref2_ = 0, lowp_ = 0;
  long long nonfinite_ = 0, elements_ = 0;
};

// What failed in a numeric figure: "max_abs 0.02 over limit 0.005 (rel_l2 ...)",
// or, when the finite values are within the limit, "12 nonfinite of 256 where the
// reference is finite (finite max_abs 1e-3 within limit 5e-3)".
inline std::string numeric_verdict(const Figure& f) {
  if (f.max_abs > f.limit)
    return fmt::format("max_abs {:.3g} over limit {:.3g} (rel_l2 {:.3g}{}{})", f.max_abs, f.limit, f.rel_l2,
                       has_counts(f) ? "; " : "", figure_counts(f));
  return fmt::format("{} where the reference is finite (finite max_abs {:.3g} within limit {:.3g})",
                     figure_counts(f), f.max_abs, f.limit);
}

}  // namespace pb
