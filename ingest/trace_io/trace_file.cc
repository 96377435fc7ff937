#include "ingest/trace_io/trace_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#if BUBBLEWATCH_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"

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

absl::StatusOr<FILE*> OpenRegularFile(absl::string_view path) {
  std::string p(path);
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer forever
  // (`analyze` of a FIFO hung). Only the open is non-blocking;
  // regular files ignore the flag for reads.
  const int fd = open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open", path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    absl::Status s = ErrnoStatus("stat", path);
    close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    const char* what = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot read ", path, ": ", what,
        "; a trace must be a regular file (its size is read first)"));
  }
  FILE* f = fdopen(fd, "rb");
  if (f == nullptr) {
    absl::Status s = ErrnoStatus("open", path);
    close(fd);
    return s;
  }
  return f;
}

absl::StatusOr<simdjson::padded_string> LoadTraceFile(absl::string_view path) {
  ASSIGN_OR_RETURN(FILE * file, OpenRegularFile(path));
  std::unique_ptr<FILE, FileCloser> f(file);
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

// Gunzip runs on a thread of its own, a few chunks ahead of the reader, so
// that decompressing and parsing overlap on two cores.
struct TraceByteSource::Gzip {
  z_stream zs{};
#if BUBBLEWATCH_HAVE_ISAL
  // ISA-L's inflate (2-3x zlib's speed) when built with it; zlib otherwise.
  inflate_state isal;
  bool input_ended = false;
#endif
  bool initialized = false;
  // The current member ended; the next byte, if any, starts another one.
  bool member_ended = false;
  std::unique_ptr<char[]> in;
  static constexpr size_t kInSize = 128 << 10;
  uint64_t inflated = 0;              // Bytes inflate produced.
  std::atomic<uint64_t> consumed{0};  // Compressed bytes inflate consumed.

  // Chunks decompressed ahead, and the reader's position in the first one.
  static constexpr size_t kChunkSize = 128 << 10;
  static constexpr size_t kChunksAhead = 2;
  std::mutex mu;
  std::condition_variable changed;
  std::deque<std::string> ready;
  // Chunks the reader is done with, reused so that each MiB is not a fresh
  // mmap to zero and fault in.
  std::vector<std::string> spare;
  absl::Status status;  // How the stream ended, once done.
  bool done = false;
  bool stop = false;
  std::string current;
  size_t current_pos = 0;
  std::thread thread;

  // Stops the thread (after the chunk it is inflating) and waits for it.
  void Join() {
    if (!thread.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    changed.notify_all();
    thread.join();
  }

  ~Gzip() {
    Join();
    if (initialized) inflateEnd(&zs);
  }
};

TraceByteSource::~TraceByteSource() {
  // The thread reads file_ and, through gzip_, the stream: it must end while
  // gzip_ still points at it. (gzip_.reset() alone clears the pointer before
  // ~Gzip joins, and a thread still inflating, as when a reader stops early
  // at a bound, read through a null gzip_.)
  if (gzip_ != nullptr) gzip_->Join();
  gzip_.reset();
  if (file_ != nullptr) std::fclose(file_);
}

absl::StatusOr<std::unique_ptr<TraceByteSource>> TraceByteSource::Open(
    absl::string_view path) {
  std::unique_ptr<TraceByteSource> source(new TraceByteSource());
  source->path_ = std::string(path);
  ASSIGN_OR_RETURN(source->file_, OpenRegularFile(path));
  FILE* f = source->file_;
  if (std::fseek(f, 0, SEEK_END) != 0) return ErrnoStatus("seek", path);
  long size = std::ftell(f);
  if (size < 0) return ErrnoStatus("size", path);
  std::rewind(f);
  source->file_size_ = static_cast<uint64_t>(size);
  auto gzip = std::make_unique<Gzip>();
  gzip->in = std::make_unique<char[]>(Gzip::kInSize);
  size_t n = std::fread(gzip->in.get(), 1, Gzip::kInSize, f);
  if (n < Gzip::kInSize && std::ferror(f)) return ErrnoStatus("read", path);
  source->file_read_ = n;
  if (!HasGzipMagic(absl::string_view(gzip->in.get(), n))) {
    // Plain: hand out what was read first, then read straight from the file.
    std::rewind(f);
    source->file_read_ = 0;
    return source;
  }
#if BUBBLEWATCH_HAVE_ISAL
  isal_inflate_init(&gzip->isal);
  gzip->isal.crc_flag = ISAL_GZIP;  // Header, trailer and CRC checked.
  gzip->isal.next_in = reinterpret_cast<uint8_t*>(gzip->in.get());
  gzip->isal.avail_in = static_cast<uint32_t>(n);
#endif
  // 16 + MAX_WBITS: expect a gzip header and trailer.
  if (inflateInit2(&gzip->zs, 16 + MAX_WBITS) != Z_OK) {
    return absl::InternalError("zlib inflateInit2 failed");
  }
  gzip->initialized = true;
  gzip->zs.next_in = reinterpret_cast<Bytef*>(gzip->in.get());
  gzip->zs.avail_in = static_cast<uInt>(n);
  source->gzip_ = std::move(gzip);
  source->gzip_->thread =
      std::thread([s = source.get()] { s->InflateAhead(); });
  return source;
}

uint64_t TraceByteSource::file_bytes_consumed() const {
  if (gzip_ == nullptr) return file_read_;
  return gzip_->consumed.load(std::memory_order_relaxed);
}

void TraceByteSource::InflateAhead() {
  Gzip& g = *gzip_;
  while (true) {
    std::string chunk;
    {
      std::lock_guard<std::mutex> lock(g.mu);
      if (!g.spare.empty()) {
        chunk = std::move(g.spare.back());
        g.spare.pop_back();
      }
    }
    chunk.resize(Gzip::kChunkSize);
    absl::StatusOr<size_t> n = Inflate(chunk.data(), chunk.size());
    std::unique_lock<std::mutex> lock(g.mu);
    if (!n.ok() || *n == 0) {
      g.status = n.status();
      g.done = true;
      g.changed.notify_all();
      return;
    }
    chunk.resize(*n);
    g.changed.wait(
        lock, [&] { return g.stop || g.ready.size() < Gzip::kChunksAhead; });
    if (g.stop) return;
    g.ready.push_back(std::move(chunk));
    g.changed.notify_all();
  }
}

absl::StatusOr<size_t> TraceByteSource::ReadGzip(char* out, size_t size) {
  Gzip& g = *gzip_;
  if (g.current_pos == g.current.size()) {
    std::unique_lock<std::mutex> lock(g.mu);
    g.changed.wait(lock, [&] { return g.done || !g.ready.empty(); });
    if (g.ready.empty()) {
      if (!g.status.ok()) return g.status;
      return 0;
    }
    if (g.current.capacity() >= Gzip::kChunkSize) {
      g.spare.push_back(std::move(g.current));
    }
    g.current = std::move(g.ready.front());
    g.ready.pop_front();
    g.current_pos = 0;
    g.changed.notify_all();
  }
  size_t n = std::min(size, g.current.size() - g.current_pos);
  std::memcpy(out, g.current.data() + g.current_pos, n);
  g.current_pos += n;
  produced_ += n;
  return n;
}

absl::StatusOr<size_t> TraceByteSource::Read(char* out, size_t size) {
  size = std::min(size, max_read_);
  if (max_bytes_ != UINT64_MAX) {
    if (produced_ >= max_bytes_) {
      // At the limit: one more byte tells an end exactly there from more.
      ASSIGN_OR_RETURN(const size_t more, ReadUnbounded(out, 1));
      if (more == 0) return 0;
      return absl::ResourceExhaustedError(
          absl::StrCat("over the limit of ", max_bytes_, " bytes",
                       gzip_ != nullptr ? " gunzipped" : ""));
    }
    size =
        static_cast<size_t>(std::min<uint64_t>(size, max_bytes_ - produced_));
  }
  return ReadUnbounded(out, size);
}

absl::StatusOr<size_t> TraceByteSource::ReadUnbounded(char* out, size_t size) {
  if (gzip_ != nullptr) return ReadGzip(out, size);
  size_t n = std::fread(out, 1, size, file_);
  if (n < size && std::ferror(file_)) return ErrnoStatus("read", path_);
  file_read_ += n;
  produced_ += n;
  return n;
}

#if BUBBLEWATCH_HAVE_ISAL
namespace {
const char* IsalError(int rc) {
  switch (rc) {
    case ISAL_INVALID_BLOCK:
      return "invalid deflate block";
    case ISAL_INVALID_SYMBOL:
      return "invalid deflate symbol";
    case ISAL_INVALID_LOOKBACK:
      return "invalid distance too far back";
    case ISAL_INVALID_WRAPPER:
      return "incorrect header check";
    case ISAL_UNSUPPORTED_METHOD:
      return "unknown compression method";
    case ISAL_INCORRECT_CHECKSUM:
      return "incorrect data check";
    default:
      return "corrupt data";
  }
}
}  // namespace

absl::StatusOr<size_t> TraceByteSource::Inflate(char* out, size_t size) {
  Gzip& g = *gzip_;
  inflate_state& st = g.isal;
  st.next_out = reinterpret_cast<uint8_t*>(out);
  st.avail_out = static_cast<uint32_t>(std::min<size_t>(size, 1u << 30));
  const uint32_t wanted = st.avail_out;
  while (true) {
    if (st.avail_in == 0 && !g.input_ended) {
      size_t n = std::fread(g.in.get(), 1, Gzip::kInSize, file_);
      if (n < Gzip::kInSize && std::ferror(file_)) {
        return ErrnoStatus("read", path_);
      }
      file_read_ += n;
      st.next_in = reinterpret_cast<uint8_t*>(g.in.get());
      st.avail_in = static_cast<uint32_t>(n);
      g.input_ended = n == 0;
    }
    if (g.member_ended) {
      if (st.avail_in == 0) break;  // The end, after a trailer.
      // Concatenated gzip members are legal; continue with the next one.
      isal_inflate_reset(&st);
      st.crc_flag = ISAL_GZIP;
      g.member_ended = false;
    }
    const uint32_t before = st.avail_out;
    const uint32_t in_before = st.avail_in;
    int rc = isal_inflate(&st);
    g.consumed.store(file_read_ - st.avail_in, std::memory_order_relaxed);
    if (rc < 0) {
      return absl::DataLossError(
          absl::StrCat("corrupt gzip stream: ", IsalError(rc)));
    }
    if (st.block_state == ISAL_BLOCK_FINISH) g.member_ended = true;
    if (st.avail_out != wanted) break;  // Something for the caller.
    if (g.input_ended && !g.member_ended && st.avail_out == before &&
        st.avail_in == in_before) {
      return absl::DataLossError(
          absl::StrCat("truncated gzip stream: it ends after ", file_read_,
                       " compressed bytes (", g.inflated,
                       " decompressed) without its trailer"));
    }
  }
  size_t n = wanted - st.avail_out;
  g.inflated += n;
  return n;
}
#else
absl::StatusOr<size_t> TraceByteSource::Inflate(char* out, size_t size) {
  z_stream& zs = gzip_->zs;
  zs.next_out = reinterpret_cast<Bytef*>(out);
  zs.avail_out = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
  size_t wanted = zs.avail_out;
  while (zs.avail_out == wanted) {  // Until something was produced.
    if (zs.avail_in == 0) {
      size_t n = std::fread(gzip_->in.get(), 1, Gzip::kInSize, file_);
      if (n < Gzip::kInSize && std::ferror(file_)) {
        return ErrnoStatus("read", path_);
      }
      file_read_ += n;
      zs.next_in = reinterpret_cast<Bytef*>(gzip_->in.get());
      zs.avail_in = static_cast<uInt>(n);
      if (n == 0) {
        if (gzip_->member_ended) return 0;  // The end, after a trailer.
        return absl::DataLossError(
            absl::StrCat("truncated gzip stream: it ends after ", file_read_,
                         " compressed bytes (", gzip_->inflated,
                         " decompressed) without its trailer"));
      }
    }
    if (gzip_->member_ended) {
      // Concatenated gzip members are legal; continue with the next one.
      if (inflateReset(&zs) != Z_OK) {
        return absl::InternalError("zlib inflateReset failed");
      }
      gzip_->member_ended = false;
    }
    int rc = inflate(&zs, Z_NO_FLUSH);
    gzip_->consumed.store(file_read_ - zs.avail_in, std::memory_order_relaxed);
    if (rc == Z_STREAM_END) {
      gzip_->member_ended = true;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return absl::DataLossError(absl::StrCat(
          "corrupt gzip stream: ", zs.msg ? zs.msg : "corrupt data"));
    }
  }
  size_t n = wanted - zs.avail_out;
  gzip_->inflated += n;
  return n;
}
#endif  // BUBBLEWATCH_HAVE_ISAL

absl::StatusOr<simdjson::padded_string> ReadRest(TraceByteSource& source,
                                                 absl::string_view head) {
  std::string out(head);
  // Plain files know their size; a gzip trailer holds the size mod 2^32,
  // so start from a guess and grow.
  size_t guess =
      source.compressed() ? source.file_size() * 8 : source.file_size();
  out.resize(std::max(out.size() + 4096, static_cast<size_t>(guess) + 4096));
  size_t used = head.size();
  while (true) {
    if (used == out.size()) out.resize(out.size() * 2);
    ASSIGN_OR_RETURN(size_t n,
                     source.Read(out.data() + used, out.size() - used));
    if (n == 0) break;
    used += n;
  }
  return simdjson::padded_string(out.data(), used);
}

}  // namespace bubblewatch
