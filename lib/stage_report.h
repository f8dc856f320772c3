// stage_report.h: the text `prefill-bench stage FILE` prints: each staged
// field's offset, size, element count and first values, and the batch scalars.
#pragma once
#include <string>

#include "scenario.h"

namespace pb {

// Generates and stages the scenario's batch on a host image (base address 0,
// so pointer values read as arena offsets) and describes the layout.
std::string describe_staging(const Scenario& s, FaultSet faults);

}  // namespace pb
