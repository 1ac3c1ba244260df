// Errors and string helpers shared by every layer.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace hfx {

// Every user-facing failure is an Error whose message is one line saying what and where.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

template <class... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(str(args...));
}

// Internal invariant: a failure here is a bug in hfexport, not bad input.
#define HFX_CHECK(cond, ...)                                                            \
  do {                                                                                  \
    if (!(cond)) ::hfx::fail("internal error: ", #cond, " (", __FILE__, ":", __LINE__, \
                             ") " __VA_OPT__(, ) __VA_ARGS__);                          \
  } while (0)

}  // namespace hfx
