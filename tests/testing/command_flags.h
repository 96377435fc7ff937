// Adding flags to a command line a shared helper built (ProcessArgs and
// the like): `bubblewatch` refuses a single-valued flag given twice (exit
// 2), so a test that wants another value must replace it, not append it.
#ifndef BUBBLEWATCH_TESTS_TESTING_COMMAND_FLAGS_H_
#define BUBBLEWATCH_TESTS_TESTING_COMMAND_FLAGS_H_

#include <string>
#include <vector>

namespace bubblewatch::testing {

// Adds `flags` to `args`. `flags` holds "--name" "value" pairs, lone
// "--name" boolean flags (followed by another "--" flag, by "-X" or
// last), and
// "-X" "key=value" pairs. A "--name" that `args` has already gets the new
// value in its place (a boolean one stays once); "-X" pairs and new flags
// are appended. "--name=value" forms are not looked for.
void SetFlags(std::vector<std::string>& args,
              const std::vector<std::string>& flags);

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_TESTING_COMMAND_FLAGS_H_
