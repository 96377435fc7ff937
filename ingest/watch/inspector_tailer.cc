#include "ingest/watch/inspector_tailer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "ingest/inspector/inspector_job.h"
#include "ingest/watch/watch_state.h"
#include "schemas/event_batch_codec.h"

namespace bubblewatch {
namespace {

namespace fs = std::filesystem;

constexpr char kOffsetsHeader[] = "bubblewatch-inspector-offsets v2";
// Version 1: the same lines without the pid (read as unknown until the
// log's next chunk names it).
constexpr char kOffsetsHeaderV1[] = "bubblewatch-inspector-offsets v1";
constexpr char kOffsetsFile[] = "inspector-offsets";
// The bytes of a file's start remembered to tell a replaced file.
constexpr int64_t kHeadBytes = 4096;
constexpr char kP2pSkip[] = "p2p_perf records (not matched live)";

absl::Status Errno(int err, absl::string_view what) {
  std::string message = absl::StrCat(what, ": ", std::strerror(err));
  if (err == EACCES || err == EPERM) {
    return absl::PermissionDeniedError(message);
  }
  return absl::UnavailableError(message);
}

// Reads up to `len` bytes at `offset`; fewer at the end of the file.
absl::StatusOr<std::string> ReadAt(int fd, int64_t offset, int64_t len) {
  std::string out(static_cast<size_t>(len), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done,
                              static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno(errno, "reading");
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

// The integer after `"key":` in `line`, or 0.
int64_t IntField(absl::string_view line, absl::string_view key) {
  const std::string quoted = absl::StrCat("\"", key, "\":");
  const size_t at = line.find(quoted);
  if (at == absl::string_view::npos) return 0;
  size_t i = at + quoted.size();
  while (i < line.size() && line[i] == ' ') ++i;
  size_t j = i;
  while (j < line.size() && absl::ascii_isdigit(line[j])) ++j;
  int64_t v = 0;
  if (!absl::SimpleAtoi(line.substr(i, j - i), &v)) return 0;
  return v;
}

// A stable stream number per communicator id (the device's streams are the
// process's communicators).
int32_t StreamOf(absl::string_view comm_id) {
  return static_cast<int32_t>(ContentHash(comm_id) % 1'000'000);
}

// Moves the context (last dump marker, records seen after it) over `chunk`.
void AdvanceContext(absl::string_view chunk, std::string* context,
                    int64_t* seen) {
  for (absl::string_view line : absl::StrSplit(chunk, '\n')) {
    if (absl::StrContains(line, "\"dump_stats\"")) {
      *context = std::string(line);
      *seen = 0;
    } else if (!context->empty() && (absl::StrContains(line, "\"coll_perf\"") ||
                                     absl::StrContains(line, "\"p2p_perf\""))) {
      ++*seen;
    }
  }
}

constexpr char kMissingSkip[] = "records announced by a dump marker, missing";
constexpr char kExecHeader[] = "bubblewatch-inspector-exec v1";
constexpr char kExecFile[] = "inspector-exec";

}  // namespace

bool IsTailedInspectorName(absl::string_view name) {
  if (name.empty() || name[0] == '.') return false;
  // The offsets file is tab-separated lines.
  if (absl::StrContains(name, '\t') || absl::StrContains(name, '\n')) {
    return false;
  }
  return absl::EndsWith(name, ".log") || absl::EndsWith(name, ".jsonl");
}

std::string JobFromInspectorDirName(absl::string_view dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
  const std::string base = fs::path(std::string(dir)).filename().string();
  absl::string_view rest = base;
  if (!absl::ConsumePrefix(&rest, "nccl-inspector-")) return "";
  if (rest.empty() || rest == "unknown-jobid") return "";
  return std::string(rest);
}

absl::StatusOr<InspectorOffsets> InspectorOffsets::Open(
    const std::string& state_dir) {
  std::error_code ec;
  fs::create_directories(state_dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("creating ", state_dir, ": ", ec.message()));
  }
  InspectorOffsets o;
  o.path_ = (fs::path(state_dir) / kOffsetsFile).string();
  std::ifstream in(o.path_);
  if (!in) return o;  // Absent: nothing followed yet.
  std::string line;
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(
        o.path_, ": ", why,
        " (deleting it makes the watcher follow every Inspector log from its "
        "start again: the processor keeps what it already counted only for "
        "chunks cut the same way, so expect duplicates)"));
  };
  if (!std::getline(in, line)) return o;
  const bool v1 = line == kOffsetsHeaderV1;
  if (line != kOffsetsHeader && !v1) {
    if (absl::StartsWith(line, "bubblewatch-inspector-offsets ")) {
      return bad("written by a newer bubblewatch");
    }
    return bad("not an offsets file");
  }
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const size_t fields = v1 ? 16 : 17;
    std::vector<std::string> f =
        absl::StrSplit(line, absl::MaxSplits('\t', fields - 1));
    if (f.size() != fields) {
      return bad(absl::StrCat("a line without its ", fields, " fields"));
    }
    TailedLog t;
    t.name = f[0];
    bool ok = absl::SimpleAtoi(f[1], &t.dev) &&
              absl::SimpleAtoi(f[2], &t.ino) &&
              absl::SimpleAtoi(f[3], &t.head_len) &&
              absl::SimpleHexAtoi(f[4], &t.head_hash) &&
              absl::SimpleHexAtoi(f[5], &t.producer_id) &&
              absl::SimpleAtoi(f[6], &t.next_sequence) &&
              absl::SimpleAtoi(f[7], &t.offset) &&
              absl::SimpleAtoi(f[8], &t.pending_end) &&
              absl::SimpleAtoi(f[9], &t.rank) &&
              absl::SimpleAtoi(f[10], &t.world_size);
    if (!ok || t.offset < 0 || t.head_len < 0) return bad("a bad number");
    t.rank_comm = f[11];
    t.host = f[12];
    // Version 2 has the pid after the host; the rest moves along one.
    const size_t at = v1 ? 13 : 14;
    if ((!v1 && !absl::SimpleAtoi(f[13], &t.pid)) ||
        !absl::SimpleAtoi(f[at], &t.generation) ||
        !absl::SimpleAtoi(f[at + 1], &t.context_seen)) {
      return bad("a bad number");
    }
    t.context = f[at + 2];
    o.logs_[t.name] = std::move(t);
  }
  return o;
}

