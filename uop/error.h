// kiln::Error and friends: how every layer reports a problem.
//
//   throw Error(cat("reshape: cannot view shape ", shape, " as ", target, "; sizes differ"));
//   KILN_ASSERT(node->src.size() == 2, "binary ALU ops have two sources");
//
// Error is for what a user can fix (bad shapes, bad files, bad environment); its message names the
// operation, the values involved and the fix. InternalError is a broken invariant inside kiln: a bug,
// reported with the invariant and where it was checked. Neither is ever swallowed.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InternalError : public Error {
 public:
  using Error::Error;
};

// cat("a", 1, 'b') -> "a1b": the message builder used for errors (libstdc++ 12 has no <format>).
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

[[noreturn]] void throw_internal(const char* invariant, const std::string& detail, const char* file, int line);

}  // namespace kiln

// Checks an invariant of kiln itself (not of user input) in every build type.
#define KILN_ASSERT(cond, ...)                                                                    \
  do {                                                                                            \
    if (!(cond)) ::kiln::throw_internal(#cond, ::kiln::cat(__VA_ARGS__), __FILE__, __LINE__); \
  } while (0)
