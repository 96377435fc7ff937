// Commit and retention of the RocksDB window store: the only writers.
//
// Both read-modify-write job records (window count, latest start), so they
// run under write_mu_; readers never lock.
#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "rocksdb/write_batch.h"
#include "schemas/window_summary_codec.h"
#include "storage/rocksdb_status.h"
#include "storage/rocksdb_window_store.h"
#include "storage/window_key.h"

namespace bubblewatch {
namespace {

absl::Status ValidateBatch(const StoreBatch& batch) {
  for (const WindowSummary& w : batch.windows) {
    RETURN_IF_ERROR(ValidateJobName(w.job));
    if (w.window.end_ns < w.window.start_ns) {
      return absl::InvalidArgumentError(
          absl::StrCat("window of job ", w.job, " ends (", w.window.end_ns,
                       ") before it starts (", w.window.start_ns, ")"));
    }
  }
  for (const WindowDelete& d : batch.window_deletes) {
    RETURN_IF_ERROR(ValidateJobName(d.job));
  }
  for (const JobUpdate& u : batch.jobs) RETURN_IF_ERROR(ValidateJobName(u.job));
  for (const PartitionProgress& p : batch.progress) {
    if (p.topic.empty() || p.partition < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "progress for topic \"", p.topic, "\" partition ", p.partition,
          ": the topic must be non-empty and the partition >= 0"));
    }
  }
  for (const AlertStateUpdate& a : batch.alert_states) {
    if (a.key.empty()) {
      return absl::InvalidArgumentError("alert state with an empty key");
    }
  }
  return absl::OkStatus();
}

// Windows of `r` starting at or before the returned time are expired; none
// when the job has no windows or nothing can be that old.
std::optional<int64_t> RetentionCutoff(const JobRecord& r,
                                       int64_t retention_ns) {
  if (r.window_count == 0 ||
      r.latest_window_start_ns <
          std::numeric_limits<int64_t>::min() + retention_ns) {
    return std::nullopt;
  }
  return r.latest_window_start_ns - retention_ns;
}

}  // namespace

absl::Status RocksDbWindowStore::WritableOrError() const {
  if (mode_ == Mode::kPrimary) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the window store at ", path_, " is open read-only (secondary)"));
}

absl::StatusOr<bool> RocksDbWindowStore::WindowExists(
    const std::string& key) const {
  rocksdb::PinnableSlice value;
  const rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), windows_, key, &value);
  if (s.IsNotFound()) return false;
  RETURN_IF_ERROR(FromRocksDb(s, "probing for an existing window"));
  return true;
}

absl::Status RocksDbWindowStore::Commit(const StoreBatch& batch) {
  RETURN_IF_ERROR(WritableOrError());
  RETURN_IF_ERROR(ValidateBatch(batch));
  if (batch.empty()) return absl::OkStatus();

  absl::MutexLock lock(&write_mu_);
  // The batch's jobs, read once, updated in memory, written once.
  absl::flat_hash_map<std::string, JobRecord> records;
  auto record_of = [&](const std::string& job) -> absl::StatusOr<JobRecord*> {
    auto it = records.find(job);
    if (it != records.end()) return &it->second;
    ASSIGN_OR_RETURN(std::optional<JobRecord> stored, ReadJobRecord(job, true));
    return &records.emplace(job, std::move(stored).value_or(JobRecord{}))
                .first->second;
  };

  rocksdb::WriteBatch wb;
  absl::flat_hash_set<std::string> keys_in_batch;
  // With deletes in the batch: the encoding of each window upserted, by job
  // and start, for a job whose newest window is deleted (the next newest
  // may be one of these).
  absl::flat_hash_map<std::string, std::map<int64_t, std::string>> upserted;
  for (const WindowSummary& w : batch.windows) {
    ASSIGN_OR_RETURN(JobRecord * r, record_of(w.job));
    const int64_t start = w.window.start_ns;
    std::string key = WindowKey(w.job, start);
    bool is_new = false;
    if (keys_in_batch.insert(key).second) {
      // Windows normally close in start order, so a start past the job's
      // latest is new; only a replay (or an out-of-order close) needs a
      // probe, which the Bloom filter usually answers.
      if (r->window_count == 0 || start > r->latest_window_start_ns) {
        is_new = true;
      } else {
        ASSIGN_OR_RETURN(const bool exists, WindowExists(key));
        is_new = !exists;
      }
    }
    const bool is_latest =
        r->window_count == 0 || start >= r->latest_window_start_ns;
    if (is_latest) r->latest_window_start_ns = start;
    if (r->window_count == 0) {
      r->oldest_window_start_ns = start;
    } else {
      r->oldest_window_start_ns = std::min(r->oldest_window_start_ns, start);
    }
    if (is_new) ++r->window_count;
    const std::string value = EncodeWindowSummary(w);
    wb.Put(windows_, key, value);
    // A copy for LatestOfEveryJob; a later Put of the same job in this batch
    // wins, and it is only made for a start at least as late.
    if (is_latest) wb.Put(latest_, w.job, value);
    if (!batch.window_deletes.empty()) upserted[w.job][start] = value;
  }
  if (!batch.window_deletes.empty()) {
    RETURN_IF_ERROR(AddDeletes(batch.window_deletes, keys_in_batch, upserted,
                               record_of, wb));
  }
  for (const JobUpdate& u : batch.jobs) {
    ASSIGN_OR_RETURN(JobRecord * r, record_of(u.job));
    r->last_event_ns = std::max(r->last_event_ns, u.last_event_ns);
    r->last_seen_wall_ns =
        std::max(r->last_seen_wall_ns, absl::ToUnixNanos(u.last_seen_wall));
    if (u.state) r->state = *u.state;
  }
  for (const auto& [job, record] : records) {
    wb.Put(jobs_, job, EncodeJobRecord(record));
  }
  for (const PartitionProgress& p : batch.progress) {
    wb.Put(progress_, ProgressKey(p.topic, p.partition),
           EncodeProgressRecord(
               ProgressRecord{.resume_offset = p.resume_offset,
                              .committed_position = p.committed_position,
                              .state = p.state}));
  }

  for (const AlertStateUpdate& a : batch.alert_states) {
    const std::string key = AlertStateKey(a.key);
    if (a.state) {
      wb.Put(key, *a.state);  // The default family: nothing else lives there.
    } else {
      wb.Delete(key);
    }
  }

  rocksdb::WriteOptions wo;
  wo.sync = sync_commits_;
  wo.disableWAL = false;  // Never: offsets stored with state need the WAL.
  return FromRocksDb(
      db_->Write(wo, &wb),
      absl::StrFormat("committing %d windows, %d deletes, %d job updates, "
                      "%d progress records and %d alert states to the window "
                      "store at %s",
                      batch.windows.size(), batch.window_deletes.size(),
                      batch.jobs.size(), batch.progress.size(),
                      batch.alert_states.size(), path_));
}