absl::Status InspectorOffsets::Write() const {
  std::string out = absl::StrCat(kOffsetsHeader, "\n");
  for (const auto& [name, t] : logs_) {
    absl::StrAppend(
        &out, t.name, "\t", t.dev, "\t", t.ino, "\t", t.head_len, "\t",
        absl::Hex(t.head_hash), "\t", absl::Hex(t.producer_id), "\t",
        t.next_sequence, "\t", t.offset, "\t", t.pending_end, "\t", t.rank,
        "\t", t.world_size, "\t", t.rank_comm, "\t", t.host, "\t", t.pid, "\t",
        t.generation, "\t", t.context_seen, "\t", t.context, "\n");
  }
  return WriteFileAtomically(path_, out);
}

int64_t ChunkLength(absl::string_view tail, bool hold_incomplete_dump) {
  const size_t last_nl = tail.rfind('\n');
  if (last_nl == absl::string_view::npos) return 0;
  absl::string_view whole = tail.substr(0, last_nl + 1);
  if (!hold_incomplete_dump) return static_cast<int64_t>(whole.size());
  // The last dump marker and the records after it.
  size_t marker = absl::string_view::npos;
  int64_t announced = 0;
  int64_t after = 0;
  size_t pos = 0;
  while (pos < whole.size()) {
    size_t nl = whole.find('\n', pos);
    absl::string_view line = whole.substr(pos, nl - pos);
    if (absl::StrContains(line, "\"dump_stats\"")) {
      marker = pos;
      announced =
          IntField(line, "coll_records") + IntField(line, "p2p_records");
      after = 0;
    } else if (absl::StrContains(line, "\"coll_perf\"") ||
               absl::StrContains(line, "\"p2p_perf\"")) {
      ++after;
    }
    pos = nl + 1;
  }
  if (marker != absl::string_view::npos && after < announced) {
    return static_cast<int64_t>(marker);
  }
  return static_cast<int64_t>(whole.size());
}

