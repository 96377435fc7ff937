// The private directory a RocksDB secondary instance needs for its info log.
#ifndef BUBBLEWATCH_STORAGE_SECONDARY_DIR_H_
#define BUBBLEWATCH_STORAGE_SECONDARY_DIR_H_

#include <string>

#include "absl/status/statusor.h"

namespace bubblewatch {

// Creates a fresh directory "bubblewatch-secondary-<pid>-XXXXXX" under the
// system temp dir and returns its path; the caller removes it when done.
// First removes such directories left by processes that no longer exist
// (a reader killed with SIGKILL cannot clean up after itself).
// Errors: kUnavailable if the directory cannot be created.
absl::StatusOr<std::string> MakeSecondaryDir();

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_STORAGE_SECONDARY_DIR_H_
