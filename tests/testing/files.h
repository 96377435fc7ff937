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

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_TESTING_FILES_H_