absl::Status RocksDbWindowStore::AddDeletes(
    const std::vector<WindowDelete>& deletes,
    const absl::flat_hash_set<std::string>& keys_in_batch,
    const absl::flat_hash_map<std::string, std::map<int64_t, std::string>>&
        upserted,
    absl::FunctionRef<absl::StatusOr<JobRecord*>(const std::string&)> record_of,
    rocksdb::WriteBatch& wb) {
  // job -> the starts of its stored windows this batch deletes.
  absl::flat_hash_map<std::string, absl::flat_hash_set<int64_t>> deleted;
  for (const WindowDelete& d : deletes) {
    const std::string key = WindowKey(d.job, d.start_ns);
    if (keys_in_batch.contains(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("window of job ", d.job, " at ", d.start_ns,
                       " is both written and deleted in one batch"));
    }
    if (deleted[d.job].contains(d.start_ns)) continue;  // Deleted twice.
    ASSIGN_OR_RETURN(const bool exists, WindowExists(key));
    if (!exists) continue;
    deleted[d.job].insert(d.start_ns);
    ASSIGN_OR_RETURN(JobRecord * r, record_of(d.job));
    r->window_count = std::max<int64_t>(0, r->window_count - 1);
    wb.Delete(windows_, key);
  }
  for (const auto& [job, starts] : deleted) {
    if (starts.empty()) continue;
    ASSIGN_OR_RETURN(JobRecord * r, record_of(job));
    if (r->window_count == 0) {
      r->latest_window_start_ns = 0;
      r->oldest_window_start_ns = 0;
      wb.Delete(latest_, job);
      continue;
    }
    const bool latest_gone = starts.contains(r->latest_window_start_ns);
    const bool oldest_gone = starts.contains(r->oldest_window_start_ns);
    if (!latest_gone && !oldest_gone) continue;
    // The job's windows as they will be: the stored ones not deleted, and
    // this batch's upserts (which replace a stored one of the same start).
    static const std::map<int64_t, std::string> kNone;
    auto up = upserted.find(job);
    const std::map<int64_t, std::string>& puts =
        up == upserted.end() ? kNone : up->second;
    const std::string lower = WindowKeyPrefix(job);
    const std::string limit = WindowKeyLimit(job);
    const rocksdb::Slice lower_slice(lower), limit_slice(limit);
    rocksdb::ReadOptions ro;
    ro.iterate_lower_bound = &lower_slice;
    ro.iterate_upper_bound = &limit_slice;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, windows_));
    auto start_of = [&]() {
      absl::string_view unused_job;
      int64_t start = 0;
      ParseWindowKey(absl::string_view(it->key().data(), it->key().size()),
                     &unused_job, &start);
      return start;
    };
    if (latest_gone) {
      // The newest stored window below the deleted newest, not deleted too;
      // no upsert is newer than the deleted one (it was the newest).
      std::optional<int64_t> start;
      std::string value;
      for (it->SeekForPrev(WindowKey(job, r->latest_window_start_ns));
           it->Valid(); it->Prev()) {
        const int64_t s = start_of();
        if (starts.contains(s)) continue;
        start = s;
        value = it->value().ToString();
        break;
      }
      RETURN_IF_ERROR(FromRocksDb(it->status(), "finding the newest window"));
      if (!puts.empty() && (!start || puts.rbegin()->first >= *start)) {
        start = puts.rbegin()->first;
        value = puts.rbegin()->second;
      }
      if (!start) {
        return absl::DataLossError(absl::StrCat(
            "job ", job, " counts ", r->window_count,
            " windows but none is left after deleting its newest"));
      }
      r->latest_window_start_ns = *start;
      wb.Put(latest_, job, value);
    }
    if (oldest_gone) {
      std::optional<int64_t> start;
      for (it->Seek(WindowKey(job, r->oldest_window_start_ns)); it->Valid();
           it->Next()) {
        const int64_t s = start_of();
        if (starts.contains(s)) continue;
        start = s;
        break;
      }
      RETURN_IF_ERROR(FromRocksDb(it->status(), "finding the oldest window"));
      if (!puts.empty() && (!start || puts.begin()->first < *start)) {
        start = puts.begin()->first;
      }
      if (start) r->oldest_window_start_ns = *start;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RetentionStats> RocksDbWindowStore::ApplyRetention(
    absl::Duration retention) {
  RETURN_IF_ERROR(WritableOrError());
  if (retention <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "retention must be positive, got ", absl::FormatDuration(retention)));
  }
  RetentionStats stats;
  if (retention == absl::InfiniteDuration()) return stats;
  const int64_t retention_ns = absl::ToInt64Nanoseconds(retention);

  // One scan of the (small) job records, without the lock, finds the jobs
  // with something to delete; only those are locked, re-read and trimmed,
  // so commits interleave with a pass. A job whose record changes after the
  // scan is trimmed by the next pass.
  std::vector<std::string> candidates;
  {
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions(), jobs_));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      ASSIGN_OR_RETURN(JobRecord r,
                       DecodeJobRecord(absl::string_view(it->value().data(),
                                                         it->value().size()),
                                       false));
      const std::optional<int64_t> cutoff = RetentionCutoff(r, retention_ns);
      if (cutoff && r.oldest_window_start_ns <= *cutoff) {
        candidates.push_back(it->key().ToString());
      }
    }
    RETURN_IF_ERROR(FromRocksDb(it->status(), "listing jobs for retention"));
  }
  for (const std::string& job : candidates) {
    RETURN_IF_ERROR(TrimJob(job, retention_ns, stats));
  }
  return stats;
}

