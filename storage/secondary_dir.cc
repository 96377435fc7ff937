#include "storage/secondary_dir.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace bubblewatch {
namespace {

constexpr absl::string_view kPrefix = "bubblewatch-secondary-";

// Removes kPrefix<pid>-* directories whose process is gone. A directory of a
// live process (or one we may not signal) is left alone.
void RemoveStaleDirs(const std::filesystem::path& tmp) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(tmp, ec)) {
    const std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, kPrefix)) continue;
    absl::string_view rest = absl::string_view(name).substr(kPrefix.size());
    const size_t dash = rest.find('-');
    int pid = 0;
    if (dash == absl::string_view::npos ||
        !absl::SimpleAtoi(rest.substr(0, dash), &pid) || pid <= 0) {
      continue;
    }
    if (kill(pid, 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      std::filesystem::remove_all(entry.path(), ignored);
    }
  }
}

}  // namespace

absl::StatusOr<std::string> MakeSecondaryDir() {
  std::error_code ec;
  std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  if (ec) tmp = "/tmp";
  RemoveStaleDirs(tmp);
  std::string pattern =
      (tmp / absl::StrCat(kPrefix, getpid(), "-XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot create a secondary instance directory like ",
                     pattern, ": ", std::generic_category().message(errno)));
  }
  return pattern;
}

}  // namespace bubblewatch
