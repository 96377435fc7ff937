// Opening, reading and describing the RocksDB window store. Writes live in
// rocksdb_window_store_writes.cc.
#include "storage/rocksdb_window_store.h"

#include <cstdint>
#include <filesystem>
#include <limits>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "rocksdb/write_batch.h"
#include "schemas/window_summary_codec.h"
#include "storage/rocksdb_options.h"
#include "storage/rocksdb_status.h"
#include "storage/secondary_dir.h"
#include "storage/window_key.h"

namespace bubblewatch {
namespace {

// The ends of the int64 ns range, which CeilNs clamps to.
constexpr int64_t kMinNs = std::numeric_limits<int64_t>::min();
constexpr int64_t kMaxNs = std::numeric_limits<int64_t>::max();

// The smallest ns value n with FromUnixNanos(n) >= t, or nullopt when t lies
// beyond every int64 ns value.
std::optional<int64_t> CeilNs(absl::Time t) {
  if (t <= absl::FromUnixNanos(kMinNs)) return kMinNs;
  if (t > absl::FromUnixNanos(kMaxNs)) return std::nullopt;
  int64_t ns = absl::ToUnixNanos(t);
  if (absl::FromUnixNanos(ns) < t) ++ns;
  return ns;
}

absl::StatusOr<WindowSummary> DecodeStored(
    const rocksdb::Slice& key, const rocksdb::Slice& value,
    WindowDetail detail = WindowDetail::kFull,
    std::vector<uint64_t>* scratch = nullptr) {
  absl::StatusOr<WindowSummary> window =
      DecodeWindowSummary(View(value), detail, scratch);
  if (!window.ok()) {
    absl::string_view job;
    int64_t start_ns = 0;
    const std::string where =
        ParseWindowKey(View(key), &job, &start_ns)
            ? absl::StrCat("window of job ", job, " at ", start_ns)
            : absl::StrCat("latest window of job ", View(key));
    return absl::DataLossError(
        absl::StrCat(where, ": ", window.status().message()));
  }
  return window;
}

JobInfo ToJobInfo(absl::string_view job, const JobRecord& r) {
  return JobInfo{.job = std::string(job),
                 .last_event_ns = FromWire(r.last_event_ns),
                 .last_seen_wall = absl::FromUnixNanos(r.last_seen_wall_ns),
                 .window_count = r.window_count,
                 .latest_window_start_ns = r.latest_window_start_ns,
                 .lifecycle = ReadJobLifecycle(r.state)};
}

// Checks that an existing database holds only our column families (and, for
// a secondary, the three it cannot work without). Returns whether `latest`
// is there: stores written before it existed lack it.
absl::StatusOr<bool> CheckColumnFamilies(const std::string& path,
                                         bool secondary) {
  std::vector<std::string> families;
  RETURN_IF_ERROR(FromRocksDb(
      rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), path, &families),
      absl::StrCat("listing the column families of ", path)));
  int required = 0;
  bool has_latest = false;
  bool foreign = false;
  for (const std::string& f : families) {
    if (f == kWindowsColumnFamily || f == kJobsColumnFamily ||
        f == kProgressColumnFamily) {
      ++required;
    } else if (f == kLatestColumnFamily) {
      has_latest = true;
    } else if (f != rocksdb::kDefaultColumnFamilyName) {
      foreign = true;
    }
  }
  if (foreign || (secondary && required != 3)) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " holds a RocksDB database with column families [",
        absl::StrJoin(families, ", "),
        "], not a bubblewatch window store (default, windows, jobs, "
        "progress, latest)"));
  }
  return has_latest;
}

// The windows of one job whose start lies in [begin, end), in start order:
// the iterator and the key bound it reads, kept together because RocksDB
// holds a pointer to the bound. Empty (no iterator) when the range is.
class JobWindowRange {
 public:
  JobWindowRange(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* windows,
                 absl::string_view job, absl::Time begin, absl::Time end) {
    const std::optional<int64_t> lo = CeilNs(begin);
    if (!lo || begin >= end) return;
    const std::optional<int64_t> hi = CeilNs(end);
    upper_ = hi ? WindowKey(job, *hi) : WindowKeyLimit(job);
    upper_slice_ = rocksdb::Slice(upper_);
    rocksdb::ReadOptions ro;
    ro.iterate_upper_bound = &upper_slice_;
    it_.reset(db.NewIterator(ro, windows));
    it_->Seek(WindowKey(job, *lo));
  }
  JobWindowRange(const JobWindowRange&) = delete;
  JobWindowRange& operator=(const JobWindowRange&) = delete;