InspectorChunk BuildInspectorChunk(absl::string_view bytes,
                                   absl::string_view file_name,
                                   const TailedLog& before) {
  InspectorChunk chunk;
  chunk.after = before;
  InspectorLog log =
      before.context.empty()
          ? ParseInspectorLog(bytes, file_name)
          : ParseInspectorLog(absl::StrCat(before.context, "\n", bytes),
                              file_name);
  AdvanceContext(bytes, &chunk.after.context, &chunk.after.context_seen);
  for (const InspectorComm& c : log.comms) {
    chunk.ring_dropped += c.coll_dropped_since_sum + c.p2p_dropped_since_sum;
  }
  if (!before.context.empty()) {
    chunk.ring_dropped -=
        IntField(before.context, "coll_dropped_since_last_dump") +
        IntField(before.context, "p2p_dropped_since_last_dump");
  }
  // Not missing: the context marker's records read in earlier chunks, and
  // those the last marker announced that a later chunk may still bring.
  if (auto it = log.skipped.find(kMissingSkip); it != log.skipped.end()) {
    const absl::string_view last = chunk.after.context;
    const int64_t to_come = std::max<int64_t>(
        0, IntField(last, "coll_records") + IntField(last, "p2p_records") -
               chunk.after.context_seen);
    it->second -= std::min(it->second, before.context_seen + to_come);
    if (it->second == 0) log.skipped.erase(it);
  }
  for (const auto& [reason, n] : log.skipped) chunk.skipped[reason] += n;
  if (!log.hostname.empty()) chunk.after.host = log.hostname;
  if (log.pid >= 0) chunk.after.pid = log.pid;
  // The job rank: the largest communicator named so far (ties: lower id).
  for (const InspectorComm& c : log.comms) {
    if (c.rank < 0 || c.n_ranks <= 0) continue;
    TailedLog& a = chunk.after;
    const bool larger = c.n_ranks > a.world_size ||
                        (c.n_ranks == a.world_size && !a.rank_comm.empty() &&
                         c.id < a.rank_comm);
    if (!larger) continue;
    if (a.rank >= 0 && a.rank != c.rank) chunk.rank_changed = true;
    a.rank = c.rank;
    a.world_size = c.n_ranks;
    a.rank_comm = c.id;
  }
  Trace& t = chunk.trace;
  t.rank = chunk.after.rank;
  t.world_size = chunk.after.world_size;
  t.host = chunk.after.host;
  t.pid = chunk.after.pid;
  t.source_format = "inspector";
  NameInterner names(&t);
  for (const InspectorOp& op : log.ops) {
    if (op.p2p) {
      chunk.skipped[kP2pSkip]++;
      continue;
    }
    if (op.kernel_start_us < 0 || op.kernel_stop_us < op.kernel_start_us) {
      continue;  // Exec-time only: the job's pool places it.
    }
    const InspectorComm& c = log.comms[op.comm];
    AppendInspectorCollective(
        t, names, c.id, log.op_names[op.name], op.sn, c.n_ranks, StreamOf(c.id),
        kNoName, op.kernel_start_us * 1000, op.kernel_stop_us * 1000);
    ++chunk.records;
  }
  chunk.pos_offset = before.context.empty() ? 0 : before.context_seen;
  chunk.log = std::move(log);
  return chunk;
}

absl::StatusOr<std::unique_ptr<InspectorTailer>> InspectorTailer::Create(
    InspectorTailerOptions options, EventProducer* producer) {
  if (options.state_dir.empty()) {
    return absl::InvalidArgumentError("InspectorTailer: no state directory");
  }
  ASSIGN_OR_RETURN(InspectorOffsets offsets,
                   InspectorOffsets::Open(options.state_dir));
  std::unique_ptr<InspectorTailer> t(
      new InspectorTailer(std::move(options), producer, std::move(offsets)));
  t->exec_path_ = (fs::path(t->options_.state_dir) / kExecFile).string();
  RETURN_IF_ERROR(t->LoadExecState());
  return t;
}

