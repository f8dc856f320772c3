// sha256.h: SHA-256 (FIPS 180-4) of a byte string or a file, as lowercase hex;
// the reports record the kernel library's file by it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace pb {

std::string sha256_hex(const void* data, size_t bytes);
// Throws std::runtime_error naming the path when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace pb