  bool Valid() const { return it_ != nullptr && it_->Valid(); }
  void Next() { it_->Next(); }
  rocksdb::Slice key() const { return it_->key(); }
  rocksdb::Slice value() const { return it_->value(); }
  rocksdb::Status status() const {
    return it_ != nullptr ? it_->status() : rocksdb::Status::OK();
  }

 private:
  std::string upper_;
  rocksdb::Slice upper_slice_;
  std::unique_ptr<rocksdb::Iterator> it_;
};

}  // namespace

RocksDbWindowStore::RocksDbWindowStore(std::string path, Mode mode,
                                       std::string secondary_dir,
                                       std::shared_ptr<rocksdb::Cache> cache,
                                       int64_t memtable_budget)
    : path_(std::move(path)),
      mode_(mode),
      secondary_dir_(std::move(secondary_dir)),
      cache_(std::move(cache)),
      memtable_budget_(memtable_budget) {}

absl::StatusOr<std::unique_ptr<RocksDbWindowStore>> RocksDbWindowStore::Open(
    absl::string_view path_view, const WindowStoreOptions& options, Mode mode,
    rocksdb::Env* env) {
  const std::string path(path_view);
  const bool secondary = mode == Mode::kSecondary;
  if (path.empty()) return absl::InvalidArgumentError("empty store path");
  RETURN_IF_ERROR(options.Validate());
  rocksdb::Env* fs = env != nullptr ? env : rocksdb::Env::Default();
  const bool exists = fs->FileExists(path + "/CURRENT").ok();
  if (secondary && !exists) {
    return absl::NotFoundError(absl::StrCat(
        "no window store at ", path, " (no RocksDB CURRENT file there)"));
  }
  bool had_latest = false;
  if (exists) {
    ASSIGN_OR_RETURN(had_latest, CheckColumnFamilies(path, secondary));
  }

  std::string secondary_dir;
  if (secondary) {
    ASSIGN_OR_RETURN(secondary_dir, MakeSecondaryDir());
  }
  if (!secondary && !exists) {
    // RocksDB lists the directory (for its info log) before creating it;
    // create it first so that a new store opens without an error line. A
    // failure here is reported by DB::Open below.
    fs->CreateDirIfMissing(path).PermitUncheckedError();
  }
  RocksDbConfig config = MakeRocksDbConfig(options, secondary, env);
  // A secondary cannot create `latest`; it falls back to seeking.
  if (secondary && !had_latest) config.column_families.pop_back();
  rocksdb::DB* raw = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  const rocksdb::Status s =
      secondary
          ? rocksdb::DB::OpenAsSecondary(config.db, path, secondary_dir,
                                         config.column_families, &handles, &raw)
          : rocksdb::DB::Open(config.db, path, config.column_families, &handles,
                              &raw);
  if (!s.ok()) {
    std::error_code ec;
    if (secondary) std::filesystem::remove_all(secondary_dir, ec);
    return FromRocksDb(s, absl::StrCat("opening the window store at ", path,
                                       secondary ? " read-only" : ""));
  }
  std::unique_ptr<RocksDbWindowStore> store(
      new RocksDbWindowStore(path, mode, std::move(secondary_dir),
                             config.block_cache, config.memtable_budget));
  store->db_.reset(raw);
  store->handles_ = std::move(handles);
  store->windows_ = store->handles_[1];
  store->jobs_ = store->handles_[2];
  store->progress_ = store->handles_[3];
  if (store->handles_.size() > 4) store->latest_ = store->handles_[4];
  store->sync_commits_ = options.sync_commits;
  if (exists && !had_latest && !secondary) {
    RETURN_IF_ERROR(store->PopulateLatest());
  }
  if (!secondary) RETURN_IF_ERROR(store->BuildRunningSums());
  return store;
}

RocksDbWindowStore::~RocksDbWindowStore() {
  if (db_ != nullptr) {
    for (rocksdb::ColumnFamilyHandle* h : handles_) {
      // Destroying a handle only fails for a null one; nothing to report.
      db_->DestroyColumnFamilyHandle(h).PermitUncheckedError();
    }
    // The WAL already holds every commit; a failed close loses nothing.
    db_->Close().PermitUncheckedError();
    db_.reset();
  }
  if (!secondary_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(secondary_dir_, ec);
  }
}

