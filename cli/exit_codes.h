// Process exit codes shared by every subcommand (each command's page in
// docs/ documents them).
#ifndef BUBBLEWATCH_CLI_EXIT_CODES_H_
#define BUBBLEWATCH_CLI_EXIT_CODES_H_

namespace bubblewatch {

inline constexpr int kExitOk = 0;
// A runtime failure: broker unreachable, undelivered events, store errors.
inline constexpr int kExitFailure = 1;
// The command line is wrong (unknown option, missing argument).
inline constexpr int kExitUsage = 2;
// An input file is missing, unreadable or malformed.
inline constexpr int kExitBadInput = 3;

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_CLI_EXIT_CODES_H_
