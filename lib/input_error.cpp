// input_error.cpp: formatting of located input errors.
#include "input_error.h"

namespace pb {

std::string located(const std::string& file, Mark mark, const std::string& field,
                    const std::string& what) {
  std::string s = file;
  if (mark.line > 0) s += ":" + std::to_string(mark.line) + ":" + std::to_string(mark.column);
  s += ": ";
  if (!field.empty()) s += field + ": ";
  return s + what;
}

}  // namespace pb