InspectorTailer::JobPool& InspectorTailer::PoolOf(const std::string& job) {
  auto it = pools_.find(job);
  if (it == pools_.end())
    it = pools_.emplace(job, JobPool(options_.exec)).first;
  return it->second;
}

absl::Status InspectorTailer::WriteExecState() const {
  std::string out = absl::StrCat(kExecHeader, "\n");
  for (const auto& [job, jp] : pools_) {
    absl::StrAppend(&out, "job\t", job, "\t", jp.acked, "\t", jp.pending_to,
                    "\t", jp.flushed ? 1 : 0, "\t", jp.in_flight_flush ? 1 : 0,
                    "\n");
    for (const auto& [log, st] : jp.streams) {
      absl::StrAppend(&out, "stream\t", job, "\t", log, "\t",
                      absl::Hex(st.producer_id), "\t", st.next_sequence, "\n");
    }
  }
  return WriteFileAtomically(exec_path_, out);
}

absl::Status InspectorTailer::LoadExecState() {
  std::ifstream in(exec_path_);
  if (!in) return absl::OkStatus();
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(
        exec_path_, ": ", why,
        " (deleting it and inspector-offsets makes the watcher follow every "
        "Inspector log from its start again: expect duplicates)"));
  };
  std::string line;
  if (!std::getline(in, line)) return absl::OkStatus();
  if (line != kExecHeader) return bad("not an exec-time state file");
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    if (f.size() == 6 && f[0] == "job") {
      JobPool& jp = PoolOf(f[1]);
      int flushed = 0;
      int in_flight_flush = 0;
      if (!absl::SimpleAtoi(f[2], &jp.acked) ||
          !absl::SimpleAtoi(f[3], &jp.pending_to) ||
          !absl::SimpleAtoi(f[4], &flushed) ||
          !absl::SimpleAtoi(f[5], &in_flight_flush)) {
        return bad("a bad number");
      }
      jp.flushed = flushed != 0;
      jp.in_flight_flush = in_flight_flush != 0;
    } else if (f.size() == 5 && f[0] == "stream") {
      JobPool::Stream& st = PoolOf(f[1]).streams[f[2]];
      if (!absl::SimpleHexAtoi(f[3], &st.producer_id) ||
          !absl::SimpleAtoi(f[4], &st.next_sequence)) {
        return bad("a bad number");
      }
    } else {
      return bad("a line it does not know");
    }
  }
  // Rebuild each pool from its logs as acknowledged, then place again what
  // was acknowledged, without sending it.
  for (auto& [job, jp] : pools_) {
    for (const auto& [name, t] : offsets_.logs()) {
      if (t.offset <= 0 || JobOf(name) != job) continue;
      const std::string path = (fs::path(options_.dir) / name).string();
      struct stat st;
      if (::stat(path.c_str(), &st) != 0 ||
          static_cast<uint64_t>(st.st_ino) != t.ino ||
          static_cast<uint64_t>(st.st_dev) != t.dev) {
        spdlog::warn(
            "{}: gone or replaced: its exec-time records are not "
            "pooled again",
            path);
        continue;
      }
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return Errno(errno, absl::StrCat("opening ", path));
      absl::StatusOr<std::string> bytes = ReadAt(fd, 0, t.offset);
      ::close(fd);
      if (!bytes.ok()) return bytes.status();
      jp.pool.Add(name, ParseInspectorLog(*bytes, name));
    }
    int64_t replayed = static_cast<int64_t>(jp.pool.Advance(jp.acked).size());
    if (replayed < jp.acked && jp.flushed) {
      // What a flush placed after the job's logs had stopped growing.
      replayed += static_cast<int64_t>(
          jp.pool.Advance(jp.acked - replayed, /*flush=*/true).size());
    }
    if (replayed != jp.acked) {
      spdlog::warn(
          "job {}: {} exec-time instances were acknowledged, the logs give "
          "{} again: the rest is placed anew",
          job, jp.acked, replayed);
    }
  }
  return absl::OkStatus();
}