absl::StatusOr<std::vector<WindowSummary>> RocksDbWindowStore::Scan(
    absl::string_view job, absl::Time begin, absl::Time end,
    WindowDetail detail) const {
  RETURN_IF_ERROR(ValidateJobName(job));
  std::vector<WindowSummary> out;
  JobWindowRange range(*db_, windows_, job, begin, end);
  std::vector<uint64_t> scratch;  // One aligned copy buffer for the scan.
  for (; range.Valid(); range.Next()) {
    ASSIGN_OR_RETURN(WindowSummary w, DecodeStored(range.key(), range.value(),
                                                   detail, &scratch));
    out.push_back(std::move(w));
  }
  RETURN_IF_ERROR(FromRocksDb(
      range.status(), absl::StrCat("scanning the windows of job ", job)));
  return out;
}

absl::StatusOr<EncodedWindows> RocksDbWindowStore::ScanEncoded(
    absl::string_view job, absl::Time begin, absl::Time end) const {
  RETURN_IF_ERROR(ValidateJobName(job));
  EncodedWindows out;
  JobWindowRange range(*db_, windows_, job, begin, end);
  for (; range.Valid(); range.Next()) {
    absl::string_view key_job;
    int64_t start_ns = 0;
    if (!ParseWindowKey(View(range.key()), &key_job, &start_ns)) {
      return absl::DataLossError(
          absl::StrCat("malformed window key of job ", job, " in the store"));
    }
    out.Add(start_ns, View(range.value()));
  }
  RETURN_IF_ERROR(FromRocksDb(
      range.status(), absl::StrCat("scanning the windows of job ", job)));
  return out;
}

absl::StatusOr<std::optional<WindowSummary>> RocksDbWindowStore::Latest(
    absl::string_view job) const {
  RETURN_IF_ERROR(ValidateJobName(job));
  const std::string lower = WindowKeyPrefix(job);
  const std::string upper = WindowKeyLimit(job);
  const rocksdb::Slice lower_slice(lower);
  const rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_lower_bound = &lower_slice;
  ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, windows_));
  it->SeekToLast();
  if (!it->Valid()) {
    RETURN_IF_ERROR(FromRocksDb(
        it->status(), absl::StrCat("reading the latest window of job ", job)));
    return std::nullopt;
  }
  return DecodeStored(it->key(), it->value());
}

absl::StatusOr<std::vector<WindowSummary>>
RocksDbWindowStore::LatestOfEveryJob() const {
  if (latest_ == nullptr) return LatestBySeeking();
  std::vector<WindowSummary> out;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), latest_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    ASSIGN_OR_RETURN(WindowSummary w, DecodeStored(it->key(), it->value()));
    out.push_back(std::move(w));
  }
  RETURN_IF_ERROR(
      FromRocksDb(it->status(), "reading the latest window of every job"));
  return out;
}

absl::StatusOr<std::vector<WindowSummary>> RocksDbWindowStore::LatestBySeeking()
    const {
  ASSIGN_OR_RETURN(std::vector<JobInfo> jobs, ListJobs());
  std::vector<WindowSummary> out;
  for (const JobInfo& job : jobs) {
    if (job.window_count == 0) continue;
    ASSIGN_OR_RETURN(std::optional<WindowSummary> w, Latest(job.job));
    if (w) out.push_back(std::move(*w));
  }
  return out;
}

absl::StatusOr<EncodedLatestWindows>
RocksDbWindowStore::LatestOfEveryJobEncoded() const {
  EncodedLatestWindows out;
  if (latest_ == nullptr) {
    ASSIGN_OR_RETURN(std::vector<WindowSummary> latest, LatestBySeeking());
    for (const WindowSummary& w : latest) {
      out.jobs.push_back(w.job);
      out.windows.Add(w.window.start_ns, EncodeWindowSummary(w));
    }
    return out;
  }
  // A pass over the whole family (tens of MB for 10,000 jobs): kept out of
  // the block cache, so that it does not evict what the fleet query reads
  // next (the running sums' blocks, which a repeated query finds there).
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, latest_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    out.jobs.emplace_back(View(it->key()));
    // The key holds no start; readers take it from the window.
    out.windows.Add(0, View(it->value()));
  }
  RETURN_IF_ERROR(
      FromRocksDb(it->status(), "reading the latest window of every job"));
  return out;
}

