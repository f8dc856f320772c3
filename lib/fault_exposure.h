// fault_exposure.h: whether a fault can show on a batch through the check it
// must trip, and why not when it cannot (e.g. mrope-hw-alias on a batch with no
// image token). The fault matrix uses it to say "cannot show" instead of
// passing a case that proves nothing.
#pragma once
#include <string>

#include "batch.h"
#include "faults.h"
#include "scenario.h"

namespace pb {

struct Exposure {
  bool can_show = true;
  std::string why_not;  // when !can_show
};

Exposure fault_exposure(Fault f, const Scenario& s, const Batch& batch);

}  // namespace pb