void InspectorTailer::UpdateExecStats() {
  int64_t not_sent = 0;
  int64_t held = 0;
  std::map<std::string, int64_t> counts;
  for (const auto& [job, jp] : pools_) {
    not_sent += jp.not_sent;
    if (!jp.partial && !jp.pool.Whole()) {
      not_sent += jp.pool.records_held();
    } else {
      held += jp.pool.records_held();
    }
    for (const auto& [reason, n] : jp.pool.counts()) counts[reason] += n;
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.exec_records_held = held;
  if (not_sent > 0) {
    stats_.skipped[kExecTimeOnlySkip] = not_sent;
  } else {
    stats_.skipped.erase(kExecTimeOnlySkip);
  }
  for (const auto& [reason, n] : counts) stats_.skipped[reason] = n;
}

absl::StatusOr<size_t> InspectorTailer::SendAsBatches(
    const std::string& job, Trace trace, const BatchHeader& identity,
    uint64_t first_sequence) {
  BatchedTrace stream(std::move(trace), identity, options_.batching);
  EventBatchEncoder encoder(&stream.trace());
  for (size_t i = 0; i < stream.num_batches(); ++i) {
    const BatchSlice& s = stream.batch(i);
    BatchHeader header = stream.header();
    header.observation.reset();
    header.sequence = first_sequence + i;
    RETURN_IF_ERROR(producer_->Send(
        job,
        encoder.Encode(header, s.gpu_begin, s.gpu_end, s.cpu_begin, s.cpu_end,
                       s.collectives_begin, s.collectives_end),
        s.events()));
  }
  return stream.num_batches();
}

absl::Status InspectorTailer::SendPooled(absl::Time now) {
  for (auto& [job, jp] : pools_) {
    if (jp.partial) continue;
    if (!jp.pool.Whole()) {
      if (jp.pool.SeenUs() > absl::ToInt64Microseconds(options_.exec.expire)) {
        const auto [seen, size] = jp.pool.WholeProgress();
        spdlog::warn(
            "job {}: exec-time-only Inspector records not sent: the directory "
            "holds logs of {} of the {} processes of the job's largest "
            "communicator after its dumps spanned {} (live needs every "
            "process's log in one dump directory, or verbose records)",
            job, seen, size, absl::FormatDuration(options_.exec.expire));
        jp.not_sent += jp.pool.records_held();
        jp.partial = true;
        jp.pool = ExecTimePool(options_.exec);
      }
      continue;
    }
    const bool resend = jp.pending_to > jp.acked;
    const bool idle = now - jp.last_grew >= options_.exec_idle;
    std::vector<PlacedInstance> placed =
        jp.pool.Advance(resend ? jp.pending_to - jp.acked : -1,
                        resend ? jp.in_flight_flush : false);
    bool flush = resend && jp.in_flight_flush;
    if (placed.empty() && !resend && idle) {
      placed = jp.pool.Advance(-1, /*flush=*/true);
      flush = true;
    }
    if (placed.empty()) continue;
    jp.in_flight_flush = flush;
    if (flush) jp.flushed = true;
    const int64_t to = jp.acked + static_cast<int64_t>(placed.size());
    if (resend && to != jp.pending_to) {
      spdlog::warn(
          "job {}: a range of exec-time instances in flight at a restart "
          "gives {} of {} again",
          job, placed.size(), jp.pending_to - jp.acked);
    }
    jp.pending_to = to;
    if (!resend) RETURN_IF_ERROR(WriteExecState());
    // Each log's kernels, in placement order (ascending start).
    std::map<std::string,
             std::vector<std::pair<const PlacedInstance*, int64_t>>>
        by_log;
    for (const PlacedInstance& inst : placed) {
      for (const PlacedMember& m : inst.members) {
        by_log[m.log].push_back({&inst, m.start_ns});
      }
    }
    std::map<std::string, uint64_t> next;
    int64_t batches = 0;
    int64_t records = 0;
    for (const auto& [log, kernels] : by_log) {
      const TailedLog& e = offsets_.logs()[log];
      JobPool::Stream& st = jp.streams[log];
      Trace t;
      t.rank = e.rank;
      t.world_size = e.world_size;
      t.host = e.host;
      t.pid = e.pid;  // The member's own process, not the pool's.
      t.source_format = "inspector";
      NameInterner names(&t);
      for (const auto& [inst, start] : kernels) {
        AppendInspectorCollective(t, names, inst->comm, inst->coll, inst->sn,
                                  inst->n_ranks, StreamOf(inst->comm), kNoName,
                                  start, inst->end_ns);
        ++records;
      }
      BatchHeader identity;
      identity.job = job;
      identity.host = e.host;
      identity.rank = e.rank;
      identity.world_size = e.world_size;
      identity.pid = e.pid;
      identity.producer_id = st.producer_id;
      ASSIGN_OR_RETURN(size_t sent, SendAsBatches(job, std::move(t), identity,
                                                  st.next_sequence));
      next[log] = st.next_sequence + sent;
      batches += static_cast<int64_t>(sent);
    }
    RETURN_IF_ERROR(producer_->Flush(options_.flush_timeout));
    for (const auto& [log, seq] : next) jp.streams[log].next_sequence = seq;
    jp.acked = to;
    jp.pending_to = -1;
    RETURN_IF_ERROR(WriteExecState());
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.batches_sent += batches;
    stats_.records_sent += records;
    stats_.exec_instances_sent += static_cast<int64_t>(placed.size());
  }
  return absl::OkStatus();
}

InspectorTailStats InspectorTailer::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void InspectorTailer::Count(const std::string& reason, int64_t n) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.skipped[reason] += n;
}

