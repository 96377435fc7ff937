// Commit and retention of the RocksDB window store: the only writers.
//
// Both read-modify-write job records (window count, latest start), so they
// run under write_mu_; readers never lock.
#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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
  if (r.window_count == 0) return std::nullopt;
  return EarlierBy(r.latest_window_start_ns, retention_ns);
}

// The running sums (storage/window_sums.h) a Commit changes, kept in memory
// until the batch is written: the records it read or wrote, per job.
class RunningSumsUpdate {
 public:
  RunningSumsUpdate(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* family)
      : db_(db), family_(family) {}

  // `job`'s window at `start` now has the sums `own`. `appended`: the
  // window starts after every window of the job (the usual case: nothing
  // later to move); `prev_latest` is then the start of the job's latest
  // window before it, when `has_prev`.
  absl::Status Set(const std::string& job, int64_t start, const WindowSums& own,
                   bool appended, bool has_prev, int64_t prev_latest) {
    Job& js = jobs_[job];
    if (appended) {
      RunningSumsRecord record{.before = {}, .own = own};
      if (has_prev) {
        ASSIGN_OR_RETURN(Entry * prev, Find(js, job, prev_latest));
        record.before = prev->record.through();
      }
      js.records[start] = Entry{.record = record, .dirty = true};
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(LoadFromPredecessor(js, job, start));
    auto it = js.records.find(start);
    if (it != js.records.end()) {
      // A rewrite: this window and every later one move by the difference.
      WindowSums delta = own;
      delta.Subtract(it->second.record.own);
      if (delta == WindowSums{}) return absl::OkStatus();  // A replay.
      it->second.record.own = own;
      it->second.dirty = true;
      for (++it; it != js.records.end(); ++it) {
        it->second.record.before.Add(delta);
        it->second.dirty = true;
      }
      return absl::OkStatus();
    }
    // A new window before the job's latest (out of order, or older than
    // what retention kept): after its predecessor, and every later one
    // moves by its sums.
    auto next = js.records.upper_bound(start);
    RunningSumsRecord record{.before = {}, .own = own};
    if (next != js.records.begin()) {
      record.before = std::prev(next)->second.record.through();
    } else if (next != js.records.end()) {
      record.before = next->second.record.before;
    }
    for (auto later = next; later != js.records.end(); ++later) {
      later->second.record.before.Add(own);
      later->second.dirty = true;
    }
    js.records.emplace(start, Entry{.record = record, .dirty = true});
    return absl::OkStatus();
  }

  // `job`'s stored window at `start` is deleted (a tombstone from the
  // windows topic): its record goes, and every later one moves back by its
  // sums, so that a period's difference of two records leaves it out.
  absl::Status Remove(const std::string& job, int64_t start) {
    Job& js = jobs_[job];
    RETURN_IF_ERROR(LoadFromPredecessor(js, job, start));
    auto it = js.records.find(start);
    if (it == js.records.end()) {
      return Corrupt(job, start, absl::NotFoundError("missing"));
    }
    const WindowSums own = it->second.record.own;
    for (auto later = std::next(it); later != js.records.end(); ++later) {
      later->second.record.before.Subtract(own);
      later->second.dirty = true;
    }
    js.records.erase(it);
    js.removed.push_back(start);
    return absl::OkStatus();
  }

  void WriteTo(rocksdb::WriteBatch& wb) const {
    for (const auto& [job, js] : jobs_) {
      for (int64_t start : js.removed) wb.Delete(family_, SumsKey(job, start));
      // Remove loaded every record from the predecessor on: none left
      // means the job has none at all.
      if (!js.removed.empty() && js.records.empty()) {
        wb.Delete(family_, SumsLastKey(job));
        continue;
      }
      bool dirty = !js.removed.empty();
      for (const auto& [start, entry] : js.records) {
        if (entry.dirty) {
          wb.Put(family_, SumsKey(job, start), EncodeRunningSums(entry.record));
          dirty = true;
        }
      }
      // The job's newest record is the last one here: a window past the
      // latest is added after its predecessor, and any other change loads
      // every record after it.
      if (dirty) {
        const auto& [start, entry] = *js.records.rbegin();
        wb.Put(family_, SumsLastKey(job),
               EncodeLastRunningSums(start, entry.record));
      }
    }
  }

 private:
  struct Entry {
    RunningSumsRecord record;
    bool dirty = false;  // Changed by this batch.
  };
  struct Job {
    // Stored records as read, overlaid with this batch's.
    std::map<int64_t, Entry> records;
    // Every stored record of the job starting at or after this is in
    // `records`; nullopt: none was loaded (or `loaded_all`).
    std::optional<int64_t> loaded_from;
    // Every stored record of the job is in `records` (loaded from its
    // first).
    bool loaded_all = false;
    // Starts whose records this batch deletes (Remove).
    std::vector<int64_t> removed;
  };

  absl::Status Corrupt(const std::string& job, int64_t start,
                       const absl::Status& status) {
    return absl::DataLossError(absl::StrCat("running sums of job ", job, " at ",
                                            start, ": ", status.message()));
  }

  // The record at `start`, which must exist.
  absl::StatusOr<Entry*> Find(Job& js, const std::string& job, int64_t start) {
    auto it = js.records.find(start);
    if (it != js.records.end()) return &it->second;
    rocksdb::PinnableSlice value;
    const rocksdb::Status s =
        db_.Get(rocksdb::ReadOptions(), family_, SumsKey(job, start), &value);
    if (s.IsNotFound()) {
      return Corrupt(job, start, absl::NotFoundError("missing"));
    }
    RETURN_IF_ERROR(FromRocksDb(s, "reading running sums"));
    absl::StatusOr<RunningSumsRecord> r = DecodeRunningSums(View(value));
    if (!r.ok()) return Corrupt(job, start, r.status());
    return &js.records.emplace(start, Entry{.record = *r}).first->second;
  }

  // Makes `js.records` hold every stored record of `job` from the last one
  // before `start` (or from the job's first) on.
  absl::Status LoadFromPredecessor(Job& js, const std::string& job,
                                   int64_t start) {
    if (js.loaded_all) return absl::OkStatus();
    if (js.loaded_from.has_value()) {
      // A record in [loaded_from, start) is loaded: the stored ones between
      // it and `start` are too, so the predecessor is known.
      auto it = js.records.lower_bound(*js.loaded_from);
      if (it != js.records.end() && it->first < start) return absl::OkStatus();
    }
    const std::string lower = SumsKeyPrefix(job);
    const std::string upper = SumsKeyLimit(job);
    const rocksdb::Slice lower_slice(lower);
    const rocksdb::Slice upper_slice(upper);
    rocksdb::ReadOptions ro;
    ro.iterate_lower_bound = &lower_slice;
    ro.iterate_upper_bound = &upper_slice;
    std::unique_ptr<rocksdb::Iterator> it(db_.NewIterator(ro, family_));
    const std::string at = SumsKey(job, start);
    it->SeekForPrev(at);
    if (it->Valid() && it->key() == rocksdb::Slice(at)) it->Prev();
    // The predecessor's start; none: from the job's first record.
    std::optional<int64_t> from;
    if (it->Valid()) {
      absl::string_view key_job;
      int64_t key_start = 0;
      if (!ParseSumsKey(View(it->key()), &key_job, &key_start)) {
        return Corrupt(job, start, absl::InternalError("malformed key"));
      }
      from = key_start;
    } else {
      RETURN_IF_ERROR(FromRocksDb(it->status(), "reading running sums"));
      it->SeekToFirst();
    }
    for (; it->Valid(); it->Next()) {
      absl::string_view key_job;
      int64_t key_start = 0;
      if (!ParseSumsKey(View(it->key()), &key_job, &key_start)) {
        return Corrupt(job, start, absl::InternalError("malformed key"));
      }
      // From loaded_from on, `records` has them (and this batch's win).
      if (js.loaded_from.has_value() && key_start >= *js.loaded_from) break;
      if (js.records.contains(key_start)) continue;
      absl::StatusOr<RunningSumsRecord> r =
          DecodeRunningSums(View(it->value()));
      if (!r.ok()) return Corrupt(job, key_start, r.status());
      js.records.emplace(key_start, Entry{.record = *r});
    }
    RETURN_IF_ERROR(FromRocksDb(it->status(), "reading running sums"));
    if (from) {
      js.loaded_from = *from;
    } else {
      js.loaded_all = true;
    }
    return absl::OkStatus();
  }

  rocksdb::DB& db_;
  rocksdb::ColumnFamilyHandle* const family_;
  std::map<std::string, Job> jobs_;
};

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
  RunningSumsUpdate sums(*db_, db_->DefaultColumnFamily());
  std::vector<uint64_t> scratch;
  for (const WindowSummary& w : batch.windows) {
    ASSIGN_OR_RETURN(JobRecord * r, record_of(w.job));
    const int64_t start = w.window.start_ns;
    const bool appended =
        r->window_count == 0 || start > r->latest_window_start_ns;
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
    const int64_t prev_latest_start = r->latest_window_start_ns;
    const bool is_latest =
        r->window_count == 0 || start >= r->latest_window_start_ns;
    if (is_latest) r->latest_window_start_ns = start;
    if (r->window_count == 0) {
      r->oldest_window_start_ns = start;
    } else {
      r->oldest_window_start_ns = std::min(r->oldest_window_start_ns, start);
    }
    const bool has_prev = r->window_count > 0;
    if (is_new) ++r->window_count;
    const std::string value = EncodeWindowSummary(w);
    // The sums are read back from the encoding, as a scan reads them.
    ASSIGN_OR_RETURN(const WindowSums own, SumsOfEncodedWindow(value, scratch));
    RETURN_IF_ERROR(
        sums.Set(w.job, start, own, appended, has_prev, prev_latest_start));
    wb.Put(windows_, key, value);
    // A copy for LatestOfEveryJob; a later Put of the same job in this batch
    // wins, and it is only made for a start at least as late.
    if (is_latest) wb.Put(latest_, w.job, value);
    if (!batch.window_deletes.empty()) upserted[w.job][start] = value;
  }
  if (!batch.window_deletes.empty()) {
    RETURN_IF_ERROR(AddDeletes(
        batch.window_deletes, keys_in_batch, upserted, record_of,
        [&](const std::string& job, int64_t start) {
          return sums.Remove(job, start);
        },
        wb));
  }
  sums.WriteTo(wb);
  for (const JobUpdate& u : batch.jobs) {
    ASSIGN_OR_RETURN(JobRecord * r, record_of(u.job));
    r->last_event_ns =
        ToWire(LaterOf(FromWire(r->last_event_ns), u.last_event_ns));
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
    for (const auto& [job, record] : p.job_records) {
      const std::string key = PartitionJobRecordKey(p.topic, p.partition, job);
      if (record) {
        wb.Put(progress_, key, *record);
      } else {
        wb.Delete(progress_, key);
      }
    }
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
    absl::FunctionRef<absl::Status(const std::string&, int64_t)> on_delete,
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
    RETURN_IF_ERROR(on_delete(d.job, d.start_ns));
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
  if (expired > 0) {
    wb.DeleteRange(windows_, lower, upper);
    // Their running sums go too; the first kept record's `before` still
    // counts them, so differences stay exact.
    wb.DeleteRange(db_->DefaultColumnFamily(), SumsKeyPrefix(job),
                   SumsKey(job, *cutoff + 1));
  }
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
