// Whole-file reads and writes for tests: logs a child process writes, inputs
// a test lays out for the program under test.
#ifndef BUBBLEWATCH_TESTS_TESTING_FILES_H_
#define BUBBLEWATCH_TESTS_TESTING_FILES_H_

#include <string>

#include "absl/strings/string_view.h"

namespace bubblewatch::testing {

// Every byte of the file at `path` as it is now (binary: no newline
// translation), or "" if it does not exist or cannot be read. Not a test
// failure: tests poll logs that their child has not created yet.
std::string ReadFile(const std::string& path);

// Replaces the file at `path` with exactly `bytes` (created if missing,
// truncated if not). A failure to write it all is a test failure
// (ADD_FAILURE), since the test's input would be missing.
void WriteFile(const std::string& path, absl::string_view bytes);

// Writes `bytes` to a new file named `name`, prefixed with the process id
// (tests of one binary run in parallel, each its own process),
// in GoogleTest's temporary directory, and returns its path.
std::string WriteUniqueTempFile(const std::string& name,
                                absl::string_view bytes);

// The path of `relative` under the real traces in tests/testdata/real/.
// Inline: BUBBLEWATCH_TESTDATA_DIR is defined per test binary.
#ifdef BUBBLEWATCH_TESTDATA_DIR
inline std::string RealTrace(absl::string_view relative) {
  return std::string(BUBBLEWATCH_TESTDATA_DIR) + "/real/" +
         std::string(relative);
}
#endif

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_TESTING_FILES_H_
