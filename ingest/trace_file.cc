#include "ingest/trace_file.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace bubblewatch {
namespace {

absl::Status ErrnoStatus(absl::string_view what, absl::string_view path) {
  int err = errno;
  std::string message =
      absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

}  // namespace

bool HasGzipMagic(absl::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

bool HasSqliteMagic(absl::string_view bytes) {
  constexpr absl::string_view kMagic("SQLite format 3\0", 16);
  return bytes.substr(0, kMagic.size()) == kMagic;
}

absl::StatusOr<simdjson::padded_string> Gunzip(absl::string_view compressed) {
  z_stream zs{};
  // 16 + MAX_WBITS: expect a gzip header and trailer.
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    return absl::InternalError("zlib inflateInit2 failed");
  }
  std::string out;
  out.resize(compressed.size() * 4 + 4096);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  zs.avail_in = static_cast<uInt>(compressed.size());
  int rc = Z_OK;
  size_t produced = 0;
  while (true) {
    if (produced == out.size()) out.resize(out.size() * 2);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(out.size() - produced);
    rc = inflate(&zs, Z_NO_FLUSH);
    produced = out.size() - zs.avail_out;
    if (rc == Z_STREAM_END) {
      // Concatenated gzip members are legal; continue with the next one.
      if (zs.avail_in > 0 && inflateReset(&zs) == Z_OK) continue;
      break;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) break;  // Input ended early.
    if (rc == Z_BUF_ERROR) continue;
    std::string reason = zs.msg ? zs.msg : "corrupt data";
    inflateEnd(&zs);
    return absl::DataLossError(absl::StrCat("corrupt gzip stream: ", reason));
  }
  inflateEnd(&zs);
  if (rc != Z_STREAM_END) {
    return absl::DataLossError(absl::StrCat(
        "truncated gzip stream: it ends after ", compressed.size(),
        " compressed bytes (", produced, " decompressed) without its trailer"));
  }
  return simdjson::padded_string(out.data(), produced);
}

absl::StatusOr<simdjson::padded_string> LoadTraceFile(absl::string_view path) {
  std::string p(path);
  std::unique_ptr<FILE, FileCloser> f(std::fopen(p.c_str(), "rb"));
  if (!f) return ErrnoStatus("open", path);
  if (std::fseek(f.get(), 0, SEEK_END) != 0) return ErrnoStatus("seek", path);
  long size = std::ftell(f.get());
  if (size < 0) return ErrnoStatus("size", path);
  std::rewind(f.get());
  simdjson::padded_string raw(static_cast<size_t>(size));
  if (size > 0 && std::fread(raw.data(), 1, static_cast<size_t>(size),
                             f.get()) != static_cast<size_t>(size)) {
    return ErrnoStatus("read", path);
  }
  absl::string_view bytes(raw.data(), raw.size());
  if (HasGzipMagic(bytes)) return Gunzip(bytes);
  return raw;
}

}  // namespace bubblewatch
