#include "tests/testing/command_flags.h"

#include <algorithm>

#include "absl/strings/match.h"

namespace bubblewatch::testing {

void SetFlags(std::vector<std::string>& args,
              const std::vector<std::string>& flags) {
  for (size_t i = 0; i < flags.size(); ++i) {
    const std::string& flag = flags[i];
    const bool has_value = i + 1 < flags.size() &&
                           !absl::StartsWith(flags[i + 1], "--") &&
                           flags[i + 1] != "-X";
    if (flag == "-X" || flag == "--property" || !absl::StartsWith(flag, "--")) {
      args.push_back(flag);
      if (i + 1 < flags.size()) args.push_back(flags[++i]);
      continue;
    }
    auto it = std::find(args.begin(), args.end(), flag);
    if (it == args.end()) {
      args.push_back(flag);
      if (has_value) args.push_back(flags[++i]);
      continue;
    }
    if (has_value) {
      ++i;
      if (it + 1 != args.end()) {
        *(it + 1) = flags[i];
      } else {
        args.push_back(flags[i]);
      }
    }
  }
}

}  // namespace bubblewatch::testing