absl::StatusOr<bool> RocksDbWindowStore::HasRunningSums() const {
  rocksdb::PinnableSlice value;
  const rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), db_->DefaultColumnFamily(),
               SumsCompleteKey(), &value);
  if (s.IsNotFound()) return false;
  RETURN_IF_ERROR(FromRocksDb(s, "reading the running-sums marker"));
  // The marker holds the records' format: sums of another format (1: before
  // the collective fields, 2: before the straggler cost) count as none, so a
  // primary rebuilds them and a read-only instance scans.
  return View(value) == absl::StrCat(kRunningSumsFormat);
}

absl::StatusOr<std::optional<std::vector<JobPeriodSums>>>
RocksDbWindowStore::PeriodSumsOfEveryJob(absl::Time begin,
                                         absl::Time end) const {
  ASSIGN_OR_RETURN(const bool has_sums, HasRunningSums());
  if (!has_sums) return std::nullopt;
  std::vector<JobPeriodSums> out;
  const std::optional<int64_t> lo = CeilNs(begin);
  if (!lo || begin >= end) return out;
  const std::optional<int64_t> hi = CeilNs(end);
  ASSIGN_OR_RETURN(std::vector<JobInfo> jobs, ListJobs());
  // One iterator for every job: jobs come in key order, so its seeks move
  // forward through the family.
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), db_->DefaultColumnFamily()));
  auto decode =
      [&](absl::string_view job) -> absl::StatusOr<RunningSumsRecord> {
    absl::StatusOr<RunningSumsRecord> r = DecodeRunningSums(View(it->value()));
    if (!r.ok()) {
      return absl::DataLossError(absl::StrCat("running sums of job ", job, ": ",
                                              r.status().message()));
    }
    return r;
  };
  // The newest record of each job, read in one pass beside the job list
  // (same order): the last record of a period that reaches past the job's
  // newest window, without a seek into the big range.
  std::unique_ptr<rocksdb::Iterator> newest(
      db_->NewIterator(rocksdb::ReadOptions(), db_->DefaultColumnFamily()));
  const std::string newest_prefix = SumsLastKeyPrefix();
  newest->Seek(newest_prefix);
  for (const JobInfo& job : jobs) {
    // The record's latest start and the sums are written in one batch.
    if (job.window_count == 0 || job.latest_window_start_ns < *lo) continue;
    const std::string upper =
        hi ? SumsKey(job.job, *hi) : SumsKeyLimit(job.job);
    it->Seek(SumsKey(job.job, *lo));
    if (!it->Valid() || it->key().compare(upper) >= 0) {
      RETURN_IF_ERROR(FromRocksDb(it->status(), "reading running sums"));
      continue;  // No window of the job starts in the period.
    }
    ASSIGN_OR_RETURN(const RunningSumsRecord first, decode(job.job));
    if (!hi || job.latest_window_start_ns < *hi) {
      const std::string newest_key = SumsLastKey(job.job);
      while (newest->Valid() && newest->key().starts_with(newest_prefix) &&
             newest->key().compare(newest_key) < 0) {
        newest->Next();
      }
      if (newest->Valid() && newest->key() == rocksdb::Slice(newest_key)) {
        int64_t start = 0;
        absl::StatusOr<RunningSumsRecord> last =
            DecodeLastRunningSums(View(newest->value()), &start);
        if (!last.ok()) {
          return absl::DataLossError(absl::StrCat(
              "running sums of job ", job.job, ": ", last.status().message()));
        }
        // A commit between the two reads moves it on; then seek below.
        if (start == job.latest_window_start_ns) {
          JobPeriodSums sums{
              .job = job.job, .sums = last->through(), .last_start_ns = start};
          sums.sums.Subtract(first.before);
          out.push_back(std::move(sums));
          continue;
        }
      }
      RETURN_IF_ERROR(FromRocksDb(newest->status(), "reading running sums"));
    }
    // The last record below `upper`: at or after `first`.
    it->SeekForPrev(upper);
    if (it->Valid() && it->key().compare(upper) == 0) it->Prev();
    absl::string_view key_job;
    int64_t last_start = 0;
    if (!it->Valid() || !ParseSumsKey(View(it->key()), &key_job, &last_start) ||
        key_job != job.job) {
      RETURN_IF_ERROR(FromRocksDb(it->status(), "reading running sums"));
      return absl::DataLossError(
          absl::StrCat("running sums of job ", job.job, " vanished mid-read"));
    }
    ASSIGN_OR_RETURN(const RunningSumsRecord last, decode(job.job));
    JobPeriodSums sums{
        .job = job.job, .sums = last.through(), .last_start_ns = last_start};
    sums.sums.Subtract(first.before);
    out.push_back(std::move(sums));
  }
  return out;
}

