#include "ingest/watch/watch_state.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "schemas/state_record.h"

namespace bubblewatch {
namespace {

// The first line of the text file written before schemas/state.fbs.
constexpr char kLegacyHeader[] = "bubblewatch-watch-state v1";

absl::Status ErrnoStatus(int err, absl::string_view what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(err));
  if (err == EACCES || err == EPERM || err == EROFS) {
    return absl::PermissionDeniedError(message);
  }
  return absl::UnavailableError(message);
}

}  // namespace

// Writes `content` to `path` durably: temp file, fsync, rename, fsync of the
// directory (so the rename itself survives a power cut).
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& content) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("creating ", tmp));
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, absl::StrCat("writing ", tmp));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, absl::StrCat("fsync of ", tmp));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("renaming ", tmp, " to ", path));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  int dir_fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return absl::OkStatus();
}

uint64_t ContentHash(absl::string_view bytes) {
  ContentHasher hasher;
  hasher.Update(bytes);
  return hasher.hash();
}

void ContentHasher::Update(absl::string_view bytes) {
  uint64_t h = hash_;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  hash_ = h;
}

absl::StatusOr<uint64_t> ContentHashOfFile(const std::string& path,
                                           int64_t* size, int64_t* mtime_ns) {
  // O_NONBLOCK: a FIFO put in the file's place must not hang the caller.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, "cannot open");
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::UnavailableError("not a regular file");
  }
  // 1 MiB: few syscalls, and all the memory a file of any size takes.
  constexpr size_t kPiece = 1 << 20;
  std::unique_ptr<char[]> buffer(new char[kPiece]);
  ContentHasher hasher;
  while (true) {
    const ssize_t n = ::read(fd, buffer.get(), kPiece);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "reading");
    }
    if (n == 0) break;
    hasher.Update(absl::string_view(buffer.get(), static_cast<size_t>(n)));
  }
  const int stat_rc = ::fstat(fd, &st);
  const int err = errno;
  ::close(fd);
  if (stat_rc != 0) return ErrnoStatus(err, "fstat");
  *size = st.st_size;
  *mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  return hasher.hash();
}

absl::StatusOr<WatchState> WatchState::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return ErrnoStatus(ec.value(),
                       absl::StrCat("creating the state directory ", dir));
  }
  WatchState state((std::filesystem::path(dir) / "watch-state").string());
  std::ifstream in(state.path_, std::ios::binary);
  if (!in) {
    if (std::filesystem::exists(state.path_)) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot read ", state.path_));
    }
    return state;
  }
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  if (in.bad()) {
    return absl::UnavailableError(absl::StrCat("cannot read ", state.path_));
  }
  if (absl::Status s = state.Decode(bytes); !s.ok()) {
    return absl::DataLossError(absl::StrCat(
        state.path_, ": ", s.message(),
        " (deleting the file is safe: files are then resent and the "
        "processor drops what it already counted)"));
  }
  return state;
}

absl::Status WatchState::Decode(absl::string_view bytes) {
  if (!IsStateRecord(bytes)) return DecodeLegacyText(bytes);
  absl::StatusOr<const fb::StateRecord*> record =
      ReadStateRecord(bytes, fb::StateBody::WatchStateRecord, "watch state");
  if (!record.ok()) return record.status();
  const fb::WatchStateRecord& r = *(*record)->body_as_WatchStateRecord();
  if (r.files() == nullptr) return absl::OkStatus();
  for (const fb::WatchedFile* f : *r.files()) {
    std::string name = f->name() != nullptr ? f->name()->str() : "";
    if (f->rejected() != nullptr) {
      rejected_[f->content_hash()] =
          Rejected{std::move(name), f->rejected()->str()};
    } else {
      sent_[f->content_hash()] = std::move(name);
    }
  }
  return absl::OkStatus();
}

absl::Status WatchState::DecodeLegacyText(absl::string_view text) {
  int line_number = 0;
  auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("line ", line_number, ": ", why));
  };
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (line_number == 1) {
      if (line != kLegacyHeader)
        return corrupt("not a bubblewatch watch state");
      continue;
    }
    if (line.empty()) continue;
    std::pair<absl::string_view, absl::string_view> parts =
        absl::StrSplit(line, absl::MaxSplits(' ', 1));
    uint64_t hash = 0;
    if (parts.first.size() != 16 || !absl::SimpleHexAtoi(parts.first, &hash)) {
      return corrupt("expected '<16 hex digits> <file name>'");
    }
    sent_[hash] = std::string(parts.second);
  }
  return absl::OkStatus();
}

absl::Status WatchState::Add(uint64_t content_hash, absl::string_view name) {
  sent_[content_hash] = std::string(name);
  return Write();
}

std::optional<std::string> WatchState::RejectedReason(
    uint64_t content_hash) const {
  auto it = rejected_.find(content_hash);
  if (it == rejected_.end()) return std::nullopt;
  return it->second.reason;
}

absl::Status WatchState::AddRejected(uint64_t content_hash,
                                     absl::string_view name,
                                     absl::string_view reason) {
  rejected_[content_hash] = Rejected{std::string(name), std::string(reason)};
  return Write();
}

absl::Status WatchState::Retain(
    const absl::flat_hash_set<std::string>& present) {
  const size_t before = size();
  absl::erase_if(sent_,
                 [&](const auto& kv) { return !present.contains(kv.second); });
  absl::erase_if(rejected_, [&](const auto& kv) {
    return !present.contains(kv.second.name);
  });
  if (size() == before) return absl::OkStatus();
  return Write();
}

absl::Status WatchState::Write() const {
  // Sorted, so that the file is stable and diffable.
  // (name, hash, rejection reason or null).
  std::vector<std::tuple<std::string_view, uint64_t, const std::string*>> rows;
  rows.reserve(size());
  for (const auto& [hash, name] : sent_) rows.emplace_back(name, hash, nullptr);
  for (const auto& [hash, r] : rejected_) {
    rows.emplace_back(r.name, hash, &r.reason);
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a)) <
           std::tie(std::get<0>(b), std::get<1>(b));
  });
  flatbuffers::FlatBufferBuilder builder(64 + 48 * rows.size());
  std::vector<flatbuffers::Offset<fb::WatchedFile>> files;
  files.reserve(rows.size());
  for (const auto& [name, hash, reason] : rows) {
    const auto name_offset = builder.CreateString(name);
    const auto reason_offset = reason != nullptr
                                   ? builder.CreateString(*reason)
                                   : flatbuffers::Offset<flatbuffers::String>();
    files.push_back(
        fb::CreateWatchedFile(builder, hash, name_offset, reason_offset));
  }
  auto body = fb::CreateWatchStateRecord(builder, builder.CreateVector(files));
  return WriteFileAtomically(
      path_, FinishStateRecord(builder, fb::StateBody::WatchStateRecord,
                               body.Union()));
}

}  // namespace bubblewatch
