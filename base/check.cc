#include "base/check.h"

#include <cstdio>
#include <cstdlib>

namespace bubblewatch::check_internal {

void CheckFailed(const char* condition, const char* file, int line) {
  // stdio, not spdlog: this must work before logging is set up and must not
  // depend on the state that just proved inconsistent.
  std::fprintf(stderr, "%s:%d: check failed: %s\n", file, line, condition);
  std::fflush(stderr);
  std::abort();
}

}  // namespace bubblewatch::check_internal
