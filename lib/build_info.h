// build_info.h: what the report records about this build (written at build time).
#pragma once

namespace pb {
const char* git_revision();  // short hash, "-dirty" when tracked files changed
const char* build_flags();   // build type, compiler flags, CUDA architectures
const char* tool_version();
}  // namespace pb
