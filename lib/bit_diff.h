// bit_diff.h: how many elements of two arrays differ bit for bit, and the first
// one, for the checks that hold one read-back of a layer to another (determinism,
// buffer_guard's prepare probe). Arrays of different sizes differ in every element
// of the longer one.
#pragma once
#include <algorithm>
#include <cstring>
#include <vector>

namespace pb {

template <typename T>
long long count_bit_diff(const std::vector<T>& a, const std::vector<T>& b, size_t* first = nullptr) {
  if (a.size() != b.size()) return static_cast<long long>(std::max(a.size(), b.size()));
  long long n = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0 && n++ == 0 && first) *first = i;
  return n;
}

}  // namespace pb
