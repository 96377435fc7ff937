#include "storage/rocksdb_logger.h"

#include <cstdarg>
#include <cstdio>
#include <string>

#include "spdlog/spdlog.h"

namespace bubblewatch {
namespace {

class SpdlogRocksDbLogger : public rocksdb::Logger {
 public:
  // Everything from INFO up reaches Logv; spdlog's level filters the rest.
  SpdlogRocksDbLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL) {}

  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }

  void Logv(const rocksdb::InfoLogLevel level, const char* format,
            va_list ap) override {
    const spdlog::level::level_enum to = Level(level);
    if (!spdlog::should_log(to)) return;
    char buffer[1024];
    va_list copy;
    va_copy(copy, ap);
    const int n = std::vsnprintf(buffer, sizeof(buffer), format, copy);
    va_end(copy);
    if (n < 0) return;
    std::string line;
    if (static_cast<size_t>(n) < sizeof(buffer)) {
      line.assign(buffer, static_cast<size_t>(n));
    } else {
      line.resize(static_cast<size_t>(n) + 1);
      std::vsnprintf(line.data(), line.size(), format, ap);
      line.resize(static_cast<size_t>(n));
    }
    while (!line.empty() && line.back() == '\n') line.pop_back();
    spdlog::log(to, "rocksdb: {}", line);
  }

 private:
  static spdlog::level::level_enum Level(rocksdb::InfoLogLevel level) {
    switch (level) {
      case rocksdb::InfoLogLevel::WARN_LEVEL:
        return spdlog::level::warn;
      case rocksdb::InfoLogLevel::ERROR_LEVEL:
      case rocksdb::InfoLogLevel::FATAL_LEVEL:
        return spdlog::level::err;
      default:
        return spdlog::level::debug;
    }
  }
};

}  // namespace

std::shared_ptr<rocksdb::Logger> NewSpdlogRocksDbLogger() {
  return std::make_shared<SpdlogRocksDbLogger>();
}

}  // namespace bubblewatch
