// RocksDbWindowStore: the WindowStore of window_store.h on RocksDB. Include
// window_store.h instead unless you need the Env hook (tests inject faults
// through it).
//
// Column families (storage/README.md): `windows` (job, start → WindowSummary),
// `jobs` (job → JobRecord), `progress` (topic, partition → ProgressRecord),
// `latest` (job → a copy of its newest window), and in `default` the running
// sums of every window (storage/window_sums.h); key layout in window_key.h.
#ifndef BUBBLEWATCH_STORAGE_ROCKSDB_WINDOW_STORE_H_
#define BUBBLEWATCH_STORAGE_ROCKSDB_WINDOW_STORE_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/write_batch.h"
#include "storage/store_records.h"
#include "storage/window_store.h"

namespace bubblewatch {

class RocksDbWindowStore final : public WindowStore {
 public:
  enum class Mode {
    kPrimary,    // Read-write; creates the store if missing.
    kSecondary,  // Read-only, follows a primary (or reads a copy).
  };

  // Opens the store at `path`. `env` may be null (the default Env); if not,
  // it must outlive the store. Errors: see OpenRocksDbWindowStore and
  // OpenRocksDbWindowStoreReadOnly.
  static absl::StatusOr<std::unique_ptr<RocksDbWindowStore>> Open(
      absl::string_view path, const WindowStoreOptions& options, Mode mode,
      rocksdb::Env* env = nullptr);

  ~RocksDbWindowStore() override;

  // WindowStoreReader (rocksdb_window_store.cc).
  using WindowStoreReader::Scan;
  absl::StatusOr<std::vector<WindowSummary>> Scan(
      absl::string_view job, absl::Time begin, absl::Time end,
      WindowDetail detail) const override;
  absl::StatusOr<EncodedWindows> ScanEncoded(absl::string_view job,
                                             absl::Time begin,
                                             absl::Time end) const override;
  absl::StatusOr<std::optional<WindowSummary>> Latest(
      absl::string_view job) const override;
  absl::StatusOr<std::vector<WindowSummary>> LatestOfEveryJob() const override;
  absl::StatusOr<EncodedLatestWindows> LatestOfEveryJobEncoded() const override;
  absl::StatusOr<std::optional<std::vector<JobPeriodSums>>>
  PeriodSumsOfEveryJob(absl::Time begin, absl::Time end) const override;
  absl::StatusOr<std::vector<JobInfo>> ListJobs() const override;
  absl::StatusOr<std::optional<JobInfo>> Job(
      absl::string_view job) const override;
  absl::StatusOr<std::optional<std::string>> JobState(
      absl::string_view job) const override;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> AlertStates()
      const override;
  absl::StatusOr<std::optional<PartitionProgress>> Progress(
      absl::string_view topic, int32_t partition) const override;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
  PartitionJobRecords(absl::string_view topic,
                      int32_t partition) const override;
  absl::Status Refresh() override;
  StoreMemoryUsage MemoryUsage() const override;
  std::string Describe() const override;

  // WindowStore (rocksdb_window_store_writes.cc). A secondary returns
  // kFailedPrecondition.
  absl::Status Commit(const StoreBatch& batch) override;
  absl::StatusOr<RetentionStats> ApplyRetention(
      absl::Duration retention) override;

 private:
  RocksDbWindowStore(std::string path, Mode mode, std::string secondary_dir,
                     std::shared_ptr<rocksdb::Cache> cache,
                     int64_t memtable_budget);

  // The job's record, or nullopt when the job is unknown.
  absl::StatusOr<std::optional<JobRecord>> ReadJobRecord(absl::string_view job,
                                                         bool with_state) const;
  absl::StatusOr<bool> WindowExists(const std::string& key) const;
  // Commit's deletes, after its upserts (`keys_in_batch`, and by job and
  // start `upserted`, their encodings): adds them to `wb` and fixes the
  // records of the jobs whose newest or oldest window goes (a new `latest`
  // copy included). REQUIRES: write_mu_ held.
  absl::Status AddDeletes(
      const std::vector<WindowDelete>& deletes,
      const absl::flat_hash_set<std::string>& keys_in_batch,
      const absl::flat_hash_map<std::string, std::map<int64_t, std::string>>&
          upserted,
      absl::FunctionRef<absl::StatusOr<JobRecord*>(const std::string&)>
          record_of,
      // Called for each stored window deleted (its running sums go too).
      absl::FunctionRef<absl::Status(const std::string&, int64_t)> on_delete,
      rocksdb::WriteBatch& wb);
  // Deletes `job`'s windows with start <= newest start - retention_ns
  // (one range delete) and updates its record; adds to `stats`.
  absl::Status TrimJob(const std::string& job, int64_t retention_ns,
                       RetentionStats& stats);
  absl::Status WritableOrError() const;
  // Fills `latest` from the windows, for a store written before it existed.
  absl::Status PopulateLatest();
  // Builds the running sums of every window (storage/window_sums.h) when
  // the store lacks them or a build was cut short: a store written before
  // they existed. Reads every window once.
  absl::Status BuildRunningSums();
  // Whether the running sums cover every window (their marker is there).
  absl::StatusOr<bool> HasRunningSums() const;
  // LatestOfEveryJob without `latest`: one seek per job.
  absl::StatusOr<std::vector<WindowSummary>> LatestBySeeking() const;

  const std::string path_;
  const Mode mode_;
  const std::string secondary_dir_;  // Empty for a primary.
  const std::shared_ptr<rocksdb::Cache> cache_;
  const int64_t memtable_budget_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;  // Owned; see dtor.
  rocksdb::ColumnFamilyHandle* windows_ = nullptr;
  rocksdb::ColumnFamilyHandle* jobs_ = nullptr;
  rocksdb::ColumnFamilyHandle* progress_ = nullptr;
  // Null only in a secondary opened on a store that predates `latest`.
  rocksdb::ColumnFamilyHandle* latest_ = nullptr;
  bool sync_commits_ = false;
  // Serializes Commit and retention: both read-modify-write job records.
  absl::Mutex write_mu_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_STORAGE_ROCKSDB_WINDOW_STORE_H_
