// trace.h: NVTX3 ranges in the "prefill-bench" domain, so an Nsight Systems
// timeline reads like the report (scenario > stage/upload > layer > kernel >
// reference/checks). A build without CUDA compiles them to nothing. NVTX costs
// next to nothing when no tool is attached.
#pragma once
#include <string>

#if defined(PB_HAVE_NVTX)
#include <nvtx3/nvtx3.hpp>
namespace pb {
struct nvtx_domain {
  static constexpr const char* name{"prefill-bench"};
};
class TraceRange {
 public:
  explicit TraceRange(const std::string& what) : range_(nvtx3::message{what.c_str()}) {}
 private:
  nvtx3::scoped_range_in<nvtx_domain> range_;
};
}  // namespace pb
#else
namespace pb {
class TraceRange {
 public:
  explicit TraceRange(const std::string&) {}
};
}  // namespace pb
#endif