absl::Status RocksDbWindowStore::BuildRunningSums() {
  ASSIGN_OR_RETURN(const bool has_sums, HasRunningSums());
  if (has_sums) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<JobInfo> jobs, ListJobs());
  rocksdb::WriteOptions wo;
  wo.sync = sync_commits_;
  rocksdb::WriteBatch wb;
  std::vector<uint64_t> scratch;
  auto flush = [&]() -> absl::Status {
    RETURN_IF_ERROR(FromRocksDb(
        db_->Write(wo, &wb),
        absl::StrCat("writing the running sums of the windows in ", path_)));
    wb.Clear();
    return absl::OkStatus();
  };
  for (const JobInfo& job : jobs) {
    // Whatever an interrupted build left of this job goes first.
    wb.DeleteRange(db_->DefaultColumnFamily(), SumsKeyPrefix(job.job),
                   SumsKeyLimit(job.job));
    RunningSumsRecord record;
    std::optional<int64_t> last_start;
    JobWindowRange range(*db_, windows_, job.job, absl::InfinitePast(),
                         absl::InfiniteFuture());
    for (; range.Valid(); range.Next()) {
      absl::string_view key_job;
      int64_t start_ns = 0;
      if (!ParseWindowKey(View(range.key()), &key_job, &start_ns)) {
        return absl::DataLossError(absl::StrCat("malformed window key of job ",
                                                job.job, " in the store"));
      }
      absl::StatusOr<WindowSums> own =
          SumsOfEncodedWindow(View(range.value()), scratch);
      if (!own.ok()) {
        return absl::DataLossError(absl::StrCat("window of job ", job.job,
                                                " at ", start_ns, ": ",
                                                own.status().message()));
      }
      if (last_start.has_value()) record.before.Add(record.own);
      record.own = *own;
      wb.Put(db_->DefaultColumnFamily(), SumsKey(job.job, start_ns),
             EncodeRunningSums(record));
      last_start = start_ns;
    }
    RETURN_IF_ERROR(FromRocksDb(
        range.status(), absl::StrCat("scanning the windows of job ", job.job)));
    if (last_start.has_value()) {
      wb.Put(db_->DefaultColumnFamily(), SumsLastKey(job.job),
             EncodeLastRunningSums(*last_start, record));
    }
    if (wb.Count() >= 10'000) RETURN_IF_ERROR(flush());
  }
  wb.Put(db_->DefaultColumnFamily(), SumsCompleteKey(),
         absl::StrCat(kRunningSumsFormat));
  return flush();
}

absl::Status RocksDbWindowStore::PopulateLatest() {
  ASSIGN_OR_RETURN(std::vector<WindowSummary> latest, LatestBySeeking());
  rocksdb::WriteBatch wb;
  for (const WindowSummary& w : latest) {
    wb.Put(latest_, w.job, EncodeWindowSummary(w));
  }
  rocksdb::WriteOptions wo;
  wo.sync = sync_commits_;
  return FromRocksDb(db_->Write(wo, &wb),
                     absl::StrCat("filling the latest windows of ", path_));
}

absl::StatusOr<std::vector<JobInfo>> RocksDbWindowStore::ListJobs() const {
  std::vector<JobInfo> out;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), jobs_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    // With the state: its lifecycle is part of what a job listing shows.
    ASSIGN_OR_RETURN(JobRecord r, DecodeJobRecord(View(it->value())));
    out.push_back(ToJobInfo(View(it->key()), r));
  }
  RETURN_IF_ERROR(FromRocksDb(it->status(), "listing jobs"));
  return out;
}

absl::StatusOr<std::optional<JobRecord>> RocksDbWindowStore::ReadJobRecord(
    absl::string_view job, bool with_state) const {
  rocksdb::PinnableSlice value;
  const rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), jobs_,
               rocksdb::Slice(job.data(), job.size()), &value);
  if (s.IsNotFound()) return std::nullopt;
  RETURN_IF_ERROR(FromRocksDb(s, absl::StrCat("reading job ", job)));
  ASSIGN_OR_RETURN(JobRecord r, DecodeJobRecord(View(value), with_state));
  return r;
}

