#include "tests/testing/big_input.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace bubblewatch::testing {
namespace {

// A "Name:   123 kB" line of /proc/self/status, in bytes; -1 if unknown.
int64_t ProcStatusBytes(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  int64_t kib = -1;
  const size_t n = std::strlen(field);
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') {
      kib = std::strtoll(line + n + 1, nullptr, 10);
    }
  }
  std::fclose(f);
  return kib < 0 ? -1 : kib * 1024;
}

}  // namespace

void WriteGzipKernels(const std::string& path, int64_t kernels) {
  FILE* out = std::fopen(path.c_str(), "wb");
  if (out == nullptr) {
    ADD_FAILURE() << "cannot create " << path;
    return;
  }
  z_stream zs{};
  if (deflateInit2(&zs, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    ADD_FAILURE() << "deflateInit2 failed";
    std::fclose(out);
    return;
  }
  std::string buffer(1 << 16, '\0');
  bool written = true;
  auto feed = [&](const std::string& in, int flush) {
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = static_cast<uInt>(in.size());
    do {
      zs.next_out = reinterpret_cast<Bytef*>(buffer.data());
      zs.avail_out = static_cast<uInt>(buffer.size());
      deflate(&zs, flush);
      const size_t n = buffer.size() - zs.avail_out;
      written &= std::fwrite(buffer.data(), 1, n, out) == n;
    } while (zs.avail_out == 0);
  };
  feed("{\"traceEvents\": [\n", Z_NO_FLUSH);
  std::string piece;
  for (int64_t i = 0; i < kernels; ++i) {
    absl::StrAppend(&piece, i == 0 ? "" : ",\n",
                    R"({"ph": "X", "cat": "kernel", "name": "k", "ts": )",
                    2 * i + 1000,
                    R"(, "dur": 1, "pid": 0, "tid": 7, "args": {"device": 0, )"
                    R"("stream": 7}})");
    if (piece.size() > (1 << 16)) {
      feed(piece, Z_NO_FLUSH);
      piece.clear();
    }
  }
  piece += "\n]}\n";
  feed(piece, Z_FINISH);
  deflateEnd(&zs);
  written &= std::fclose(out) == 0;
  if (!written) ADD_FAILURE() << "cannot write " << path;
}

void WriteGzipWithBlanks(const std::string& path, absl::string_view prefix,
                         uint64_t blanks, absl::string_view suffix) {
  FILE* out = std::fopen(path.c_str(), "wb");
  if (out == nullptr) {
    ADD_FAILURE() << "cannot create " << path;
    return;
  }
  z_stream zs{};
  if (deflateInit2(&zs, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_RLE) != Z_OK) {
    ADD_FAILURE() << "deflateInit2 failed";
    std::fclose(out);
    return;
  }
  const std::string spaces(1 << 20, ' ');
  std::string buffer(1 << 16, '\0');
  bool written = true;
  auto feed = [&](absl::string_view in, int flush) {
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = static_cast<uInt>(in.size());
    do {
      zs.next_out = reinterpret_cast<Bytef*>(buffer.data());
      zs.avail_out = static_cast<uInt>(buffer.size());
      deflate(&zs, flush);
      const size_t n = buffer.size() - zs.avail_out;
      written &= std::fwrite(buffer.data(), 1, n, out) == n;
    } while (zs.avail_out == 0);
  };
  feed(prefix, Z_NO_FLUSH);
  for (uint64_t left = blanks; left > 0;) {
    const uint64_t n = std::min<uint64_t>(left, spaces.size());
    feed(absl::string_view(spaces).substr(0, n), Z_NO_FLUSH);
    left -= n;
  }
  feed(suffix, Z_FINISH);
  deflateEnd(&zs);
  written &= std::fclose(out) == 0;
  if (!written) ADD_FAILURE() << "cannot write " << path;
}

PeakRssGrowth::PeakRssGrowth() {
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    reset_ = std::fputs("5", f) >= 0;
    reset_ = std::fclose(f) == 0 && reset_;
  }
  base_ = ProcStatusBytes(reset_ ? "VmRSS" : "VmHWM");
}

int64_t PeakRssGrowth::bytes() const {
  return ProcStatusBytes("VmHWM") - base_;
}

}  // namespace bubblewatch::testing
