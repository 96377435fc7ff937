#include "base/logging.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace bubblewatch {

absl::Status InitLogging(absl::string_view level) {
  spdlog::level::level_enum parsed =
      spdlog::level::from_str(std::string(level));
  // from_str maps unknown names to `off`; only accept "off" when asked for.
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown log level '", level,
                     "' (want trace, debug, info, warn, error or off)"));
  }
  auto logger = spdlog::get("bubblewatch");
  if (logger == nullptr) logger = spdlog::stderr_logger_mt("bubblewatch");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  logger->set_level(parsed);
  spdlog::set_default_logger(std::move(logger));
  return absl::OkStatus();
}

}  // namespace bubblewatch