absl::Status RocksDbWindowStore::TrimJob(const std::string& job,
                                         int64_t retention_ns,
                                         RetentionStats& stats) {
  absl::MutexLock lock(&write_mu_);
  ASSIGN_OR_RETURN(std::optional<JobRecord> record, ReadJobRecord(job, true));
  if (!record) return absl::OkStatus();
  const std::optional<int64_t> cutoff = RetentionCutoff(*record, retention_ns);
  if (!cutoff || record->oldest_window_start_ns > *cutoff) {
    return absl::OkStatus();
  }
  // Delete starts <= cutoff, i.e. keys in [job '\0', key(cutoff + 1)).
  const std::string lower = WindowKeyPrefix(job);
  const std::string upper = WindowKey(job, *cutoff + 1);

  // Count what goes (for the window count) and find the first start kept
  // (the new oldest): this reads the expiring windows and one more.
  const std::string limit = WindowKeyLimit(job);
  const rocksdb::Slice limit_slice(limit);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &limit_slice;
  ro.fill_cache = false;  // Expiring data is not worth caching.
  int64_t expired = 0;
  int64_t oldest_kept = record->latest_window_start_ns;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, windows_));
  for (it->Seek(lower); it->Valid(); it->Next()) {
    if (it->key().compare(upper) >= 0) {
      absl::string_view unused_job;
      ParseWindowKey(absl::string_view(it->key().data(), it->key().size()),
                     &unused_job, &oldest_kept);
      break;
    }
    ++expired;
  }
  RETURN_IF_ERROR(FromRocksDb(
      it->status(), absl::StrCat("counting expired windows of job ", job)));

  record->oldest_window_start_ns = oldest_kept;
  record->window_count = std::max<int64_t>(0, record->window_count - expired);
  rocksdb::WriteBatch wb;
  if (expired > 0) wb.DeleteRange(windows_, lower, upper);
  wb.Put(jobs_, job, EncodeJobRecord(*record));  // At least the new oldest.
  rocksdb::WriteOptions wo;
  wo.sync = sync_commits_;
  RETURN_IF_ERROR(FromRocksDb(
      db_->Write(wo, &wb),
      absl::StrCat("deleting ", expired, " expired windows of job ", job)));
  if (expired > 0) {
    ++stats.jobs_trimmed;
    stats.windows_deleted += expired;
  }
  return absl::OkStatus();
}

}  // namespace bubblewatch