absl::StatusOr<std::optional<JobInfo>> RocksDbWindowStore::Job(
    absl::string_view job) const {
  RETURN_IF_ERROR(ValidateJobName(job));
  ASSIGN_OR_RETURN(std::optional<JobRecord> r, ReadJobRecord(job, true));
  if (!r) return std::nullopt;
  return ToJobInfo(job, *r);
}

absl::StatusOr<std::optional<std::string>> RocksDbWindowStore::JobState(
    absl::string_view job) const {
  RETURN_IF_ERROR(ValidateJobName(job));
  ASSIGN_OR_RETURN(std::optional<JobRecord> r, ReadJobRecord(job, true));
  if (!r) return std::nullopt;
  return std::move(r->state);
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
RocksDbWindowStore::AlertStates() const {
  std::vector<std::pair<std::string, std::string>> states;
  const std::string prefix = AlertStateKey("");
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), db_->DefaultColumnFamily()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    states.emplace_back(it->key().ToString().substr(prefix.size()),
                        it->value().ToString());
  }
  RETURN_IF_ERROR(FromRocksDb(it->status(), "reading alert states"));
  return states;
}

absl::StatusOr<std::optional<PartitionProgress>> RocksDbWindowStore::Progress(
    absl::string_view topic, int32_t partition) const {
  const std::string key = ProgressKey(topic, partition);
  rocksdb::PinnableSlice value;
  const rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), progress_, key, &value);
  if (s.IsNotFound()) return std::nullopt;
  RETURN_IF_ERROR(FromRocksDb(
      s, absl::StrCat("reading the progress of ", topic, "/", partition)));
  ASSIGN_OR_RETURN(ProgressRecord r, DecodeProgressRecord(View(value)));
  return PartitionProgress{.topic = std::string(topic),
                           .partition = partition,
                           .resume_offset = r.resume_offset,
                           .committed_position = r.committed_position,
                           .state = std::move(r.state)};
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
RocksDbWindowStore::PartitionJobRecords(absl::string_view topic,
                                        int32_t partition) const {
  std::vector<std::pair<std::string, std::string>> records;
  const std::string prefix = PartitionJobRecordKey(topic, partition, "");
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), progress_));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    records.emplace_back(it->key().ToString().substr(prefix.size()),
                         it->value().ToString());
  }
  RETURN_IF_ERROR(FromRocksDb(
      it->status(),
      absl::StrCat("reading the job records of ", topic, "/", partition)));
  return records;
}

absl::Status RocksDbWindowStore::Refresh() {
  if (mode_ == Mode::kPrimary) return absl::OkStatus();
  return FromRocksDb(
      db_->TryCatchUpWithPrimary(),
      absl::StrCat("catching up with the window store at ", path_));
}

StoreMemoryUsage RocksDbWindowStore::MemoryUsage() const {
  StoreMemoryUsage m;
  m.block_cache_capacity = static_cast<int64_t>(cache_->GetCapacity());
  m.block_cache_usage = static_cast<int64_t>(cache_->GetUsage());
  m.memtable_budget = memtable_budget_;
  uint64_t v = 0;
  if (db_->GetAggregatedIntProperty(
          rocksdb::DB::Properties::kCurSizeAllMemTables, &v)) {
    m.memtable_usage = static_cast<int64_t>(v);
  }
  if (db_->GetAggregatedIntProperty(
          rocksdb::DB::Properties::kEstimateTableReadersMem, &v)) {
    m.table_readers = static_cast<int64_t>(v);
  }
  return m;
}

std::string RocksDbWindowStore::Describe() const {
  const StoreMemoryUsage m = MemoryUsage();
  constexpr double kMiB = 1 << 20;
  return absl::StrFormat(
      "window store %s (%s): block cache %.1f MiB (%.1f MiB used), "
      "memtables %.1f MiB of a %.1f MiB budget, table readers %.1f MiB, "
      "WAL on%s",
      path_, mode_ == Mode::kPrimary ? "read-write" : "read-only secondary",
      m.block_cache_capacity / kMiB, m.block_cache_usage / kMiB,
      m.memtable_usage / kMiB, m.memtable_budget / kMiB, m.table_readers / kMiB,
      sync_commits_ ? ", fsync per commit" : "");
}

}  // namespace bubblewatch
