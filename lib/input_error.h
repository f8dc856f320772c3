// input_error.h: the one error type for bad input (a scenario file, a flag).
// The message is complete and located: "FILE:LINE:COL: FIELD: expected X, found Y".
// apps/ turn it into exit code 2; nothing has run when it is thrown.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

namespace pb {

struct Mark {
  int line = 0;    // 1-based; 0 when unknown
  int column = 0;  // 1-based
};

// One problem, or several (validate reports every problem of a file): what() is
// every problem, one per line; problems() lists them.
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message)
      : std::runtime_error(message), problems_{message} {}
  explicit InputError(const std::vector<std::string>& problems)
      : std::runtime_error(join_lines(problems)), problems_(problems) {}
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  static std::string join_lines(const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& p : v) s += (s.empty() ? "" : "\n") + p;
    return s;
  }
  std::vector<std::string> problems_;
};

// "FILE:LINE:COL: FIELD: WHAT" (line/col left out when the mark is unknown).
std::string located(const std::string& file, Mark mark, const std::string& field,
                    const std::string& what);

}  // namespace pb
