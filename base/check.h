// Invariant checks: conditions the code itself guarantees, whose failure
// means a bug in bubblewatch, never bad input. Bad input (a corrupt record,
// a forged batch, a wrong flag) is a Status, never a crash.
//
//   BW_CHECK(cond)   always evaluated; on failure logs the condition and
//                    file:line to stderr and aborts. For cheap checks at
//                    seams where continuing would write wrong state (a
//                    snapshot, a window) that outlives the process.
//   BW_DCHECK(cond)  the same in debug builds; under NDEBUG the condition
//                    is not evaluated (it must have no side effects). For
//                    checks on hot paths or that cost a pass over data.
//
// Both are statements: `BW_CHECK(x > 0);`.
#ifndef BUBBLEWATCH_BASE_CHECK_H_
#define BUBBLEWATCH_BASE_CHECK_H_

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"

namespace bubblewatch::check_internal {

// Writes "file:line: check failed: condition" to stderr (unbuffered, so it
// survives the abort) and aborts.
[[noreturn]] ABSL_ATTRIBUTE_NOINLINE void CheckFailed(const char* condition,
                                                      const char* file,
                                                      int line);

}  // namespace bubblewatch::check_internal

#define BW_CHECK(cond)                                                       \
  do {                                                                       \
    if (ABSL_PREDICT_FALSE(!(cond))) {                                       \
      ::bubblewatch::check_internal::CheckFailed(#cond, __FILE__, __LINE__); \
    }                                                                        \
  } while (false)

#ifdef NDEBUG
// Not evaluated, but still compiled: the condition keeps type-checking and
// the names in it count as used.
#define BW_DCHECK(cond)        \
  do {                         \
    if (false) {               \
      static_cast<void>(cond); \
    }                          \
  } while (false)
#else
#define BW_DCHECK(cond) BW_CHECK(cond)
#endif

#endif  // BUBBLEWATCH_BASE_CHECK_H_