std::string InspectorTailer::JobOf(const std::string& name) const {
  if (!options_.job.empty()) return options_.job;
  if (options_.job_pattern) {
    if (auto m = options_.job_pattern->Match(name); m && !m->job.empty()) {
      return m->job;
    }
  }
  return JobFromInspectorDirName(options_.dir);
}

absl::Status InspectorTailer::PollOnce(absl::Time now) {
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(options_.dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (IsTailedInspectorName(name)) names.push_back(name);
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("listing ", options_.dir, ": ", ec.message()));
  }
  std::sort(names.begin(), names.end());
  int64_t logs = 0;
  for (const std::string& name : names) {
    RETURN_IF_ERROR(Follow(name, now));
    if (seen_[name].is_log) ++logs;
  }
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.logs = logs;
  }
  absl::Status sent = SendPooled(now);
  UpdateExecStats();
  return sent;
}

absl::Status InspectorTailer::Follow(const std::string& name, absl::Time now) {
  const std::string path = (fs::path(options_.dir) / name).string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::OkStatus();  // Gone or unreadable: next poll.
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return absl::OkStatus();
  Seen& seen = seen_[name];
  if (seen.size != st.st_size) {
    seen.size = st.st_size;
    seen.grew_at = now;
    if (auto it = pools_.find(JobOf(name)); it != pools_.end()) {
      it->second.last_grew = now;
    }
  }
  auto& logs = offsets_.logs();
  auto known = logs.find(name);
  if (!seen.checked) {
    if (known != logs.end()) {
      seen.is_log = true;
      seen.checked = true;
    } else {
      if (st.st_size == 0) return absl::OkStatus();
      absl::StatusOr<std::string> head = ReadAt(fd, 0, 64 << 10);
      if (!head.ok()) return absl::OkStatus();
      if (head->find('\n') == std::string::npos &&
          head->size() < size_t{64 << 10}) {
        return absl::OkStatus();  // First line not complete yet.
      }
      seen.checked = true;
      seen.is_log = LooksLikeInspectorLog(*head);
    }
  }
  if (!seen.is_log) return absl::OkStatus();
  const std::string job = JobOf(name);
  if (job.empty()) {
    if (!seen.no_job_logged) {
      seen.no_job_logged = true;
      spdlog::warn(
          "{}: an Inspector log but no job: give --job, --job-from-name or a "
          "dump directory named nccl-inspector-<job id>",
          path);
      Count("no job (log not followed)", 1);
    }
    return absl::OkStatus();
  }

  if (known == logs.end()) {
    TailedLog t;
    t.name = name;
    t.dev = st.st_dev;
    t.ino = st.st_ino;
    known = logs.emplace(name, std::move(t)).first;
  }
  TailedLog& entry = known->second;

  // A read that fails before anything is sent is retried at the next poll
  // (the file may be going away); one log does not stop the others.
  auto read = [&](int64_t offset, int64_t len, std::string* out) {
    absl::StatusOr<std::string> r = ReadAt(fd, offset, len);
    if (!r.ok()) {
      spdlog::warn("{}: {}: retried at the next poll", path,
                   std::string(r.status().message()));
      return false;
    }
    *out = *std::move(r);
    return true;
  };

  // Truncated or replaced: follow it from its start as a new producer.
  std::string why;
  if (entry.dev != static_cast<uint64_t>(st.st_dev) ||
      entry.ino != static_cast<uint64_t>(st.st_ino)) {
    why = "replaced (another file under its name)";
  } else if (st.st_size < entry.offset ||
             st.st_size < std::max<int64_t>(entry.pending_end, 0)) {
    why = absl::StrCat("truncated (", st.st_size, " bytes, ",
                       std::max(entry.offset, entry.pending_end),
                       " already read)");
  } else if (entry.head_len > 0) {
    std::string head;
    if (!read(0, entry.head_len, &head)) return absl::OkStatus();
    if (ContentHash(head) != entry.head_hash) {
      why = "replaced (its first bytes changed)";
    }
  }
  if (!why.empty()) {
    spdlog::warn("{}: {}: following it from its start as a new log", path, why);
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      if (absl::StartsWith(why, "truncated")) {
        ++stats_.truncated;
      } else {
        ++stats_.replaced;
      }
    }
    TailedLog fresh;
    fresh.name = name;
    fresh.dev = st.st_dev;
    fresh.ino = st.st_ino;
    fresh.generation = entry.generation + 1;
    entry = fresh;
    RETURN_IF_ERROR(offsets_.Write());
  }

  // The chunk: a pending one again exactly, else what is new.
  const bool resend = entry.pending_end > entry.offset;
  int64_t end = 0;
  std::string bytes;
  if (resend) {
    if (!read(entry.offset, entry.pending_end - entry.offset, &bytes)) {
      return absl::OkStatus();
    }
    end = entry.pending_end;
  } else {
    if (st.st_size <= entry.offset) return absl::OkStatus();
    const int64_t want =
        std::min<int64_t>(st.st_size - entry.offset, options_.max_chunk_bytes);
    if (!read(entry.offset, want, &bytes)) return absl::OkStatus();
    const bool growing = now - seen.grew_at < options_.settle;
    int64_t len = ChunkLength(bytes, growing);
    if (len == 0 && !growing && !seen.long_line_counted &&
        bytes.find('\n') == std::string::npos &&
        static_cast<int64_t>(bytes.size()) >= options_.max_chunk_bytes) {
      seen.long_line_counted = true;
      // One line longer than a chunk: not a record the plugin writes.
      const int64_t max = options_.max_chunk_bytes;
      Count(absl::StrCat("line over ",
                         max % (int64_t{1} << 20) == 0
                             ? absl::StrCat(max >> 20, " MiB")
                             : absl::StrCat(max, " bytes"),
                         " (waits: the log is not followed past it)"),
            1);
    }
    if (len == 0) return absl::OkStatus();
    bytes.resize(static_cast<size_t>(len));
    end = entry.offset + len;
  }

  if (entry.producer_id == 0) {
    // The file's first line names the run (its dump timestamp, host, pid).
    std::string head;
    if (!read(0, kHeadBytes, &head)) return absl::OkStatus();
    const absl::string_view first =
        absl::string_view(head).substr(0, head.find('\n'));
    entry.producer_id =
        ContentHash(absl::StrCat("bubblewatch inspector log\n", job, "\n", name,
                                 "\n", entry.generation, "\n", first));
    if (entry.producer_id == 0) entry.producer_id = 1;
  }
  if (!resend) {
    entry.pending_end = end;
    RETURN_IF_ERROR(offsets_.Write());
  }

  InspectorChunk chunk = BuildInspectorChunk(bytes, name, entry);
  size_t batches = 0;
  if (!chunk.trace.gpu.empty()) {
    BatchHeader identity;
    identity.job = job;
    identity.host = chunk.after.host;
    identity.rank = chunk.after.rank;
    identity.world_size = chunk.after.world_size;
    identity.pid = chunk.after.pid;
    identity.producer_id = entry.producer_id;
    ASSIGN_OR_RETURN(batches, SendAsBatches(job, std::move(chunk.trace),
                                            identity, entry.next_sequence));
    RETURN_IF_ERROR(producer_->Flush(options_.flush_timeout));
  }
  const TailedLog& after = chunk.after;
  entry.rank = after.rank;
  entry.world_size = after.world_size;
  entry.rank_comm = after.rank_comm;
  entry.host = after.host;
  entry.pid = after.pid;
  entry.context = after.context;
  entry.context_seen = after.context_seen;
  entry.offset = end;
  entry.pending_end = -1;
  entry.next_sequence += batches;
  if (entry.head_len < kHeadBytes) {
    entry.head_len = std::min<int64_t>(kHeadBytes, end);
    ASSIGN_OR_RETURN(std::string head, ReadAt(fd, 0, entry.head_len));
    entry.head_len = static_cast<int64_t>(head.size());
    entry.head_hash = ContentHash(head);
  }
  RETURN_IF_ERROR(offsets_.Write());
  // Exec-time-only records: to the job's pool, once acknowledged as read
  // (a restart rebuilds the pool from the logs up to the offsets).
  int64_t exec_records = 0;
  for (const InspectorOp& op : chunk.log.ops) {
    if (!op.p2p && op.kernel_start_us < 0) ++exec_records;
  }
  if (exec_records > 0) {
    JobPool& jp = PoolOf(job);
    jp.last_grew = std::max(jp.last_grew, seen.grew_at);
    if (jp.partial) {
      jp.not_sent += exec_records;
    } else {
      JobPool::Stream& st = jp.streams[name];
      if (st.producer_id == 0) {
        st.producer_id = ContentHash(
            absl::StrCat("bubblewatch inspector exec-time timeline\n",
                         absl::Hex(entry.producer_id)));
        if (st.producer_id == 0) st.producer_id = 1;
      }
      jp.pool.Add(name, chunk.log, chunk.pos_offset);
    }
  }
  if (chunk.ring_dropped > 0) {
    spdlog::warn(
        "{}: the plugin's ring dropped {} records before its dump (a shorter "
        "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS keeps them): their "
        "instances are unmatched",
        path, chunk.ring_dropped);
  }
  if (chunk.rank_changed) {
    spdlog::warn(
        "{}: job rank now {} of {} (communicator {}): a larger communicator "
        "appeared after records were sent under another rank",
        path, after.rank, after.world_size, after.rank_comm);
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++stats_.chunks_sent;
  stats_.batches_sent += static_cast<int64_t>(batches);
  stats_.records_sent += chunk.records;
  stats_.bytes_read += static_cast<int64_t>(bytes.size());
  if (resend) ++stats_.resent_pending;
  if (chunk.rank_changed) ++stats_.rank_changes;
  stats_.ring_dropped += std::max<int64_t>(chunk.ring_dropped, 0);
  for (const auto& [reason, n] : chunk.skipped) stats_.skipped[reason] += n;
  return absl::OkStatus();
}

}  // namespace bubblewatch
