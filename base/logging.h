// Process-wide logging setup. bubblewatch logs through spdlog (Debian's
// libspdlog-dev): Abseil 20220623 has no absl/log.
//
// Logs go to stderr so that stdout stays machine-readable (reports, JSON).
#ifndef BUBBLEWATCH_BASE_LOGGING_H_
#define BUBBLEWATCH_BASE_LOGGING_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {

// Configures the default logger: stderr, "[time] [level] message".
// `level` is one of trace, debug, info, warn, error, off.
// Returns kInvalidArgument for an unknown level.
absl::Status InitLogging(absl::string_view level);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_BASE_LOGGING_H_
