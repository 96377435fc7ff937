#include "ingest/watch/trace_watcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "base/logging.h"
#include "base/option_problems.h"
#include "base/status_macros.h"
#include "ingest/trace_io/trace_file.h"
#include "ingest/trace_reader.h"
#include "ingest/trace_replay.h"

namespace bubblewatch {
namespace {

namespace fs = std::filesystem;

// How many settle times ready files wait for others still being written.
constexpr int kGatherSettles = 10;
// How many settle times an unchanged, unfinished file waits between looks.
constexpr int kIncompleteRetrySettles = 5;
// The most events prepared for one send; more waits for the next round.
constexpr int64_t kMaxGroupEvents = 20'000'000;

// Up to `n` bytes of `fd` from `offset` (fewer at the end of the file).
absl::StatusOr<std::string> ReadAt(int fd, int64_t offset, size_t n) {
  std::string out(n, '\0');
  size_t done = 0;
  while (done < n) {
    const ssize_t got =
        ::pread(fd, out.data() + done, n - done,
                static_cast<off_t>(offset + static_cast<int64_t>(done)));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot read: ", std::strerror(errno)));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  out.resize(done);
  return out;
}

// The last `n` bytes of the gunzipped content of `path`, inflated through a
// fixed-size buffer: a small file may inflate to GiBs. Errors: the gzip
// stream's (kDataLoss when truncated or corrupt) and the file system's.
// Past `max_bytes` (0: no limit) of content: kResourceExhausted, at once.
absl::StatusOr<std::string> GunzippedTail(const std::string& path, size_t n,
                                          uint64_t max_bytes) {
  ASSIGN_OR_RETURN(std::unique_ptr<TraceByteSource> source,
                   TraceByteSource::Open(path));
  if (max_bytes > 0) source->set_max_bytes(max_bytes);
  constexpr size_t kPiece = 64 << 10;
  std::unique_ptr<char[]> buffer(new char[kPiece]);
  std::string tail;
  while (true) {
    ASSIGN_OR_RETURN(const size_t got, source->Read(buffer.get(), kPiece));
    if (got == 0) return tail;
    if (got >= n) {
      tail.assign(buffer.get() + got - n, n);
    } else {
      tail.append(buffer.get(), got);
      if (tail.size() > n) tail.erase(0, tail.size() - n);
    }
  }
}

// Moves `from` into directory `to_dir`, keeping the base name; appends ".1",
// ".2", ... if the name is taken. Falls back to copy + remove across file
// systems.
absl::Status MoveInto(const fs::path& from, const fs::path& to_dir) {
  std::error_code ec;
  fs::create_directories(to_dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("creating ", to_dir.string(), ": ", ec.message()));
  }
  fs::path target = to_dir / from.filename();
  for (int i = 1; fs::exists(target); ++i) {
    target = to_dir / absl::StrCat(from.filename().string(), ".", i);
  }
  fs::rename(from, target, ec);
  if (ec == std::errc::cross_device_link) {
    ec.clear();
    fs::copy_file(from, target, ec);
    if (!ec) fs::remove(from, ec);
  }
  if (ec) {
    return absl::UnavailableError(absl::StrCat(
        "moving ", from.string(), " to ", target.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

// In the incompleteness reason of a file whose verdict depends on another
// file (a SQLite journal): looked at again while unchanged.
constexpr char kSiblingFile[] = " file present";

// Errors that mean "the writer has not finished yet" rather than "broken".
bool LooksTruncated(const absl::Status& status) {
  return status.code() == absl::StatusCode::kDataLoss ||
         absl::StrContains(status.message(), "does not end with") ||
         absl::StrContains(status.message(), "truncated");
}

}  // namespace

absl::StatusOr<AfterSend> ParseAfterSend(absl::string_view text) {
  AfterSend out;
  if (text == "keep") return out;
  if (text == "delete") {
    out.action = AfterSend::Action::kDelete;
    return out;
  }
  if (absl::ConsumePrefix(&text, "move:") && !text.empty()) {
    out.action = AfterSend::Action::kMove;
    out.move_dir = std::string(text);
    return out;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", text, "' is not keep, delete or move:DIR"));
}

bool IsWatchedTraceName(absl::string_view name) {
  if (name.empty() || name[0] == '.') return false;
  return absl::EndsWith(name, ".json") || absl::EndsWith(name, ".json.gz") ||
         absl::EndsWith(name, ".sqlite");
}

Completeness CheckCompleteness(const std::string& path, std::string* why,
                               uint64_t max_bytes) {
  // Enough for the SQLite header, and for a JSON end to hold its '}' after
  // ordinary trailing blanks.
  constexpr size_t kHeadBytes = 100;
  constexpr size_t kTailBytes = 64;
  // O_NONBLOCK: a FIFO put in the file's place must not hang the watcher.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    *why = absl::StrCat("cannot open: ", std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return Completeness::kIncomplete;
  }
  const int64_t size = st.st_size;
  // JSON never gets smaller gzipped, and SQLite is not compressed: a file
  // over the limit on disk is over it in content, without reading it.
  if (max_bytes > 0 && static_cast<uint64_t>(size) > max_bytes) {
    ::close(fd);
    *why = absl::StrCat("over the limit of ", max_bytes, " bytes (", size,
                        " on disk)");
    return Completeness::kTooLarge;
  }
  absl::StatusOr<std::string> head = ReadAt(fd, 0, kHeadBytes);
  absl::StatusOr<std::string> plain_tail =
      ReadAt(fd, std::max<int64_t>(0, size - int64_t{kTailBytes}), kTailBytes);
  ::close(fd);
  if (!head.ok() || !plain_tail.ok()) {
    *why = std::string(
        (head.ok() ? plain_tail.status() : head.status()).message());
    return Completeness::kIncomplete;
  }
  if (HasSqliteMagic(*head) || absl::EndsWith(path, ".sqlite")) {
    for (const char* suffix : {"-journal", "-wal"}) {
      if (fs::exists(absl::StrCat(path, suffix))) {
        *why = absl::StrCat("SQLite ", suffix, kSiblingFile, ": still written");
        return Completeness::kIncomplete;
      }
    }
    if (!HasSqliteMagic(*head) || head->size() < kHeadBytes) {
      *why = "no SQLite header yet";
      return Completeness::kIncomplete;
    }
    const std::string& bytes = *head;
    // The header's page size and page count (valid when the "version valid
    // for" number equals the change counter) give the file's full size.
    auto be32 = [&](size_t at) {
      return (uint32_t{static_cast<unsigned char>(bytes[at])} << 24) |
             (uint32_t{static_cast<unsigned char>(bytes[at + 1])} << 16) |
             (uint32_t{static_cast<unsigned char>(bytes[at + 2])} << 8) |
             uint32_t{static_cast<unsigned char>(bytes[at + 3])};
    };
    uint64_t page_size =
        (uint32_t{static_cast<unsigned char>(bytes[16])} << 8) |
        static_cast<unsigned char>(bytes[17]);
    if (page_size == 1) page_size = 65536;
    if (be32(92) == be32(24)) {
      const uint64_t expected = page_size * be32(28);
      if (static_cast<uint64_t>(size) < expected) {
        *why =
            absl::StrCat("SQLite file has ", size, " of ", expected, " bytes");
        return Completeness::kIncomplete;
      }
    }
    return Completeness::kComplete;
  }
  std::string json_tail;
  if (HasGzipMagic(*head)) {
    absl::StatusOr<std::string> tail =
        GunzippedTail(path, kTailBytes, max_bytes);
    if (tail.status().code() == absl::StatusCode::kResourceExhausted) {
      *why = std::string(tail.status().message());
      return Completeness::kTooLarge;
    }
    if (!tail.ok()) {
      *why =
          absl::StrCat("gzip stream not whole (", tail.status().message(), ")");
      return Completeness::kIncomplete;
    }
    json_tail = *std::move(tail);
  } else if (absl::EndsWith(path, ".gz")) {
    *why = "no gzip header yet";
    return Completeness::kIncomplete;
  } else {
    json_tail = *std::move(plain_tail);
  }
  absl::string_view tail = absl::StripTrailingAsciiWhitespace(json_tail);
  if (tail.empty() || tail.back() != '}') {
    *why = "JSON does not end with '}' yet";
    return Completeness::kIncomplete;
  }
  return Completeness::kComplete;
}

uint64_t WatchedFileProducerId(uint64_t content_hash, absl::string_view job,
                               int32_t rank, const BatchingOptions& batching) {
  const std::string key =
      absl::StrCat(absl::StrFormat("%016x", content_hash), "\n", job, "\n",
                   rank, "\n", batching.max_events, "\n", batching.max_span_ns);
  const uint64_t id = ContentHash(key);
  return id == 0 ? 1 : id;
}

absl::Status TraceWatcherOptions::Validate() const {
  OptionProblems p("TraceWatcherOptions");
  const absl::Duration zero = absl::ZeroDuration();
  p.Check(!dir.empty(), "dir", "is required");
  p.Check(rank >= -1, "rank", absl::StrCat("must be >= -1, not ", rank));
  p.Check(settle >= zero, "settle",
          absl::StrCat("must be >= 0, not ", absl::FormatDuration(settle)));
  p.Check(
      incomplete_timeout >= settle, "incomplete_timeout",
      absl::StrCat("must be at least settle (", absl::FormatDuration(settle),
                   "), not ", absl::FormatDuration(incomplete_timeout)));
  p.Check(
      poll_interval > zero, "poll_interval",
      absl::StrCat("must be > 0, not ", absl::FormatDuration(poll_interval)));
  p.Check(
      flush_timeout > zero, "flush_timeout",
      absl::StrCat("must be > 0, not ", absl::FormatDuration(flush_timeout)));
  p.Check(max_file_bytes > 0, "max_file_bytes", "must be > 0");
  p.Check(max_file_events > 0, "max_file_events",
          absl::StrCat("must be > 0, not ", max_file_events));
  p.Check(inspector_pool.expire > zero, "inspector_pool.expire",
          absl::StrCat("must be > 0, not ",
                       absl::FormatDuration(inspector_pool.expire)));
  p.Check(inspector_pool.lag >= zero, "inspector_pool.lag",
          absl::StrCat("must be >= 0, not ",
                       absl::FormatDuration(inspector_pool.lag)));
  p.Check(inspector_pool_idle > zero, "inspector_pool_idle",
          absl::StrCat("must be > 0, not ",
                       absl::FormatDuration(inspector_pool_idle)));
  return p.ToStatus();
}

absl::StatusOr<std::unique_ptr<TraceWatcher>> TraceWatcher::Create(
    TraceWatcherOptions options, EventProducer* producer) {
  RETURN_IF_ERROR(options.Validate());
  std::error_code ec;
  if (options.dir.empty() || !fs::is_directory(options.dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--watch ", options.dir, ": not a directory"));
  }
  if (options.reject_dir.empty()) {
    options.reject_dir =
        (fs::path(options.dir) / ".bubblewatch-rejected").string();
  }
  if (options.state_dir.empty()) {
    options.state_dir = (fs::path(options.dir) / ".bubblewatch-state").string();
  }
  ASSIGN_OR_RETURN(WatchState state, WatchState::Open(options.state_dir));
  InspectorTailerOptions tail;
  tail.dir = options.dir;
  tail.state_dir = options.state_dir;
  tail.job = options.job;
  tail.job_pattern = options.job_pattern;
  tail.batching = options.batching;
  tail.settle = options.settle;
  tail.flush_timeout = options.flush_timeout;
  tail.exec = options.inspector_pool;
  tail.exec_idle = options.inspector_pool_idle;
  ASSIGN_OR_RETURN(std::unique_ptr<InspectorTailer> tailer,
                   InspectorTailer::Create(std::move(tail), producer));
  std::unique_ptr<TraceWatcher> w(
      new TraceWatcher(std::move(options), producer, std::move(state)));
  w->inspector_ = std::move(tailer);
  if (w->options_.use_inotify) {
    w->inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->inotify_fd_ >= 0 &&
        inotify_add_watch(w->inotify_fd_, w->options_.dir.c_str(),
                          IN_CLOSE_WRITE | IN_MODIFY | IN_CREATE | IN_MOVED_TO |
                              IN_MOVED_FROM | IN_DELETE) < 0) {
      ::close(w->inotify_fd_);
      w->inotify_fd_ = -1;
    }
    if (w->inotify_fd_ < 0) {
      spdlog::warn("inotify unavailable for {} ({}): polling every {}",
                   w->options_.dir, std::strerror(errno),
                   absl::FormatDuration(w->options_.poll_interval));
    }
  }
  return w;
}

TraceWatcher::TraceWatcher(TraceWatcherOptions options, EventProducer* producer,
                           WatchState state)
    : options_(std::move(options)),
      producer_(producer),
      state_(std::move(state)) {}

TraceWatcher::~TraceWatcher() {
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
}

WatcherStats TraceWatcher::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

absl::Status TraceWatcher::PollOnce(absl::Time now) {
  const absl::flat_hash_set<std::string> closed = DrainInotify();
  absl::flat_hash_set<std::string> present;
  std::error_code ec;
  for (fs::directory_iterator it(options_.dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!IsWatchedTraceName(name)) continue;
    struct stat st;
    if (::stat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    present.insert(name);
    FileEntry& entry = files_[name];
    const int64_t mtime_ns =
        int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
    if (entry.size != st.st_size || entry.mtime_ns != mtime_ns) {
      entry = FileEntry();
      entry.size = st.st_size;
      entry.mtime_ns = mtime_ns;
      entry.stable_since = now;
    }
    // Closed after its last write: no need to wait out the settle time.
    if (closed.contains(name)) entry.closed = true;
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("listing ", options_.dir, ": ", ec.message()));
  }
  for (auto it = files_.begin(); it != files_.end();) {
    if (present.contains(it->first)) {
      ++it;
    } else {
      files_.erase(it++);
    }
  }
  // Files that finish together (the ranks of one job exporting the same
  // steps) are sent together, merged by event time: sent one after another,
  // a later rank's events could fall behind the job's watermark and count
  // as late. So while another file is still being written, ready files wait
  // for it, up to kGatherSettles settle times.
  bool writing = false;
  absl::Time oldest_ready = absl::InfiniteFuture();
  for (const auto& [name, entry] : files_) {
    if (entry.done || !entry.last_incomplete.empty()) continue;
    if (Ready(entry, now)) {
      oldest_ready = std::min(oldest_ready, entry.stable_since);
    } else {
      writing = true;
    }
  }
  if (!writing || now - oldest_ready >= kGatherSettles * options_.settle) {
    std::vector<PreparedFile> group;
    int64_t group_events = 0;
    for (auto& [name, entry] : files_) {
      if (stop_.load()) break;
      if (entry.done || !Ready(entry, now)) continue;
      if (!entry.last_incomplete.empty() && now < entry.next_retry) continue;
      // Bounds memory after a backlog (e.g. a restart): the rest goes in
      // the next round.
      if (group_events >= kMaxGroupEvents) break;
      std::optional<PreparedFile> prepared;
      RETURN_IF_ERROR(HandleFile(name, entry, now, &prepared));
      if (!prepared) continue;
      group_events += prepared->stream->num_events();
      group.push_back(*std::move(prepared));
    }
    if (!group.empty()) RETURN_IF_ERROR(Ship(group));
  }
  if (!stop_.load()) RETURN_IF_ERROR(inspector_->PollOnce(now));
  // Entries of files moved away or deleted are no longer needed.
  absl::flat_hash_set<std::string> remaining;
  for (const auto& [name, entry] : files_) {
    if (fs::exists(fs::path(options_.dir) / name)) remaining.insert(name);
  }
  return state_.Retain(remaining);
}

bool TraceWatcher::Ready(const FileEntry& entry, absl::Time now) const {
  return entry.closed || now - entry.stable_since >= options_.settle;
}

absl::Status TraceWatcher::HandleFile(const std::string& name, FileEntry& entry,
                                      absl::Time now,
                                      std::optional<PreparedFile>* prepared) {
  const std::string path = (fs::path(options_.dir) / name).string();
  // Over the bound on disk is over it in content (JSON does not shrink
  // gzipped): rejected without reading, not even to hash it.
  if (static_cast<uint64_t>(entry.size) > options_.max_file_bytes) {
    return RejectTooLarge(
        name, entry,
        absl::StrCat("over the limit of ", options_.max_file_bytes, " bytes (",
                     entry.size, " on disk)"));
  }
  if (!entry.content_hash) {
    int64_t size = 0;
    int64_t mtime_ns = 0;
    absl::StatusOr<uint64_t> hashed = ContentHashOfFile(path, &size, &mtime_ns);
    if (!hashed.ok()) {
      return Reject(name, entry, "unreadable", hashed.status().message());
    }
    if (size != entry.size || mtime_ns != entry.mtime_ns) {
      return absl::OkStatus();  // Changed since the scan: the next one sees it.
    }
    entry.content_hash = *hashed;
  }
  const uint64_t hash = *entry.content_hash;
  if (std::optional<std::string> reason = state_.RejectedReason(hash)) {
    spdlog::info("{}: rejected before a restart ({}): not read again", name,
                 *reason);
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.files_already_rejected;
    }
    entry.done = true;
    return absl::OkStatus();
  }
  if (state_.Contains(hash)) {
    spdlog::info("{}: already sent before a restart", name);
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.files_already_sent;
    }
    entry.done = true;
    return AfterSent(name);
  }
  // An unchanged file whose verdict depends on its bytes alone gives the
  // same verdict again: it is not read again (a gzip bomb inflated every
  // few seconds cost 128 CPU-seconds until its timeout, and the files
  // behind it waited), only timed out.
  if (!entry.last_incomplete.empty() && !entry.recheck) {
    if (now - entry.stable_since < options_.incomplete_timeout) {
      entry.next_retry = entry.stable_since + options_.incomplete_timeout;
      return absl::OkStatus();
    }
    return Reject(name, entry, "truncated",
                  absl::StrCat(entry.last_incomplete, " for ",
                               absl::FormatDuration(now - entry.stable_since)));
  }
  std::string why;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.content_reads;
  }
  const Completeness complete =
      CheckCompleteness(path, &why, options_.max_file_bytes);
  if (complete == Completeness::kTooLarge) {
    return RejectTooLarge(name, entry, why);
  }
  TraceReadOptions read_options;
  read_options.max_bytes = options_.max_file_bytes;
  read_options.max_events = static_cast<uint64_t>(options_.max_file_events);
  absl::StatusOr<Trace> trace =
      complete == Completeness::kComplete
          ? ReadTraceFile(path, read_options)
          : absl::StatusOr<Trace>(absl::DataLossError(why));
  if (trace.status().code() == absl::StatusCode::kResourceExhausted) {
    return RejectTooLarge(name, entry, trace.status().message());
  }
  if (!trace.ok()) {
    if (LooksTruncated(trace.status()) &&
        now - entry.stable_since < options_.incomplete_timeout) {
      if (entry.last_incomplete.empty()) {
        spdlog::debug("{}: not complete yet: {}", name,
                      std::string(trace.status().message()));
      }
      entry.last_incomplete = std::string(trace.status().message());
      entry.recheck = absl::StrContains(entry.last_incomplete, kSiblingFile);
      entry.closed = false;
      // Unchanged, it is looked at again now and then (a change resets the
      // entry at once), and a last time when it times out.
      entry.next_retry =
          std::min(now + kIncompleteRetrySettles * options_.settle,
                   entry.stable_since + options_.incomplete_timeout);
      return absl::OkStatus();
    }
    const bool truncated = LooksTruncated(trace.status());
    return Reject(
        name, entry,
        truncated ? "truncated"
        : trace.status().code() == absl::StatusCode::kInvalidArgument
            ? "not a trace"
            : "unreadable",
        truncated ? absl::StrCat(trace.status().message(), " for ",
                                 absl::FormatDuration(now - entry.stable_since))
                  : trace.status().message());
  }

  if (trace->source_format == "inspector") {
    // One process's log alone has no job ranks and, without verbose
    // records, no wall-clock times: analyze reads a job's logs together
    // (docs/analyze.md#inspector-logs).
    return Reject(name, entry, "not a trace",
                  "an NCCL Inspector log: not sent by the watcher (analyze "
                  "reads a job's logs together)");
  }

  // Identity: flags first, then the name, then the trace's own metadata.
  std::optional<JobAndRank> from_name;
  if (options_.job_pattern) from_name = options_.job_pattern->Match(name);
  std::string job = options_.job;
  if (job.empty() && from_name) job = from_name->job;
  if (job.empty()) job = trace->job;
  if (job.empty()) {
    return Reject(
        name, entry, "no job",
        options_.job_pattern
            ? absl::StrCat("the name does not match --job-from-name '",
                           options_.job_pattern->pattern(),
                           "' with a job and the trace names no job")
            : "no --job and the trace names no job");
  }
  int32_t rank = options_.rank;
  if (rank < 0 && from_name) rank = from_name->rank;
  if (rank < 0) rank = trace->rank;
  BatchHeader identity;
  identity.job = job;
  identity.host = options_.host;
  identity.rank = rank;
  identity.world_size = trace->world_size;
  identity.producer_id =
      WatchedFileProducerId(hash, job, rank, options_.batching);
  trace->job = job;
  trace->rank = rank;
  entry.done = true;
  prepared->emplace();
  (*prepared)->name = name;
  (*prepared)->content_hash = hash;
  (*prepared)->stream = std::make_unique<BatchedTrace>(
      *std::move(trace), identity, options_.batching);
  return absl::OkStatus();
}

absl::Status TraceWatcher::Ship(std::vector<PreparedFile>& group) {
  std::vector<BatchedTrace*> streams;
  for (PreparedFile& f : group) {
    const BatchHeader& h = f.stream->header();
    spdlog::info(
        "{}: sending {} events in {} batches as job {} rank {} (producer id "
        "{:016x})",
        f.name, f.stream->num_events(), f.stream->num_batches(), h.job, h.rank,
        h.producer_id);
    streams.push_back(f.stream.get());
  }
  ReplayOptions replay;
  replay.split_ranks = options_.split_ranks;
  RETURN_IF_ERROR(ReplayTraces(streams, producer_, replay));
  absl::Status flushed = producer_->Flush(options_.flush_timeout);
  if (!flushed.ok()) {
    return absl::Status(
        flushed.code(),
        absl::StrCat(group.size() == 1 ? group[0].name
                                       : absl::StrCat(group.size(), " files"),
                     ": not every batch was acknowledged (", flushed.message(),
                     "); a restart resends with the same producer ids"));
  }
  for (PreparedFile& f : group) {
    RETURN_IF_ERROR(state_.Add(f.content_hash, f.name));
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.files_sent;
      // With its end marker (docs/semantics.md#job-lifecycle), sent after
      // the last batch of a file that has any.
      const auto batches = static_cast<int64_t>(f.stream->num_batches());
      stats_.batches_sent += batches > 0 ? batches + 1 : 0;
      stats_.events_sent += f.stream->num_events();
    }
    spdlog::info("{}: acknowledged", f.name);
    RETURN_IF_ERROR(AfterSent(f.name));
  }
  return absl::OkStatus();
}

absl::Status TraceWatcher::AfterSent(const std::string& name) {
  const fs::path path = fs::path(options_.dir) / name;
  switch (options_.after_send.action) {
    case AfterSend::Action::kKeep:
      return absl::OkStatus();
    case AfterSend::Action::kMove: {
      // A file that cannot be moved stays; it is recorded as sent, so it is
      // not sent again, and the error is logged rather than fatal.
      absl::Status moved = MoveInto(path, options_.after_send.move_dir);
      if (!moved.ok()) spdlog::error("{}", std::string(moved.message()));
      return absl::OkStatus();
    }
    case AfterSend::Action::kDelete: {
      std::error_code ec;
      fs::remove(path, ec);
      if (ec) spdlog::error("deleting {}: {}", path.string(), ec.message());
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::Status TraceWatcher::RejectTooLarge(const std::string& name,
                                          FileEntry& entry,
                                          absl::string_view detail) {
  return Reject(
      name, entry, "too large",
      absl::StrCat(detail, " (--max-file-bytes ", options_.max_file_bytes,
                   ", --max-file-events ", options_.max_file_events, ")"));
}

absl::Status TraceWatcher::Reject(const std::string& name, FileEntry& entry,
                                  absl::string_view reason,
                                  absl::string_view detail) {
  entry.done = true;
  absl::Status moved =
      MoveInto(fs::path(options_.dir) / name, options_.reject_dir);
  spdlog::error("{}: rejected ({}): {}; {}", name, std::string(reason),
                std::string(detail),
                moved.ok() ? absl::StrCat("moved to ", options_.reject_dir)
                           : absl::StrCat("left in place: ", moved.message()));
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.files_rejected;
    ++stats_.rejected_by_reason[std::string(reason)];
  }
  // Moved aside, it is not seen again. Left in place, the state remembers
  // it, so that a restarted watcher does not read it again either.
  if (moved.ok() || !entry.content_hash) return absl::OkStatus();
  return state_.AddRejected(*entry.content_hash, name, reason);
}

absl::Duration TraceWatcher::NextWake(absl::Time now) const {
  absl::Time wake = now + options_.poll_interval;
  for (const auto& [name, entry] : files_) {
    if (entry.done) continue;
    if (!Ready(entry, now)) {
      wake = std::min(wake, entry.stable_since + options_.settle);
    } else if (!entry.last_incomplete.empty()) {
      wake = std::min(wake, entry.next_retry);
    } else {
      // Ready, waiting for a file still being written.
      wake = std::min(
          wake, entry.stable_since + (kGatherSettles + 1) * options_.settle);
    }
  }
  return std::max(wake - now, absl::Milliseconds(10));
}

absl::flat_hash_set<std::string> TraceWatcher::DrainInotify() {
  absl::flat_hash_set<std::string> closed;
  if (inotify_fd_ < 0) return closed;
  alignas(inotify_event) char buffer[16384];
  while (true) {
    ssize_t n = ::read(inotify_fd_, buffer, sizeof(buffer));
    if (n <= 0) return closed;
    for (char* p = buffer; p < buffer + n;) {
      auto* event = reinterpret_cast<inotify_event*>(p);
      p += sizeof(inotify_event) + event->len;
      if (event->len > 0 && (event->mask & IN_CLOSE_WRITE)) {
        closed.insert(event->name);
      }
    }
  }
}

void TraceWatcher::WaitForChange(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!stop_.load()) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return;
    // Short slices, so that RequestStop() is seen promptly.
    const absl::Duration slice = std::min(left, absl::Milliseconds(200));
    if (inotify_fd_ >= 0) {
      pollfd pfd{.fd = inotify_fd_, .events = POLLIN, .revents = 0};
      if (::poll(&pfd, 1,
                 static_cast<int>(absl::ToInt64Milliseconds(slice)) + 1) > 0) {
        return;
      }
    } else {
      std::this_thread::sleep_for(absl::ToChronoMilliseconds(slice));
    }
  }
}

absl::Status TraceWatcher::Run() {
  spdlog::info("watching {} ({}), state in {}", options_.dir,
               inotify_fd_ >= 0 ? "inotify" : "polling", state_.path());
  while (!stop_.load()) {
    RETURN_IF_ERROR(PollOnce(absl::Now()));
    WaitForChange(NextWake(absl::Now()));
  }
  return absl::OkStatus();
}

}  // namespace bubblewatch
