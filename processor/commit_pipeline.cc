#include "processor/commit_pipeline.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kafka/kafka_admin.h"
#include "kafka/kafka_status.h"
#include "processor/fleet_topics.h"
#include "processor/job_state.h"
#include "processor/partition_limits.h"
#include "processor/window_fit.h"
#include "schemas/window_summary_codec.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {
namespace {

// How often jobs past job_expiry are looked for.
constexpr absl::Duration kJobExpiryInterval = absl::Minutes(1);
// A flush that waits longer than this means the broker is unreachable.
constexpr absl::Duration kSlowFlush = absl::Seconds(2);
// Once asked to stop, how long a flush still waits for acknowledgements.
constexpr absl::Duration kFlushOnStop = absl::Seconds(30);
// Topic metadata and creation on the first assignment.
constexpr absl::Duration kAdminTimeout = absl::Seconds(15);
// The windows topic's configs at start: a broker answers in milliseconds;
// librdkafka's mock cluster never does, and the demo should not wait long.
constexpr absl::Duration kDescribeTimeout = absl::Seconds(3);
// librdkafka's default message.max.bytes and batch.size.
constexpr int64_t kProducerDefaultBytes = 1'000'000;

// `key` of `config` as a positive integer, else `fallback`.
int64_t ConfigBytes(const KafkaConfig& config, absl::string_view key,
                    int64_t fallback) {
  int64_t bytes = 0;
  std::optional<std::string> value = config.Get(key);
  return value && absl::SimpleAtoi(*value, &bytes) && bytes > 0 ? bytes
                                                                : fallback;
}

}  // namespace

int64_t CommitPipeline::ReadWindowsLimit(rd_kafka_t* client,
                                         const std::string& topic,
                                         int64_t known_bytes,
                                         KafkaConfig& producer_config) {
  const int64_t producer_limit =
      ConfigBytes(producer_config, "message.max.bytes", kProducerDefaultBytes);
  absl::StatusOr<std::optional<int64_t>> topic_limit =
      known_bytes > 0 ? absl::StatusOr<std::optional<int64_t>>(known_bytes)
                      : TopicMaxMessageBytes(client, topic, kDescribeTimeout);
  int64_t limit = producer_limit;
  if (!topic_limit.ok()) {
    spdlog::warn(
        "windows topic {}: cannot read its max.message.bytes ({}); windows "
        "are fitted to the producer's message.max.bytes, {} bytes",
        topic, std::string(topic_limit.status().message()), producer_limit);
  } else if (topic_limit->has_value()) {
    limit = std::min(limit, **topic_limit);
  }
  // librdkafka fills a batch up to batch.size and knows nothing of the
  // topic's limit, which applies to the whole batch.
  if (ConfigBytes(producer_config, "batch.size", kProducerDefaultBytes) >
      limit) {
    producer_config.Set("batch.size", absl::StrCat(limit));
  }
  spdlog::info("windows topic {}: windows fitted to {} bytes", topic, limit);
  return limit;
}

absl::StatusOr<RestoredPartition> CommitPipeline::RestorePartition(
    const std::string& topic, int32_t partition, KafkaOffset& offset) {
  RestoredPartition result;
  ASSIGN_OR_RETURN(std::optional<PartitionProgress> local,
                   store_->Progress(topic, partition));
  std::optional<PartitionSnapshot> remote;
  std::vector<std::string> remote_gone;
  if (!topics_prepared_ && (changelog_ || !options_.windows_topic.empty() ||
                            !options_.parts_topic.empty())) {
    ASSIGN_OR_RETURN(
        int partitions,
        kafka_->PartitionCount(options_.topic,
                               /*just_created=*/false, kAdminTimeout));
    if (changelog_) {
      ASSIGN_OR_RETURN(changelog_created_now_, changelog_->Prepare(partitions));
    }
    if (!options_.windows_topic.empty()) PrepareWindowsTopic(partitions);
    if (!options_.parts_topic.empty()) {
      parts_partitions_ = PrepareOutputTopic(
          options_.parts_topic, PartsTopicConfigs(options_.retention),
          partitions, "window parts topic");
    }
    topics_prepared_ = true;
  }
  if (changelog_) {
    if (!changelog_created_now_) {
      ASSIGN_OR_RETURN(remote,
                       changelog_->ReadLatest(topic, partition, &remote_gone));
    }
  }
  // Both are consistent snapshots (progress + job states of one commit);
  // the newer one is the one that processed more. On a tie the local one is
  // as good and saves nothing but a decode.
  const char* source = "none (group offset)";
  PartitionSnapshot restored;
  if (remote &&
      (!local || remote->committed_position > local->committed_position)) {
    offset = remote->resume_offset;
    restored = *std::move(remote);
    result.gone_jobs = std::move(remote_gone);
    // The store may hold job records of an older ownership that this
    // snapshot does not: the first commit rewrites them all.
    result.write_all_jobs = true;
    source = "changelog";
    absl::MutexLock lock(&stats_->mu);
    ++stats_->stats.state_restores;
  } else if (local) {
    // Resume where an open window still needs data; what lies below the
    // committed position is replay.
    offset = local->resume_offset;
    restored.committed_position = local->committed_position;
    if (!local->state.empty()) {
      ASSIGN_OR_RETURN(restored, DecodeStoredPartitionState(local->state));
      restored.committed_position = local->committed_position;
      ASSIGN_OR_RETURN(auto entries,
                       store_->PartitionJobRecords(topic, partition));
      std::vector<PartitionJobRecord> records;
      records.reserve(entries.size());
      for (const auto& [job, bytes] : entries) {
        ASSIGN_OR_RETURN(PartitionJobRecord r, DecodePartitionJob(bytes));
        records.push_back(std::move(r));
      }
      const bool per_key = restored.jobs_per_key;
      restored = AssemblePartitionSnapshot(std::move(restored), records);
      // An old-form snapshot is rewritten per key; so is a changelog that
      // is behind the store (a commit whose snapshot was not written
      // before a crash): its job records lack that commit's changes.
      result.write_all_jobs =
          !per_key ||
          (changelog_ != nullptr && (!remote || remote->committed_position !=
                                                    local->committed_position));
    }
    source = "local store";
  }
  restored.resume_offset = offset;
  spdlog::info(
      "assigned {}/{}: state from {} ({} jobs, {} limit rejections to "
      "replay), resume at {}, replay below {}",
      topic, partition, source, restored.jobs.size(),
      restored.ledger.rejections(), offset, restored.committed_position);
  result.snapshot = std::move(restored);
  return result;
}

PartitionSnapshot CommitPipeline::PartitionRecord(
    const PartitionState& part, const PartitionProgress& progress) {
  return PartitionSnapshot{.topic = progress.topic,
                           .partition = progress.partition,
                           .resume_offset = progress.resume_offset,
                           .committed_position = progress.committed_position,
                           .ledger = part.ledger,
                           .jobs_per_key = true};
}

void CommitPipeline::PrepareWindowsTopic(int input_partitions) {
  windows_partitions_ = PrepareOutputTopic(
      options_.windows_topic, WindowsTopicConfigs(options_.retention),
      input_partitions, "windows topic");
  // An existing topic is used as it is: whether it is compacted is for
  // `bubblewatch topics describe` to show (DescribeConfigs here would hang
  // the assignment on clusters that do not answer it, like the mock one).
}

int CommitPipeline::PrepareOutputTopic(const std::string& topic,
                                       const TopicConfigs& configs,
                                       int input_partitions,
                                       absl::string_view what) {
  absl::StatusOr<int> partitions =
      kafka_->PartitionCount(topic, /*just_created=*/false, kAdminTimeout);
  bool created = false;
  if (absl::IsNotFound(partitions.status())) {
    absl::StatusOr<bool> made =
        kafka_->CreateTopicIfMissing(TopicSpec{.name = topic,
                                               .partitions = input_partitions,
                                               .replication_factor = -1,
                                               .configs = configs},
                                     kAdminTimeout);
    if (!made.ok()) {
      spdlog::warn(
          "{} {} is missing and could not be created ({}); the broker may "
          "create it on the first record with its defaults: create it with "
          "`bubblewatch topics create`",
          std::string(what), topic, std::string(made.status().message()));
      return 0;
    }
    created = *made;
    partitions =
        kafka_->PartitionCount(topic, /*just_created=*/true, kAdminTimeout);
  }
  if (!partitions.ok()) {
    spdlog::warn(
        "{} {}: {}; its records go to the partition their key "
        "hashes to",
        std::string(what), topic, std::string(partitions.status().message()));
    return 0;
  }
  if (created) {
    spdlog::info("created {} {}: {} partitions", std::string(what), topic,
                 *partitions);
  }
  return *partitions;
}

absl::Status CommitPipeline::PublishWindow(WindowSummary& w, int64_t& trimmed) {
  const std::string key = WindowTopicKey(w.job, w.window.start_ns);
  const bool was_trimmed = w.trimmed.has_value();
  ASSIGN_OR_RETURN(
      std::string value,
      FitWindow(w, WindowValueBudget(windows_limit_bytes_, key.size())));
  if (w.trimmed.has_value() && !was_trimmed) {
    ++trimmed;
    spdlog::warn(
        "window of {} at {}: {} bytes, over the {} the windows topic {} "
        "takes; trimmed to {} bytes "
        "(docs/semantics.md#windows-that-do-not-fit): {} names cut, left out "
        "{} devices, {} top bubbles, {} ranks, {} stragglers",
        w.job, w.window.start_ns, w.trimmed->original_bytes,
        windows_limit_bytes_, options_.windows_topic, value.size(),
        w.trimmed->names_cut, w.trimmed->devices, w.trimmed->top_bubbles,
        w.trimmed->ranks, w.trimmed->stragglers);
  }
  // Co-partitioned with the events when the partition count is known;
  // else the partitioner hashes the key.
  const int32_t partition =
      windows_partitions_ > 0 ? WindowTopicPartition(w.job, windows_partitions_)
                              : CommitKafka::kAnyPartition;
  return Enqueue(
      options_.windows_topic, partition, key, value,
      absl::StrCat("the window of ", w.job, " at ", w.window.start_ns, " (",
                   value.size(), " bytes)"));
}

absl::Status CommitPipeline::PublishPart(const HostWindowPart& part) {
  const std::string value = EncodeHostWindowPart(part);
  const int32_t partition =
      parts_partitions_ > 0 ? WindowTopicPartition(part.job, parts_partitions_)
                            : CommitKafka::kAnyPartition;
  return Enqueue(
      options_.parts_topic, partition, part.job, value,
      absl::StrCat("the window part of ", part.job, " host ", part.host, " at ",
                   part.window.start_ns, " (", value.size(), " bytes)"));
}

absl::Status CommitPipeline::Enqueue(const std::string& topic,
                                     int32_t partition, absl::string_view key,
                                     absl::string_view value,
                                     absl::string_view what) {
  const absl::Time start = absl::Now();
  while (true) {
    ++shared_->undelivered;
    const absl::Status produced = kafka_->Produce(topic, partition, key, value);
    if (produced.ok()) return absl::OkStatus();
    --shared_->undelivered;
    // Refused before sending is as fatal as refused by the broker (the
    // delivery report sets shared_->fatal): a window stored but never
    // published would be missing from serve --brokers for ever, a part
    // from its job's window (docs/semantics.md#no-silent-loss).
    if (!absl::IsResourceExhausted(produced)) {  // Not a full queue.
      return absl::Status(
          produced.code(),
          absl::StrCat("cannot publish ", what, " to ", topic,
                       "; stopping before it is stored: ", produced.message()));
    }
    // The queue drains as the broker acknowledges: wait as a flush waits.
    RETURN_IF_ERROR(shared_->fatal);
    const absl::Time now = absl::Now();
    if (now - start >= kSlowFlush) {
      health_->NoteDown(start, "the producer's queue stays full");
    }
    const bool stopping = stop_ == nullptr || stop_->load();
    if (stopping && now - start >= kFlushOnStop) {
      return absl::UnavailableError(absl::StrCat(
          "the producer's queue stayed full for ",
          absl::FormatDuration(kFlushOnStop),
          " of stopping; not storing windows that are not published"));
    }
    kafka_->Poll(absl::Milliseconds(100));
  }
}

absl::Status CommitPipeline::FlushAndCommitOffsets(bool sync) {
  // Waits for the acknowledgements as long as the producer keeps trying
  // (message.timeout.ms, 5 min by default, after which the delivery report
  // fails and sets shared_->fatal): a broker restart is waited out, not fatal.
  // Once asked to stop, it waits kFlushOnStop at most.
  const absl::Time start = absl::Now();
  absl::Time next_warning = start + absl::Seconds(10);
  while (shared_->undelivered > 0 && shared_->fatal.ok()) {
    kafka_->Flush(absl::Seconds(1));
    if (shared_->undelivered == 0) break;
    const absl::Time now = absl::Now();
    if (now - start >= kSlowFlush) {
      health_->NoteDown(start, absl::StrCat("no acknowledgement for ",
                                            absl::FormatDuration(kSlowFlush)));
    }
    // Outside Run (the consumer closing in the destructor) counts as
    // stopping.
    const bool stopping = stop_ == nullptr || stop_->load();
    if (stopping && now - start >= kFlushOnStop) {
      return absl::UnavailableError(absl::StrCat(
          shared_->undelivered,
          " dead-letter/window/state messages not acknowledged within ",
          absl::FormatDuration(kFlushOnStop),
          " of stopping; not committing past them"));
    }
    if (now >= next_warning) {
      spdlog::warn(
          "waiting {} for the broker to acknowledge {} dead-letter/window/"
          "state messages (offsets do not move until it does)",
          absl::FormatDuration(absl::Trunc(now - start, absl::Seconds(1))),
          shared_->undelivered);
      next_warning = now + absl::Seconds(10);
    }
  }
  RETURN_IF_ERROR(shared_->fatal);
  if (!pending_group_offsets_.empty()) {
    // Best effort: with a changelog, a new owner resumes from the snapshot;
    // the group offset only matters to one that finds no snapshot, and it
    // never runs ahead of the acknowledged snapshots.
    absl::Status committed =
        kafka_->CommitOffsets(pending_group_offsets_, sync);
    if (sync && !committed.ok()) {
      spdlog::warn("{}", std::string(committed.message()));
    }
  }
  pending_group_offsets_.clear();
  return absl::OkStatus();
}

absl::Status CommitPipeline::Commit(absl::Time now) {
  // After a failed commit nothing more may be written: the failed batch is
  // gone from memory (its windows, its advanced positions), so a later
  // commit, e.g. the one a revocation makes while the consumer closes, would
  // store progress past windows that were never written or published
  // (docs/semantics.md#no-silent-loss).
  if (!commit_failed_.ok()) return commit_failed_;
  absl::Status s = CommitOnce(now);
  if (!s.ok()) commit_failed_ = s;
  return s;
}

absl::Status CommitPipeline::CommitOnce(absl::Time now) {
  const bool observer_wants =
      options_.observer != nullptr && options_.observer->WantsCommit(now);
  if (!uncommitted_ && pending_windows_.empty() && pending_parts_.empty() &&
      !observer_wants) {
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(shared_->fatal);
  StoreBatch batch;
  batch.windows = std::move(pending_windows_);
  pending_windows_.clear();
  // Late counts of windows stored before: those windows rewritten. Those of
  // windows in no store (e.g. retention removed them) stay counted in the
  // job's total in the stats only.
  RETURN_IF_ERROR(AddLateCountsToBatch(pending_late_, *store_, batch).status());
  pending_late_.clear();
  // The steps below, in this order, are the commit protocol:
  // docs/architecture.md#commit-protocol says why each crash point between
  // them is harmless. 1: publish this commit's windows.
  int64_t trimmed = 0;
  if (!options_.windows_topic.empty()) {
    for (WindowSummary& w : batch.windows) {
      RETURN_IF_ERROR(PublishWindow(w, trimmed));
    }
  }
  // Split units' window parts, where their windows would be published
  // (docs/architecture.md#one-job-across-processors): a replay after a crash
  // publishes the same bytes again, and stage 2 keeps one per (job, host,
  // window start).
  std::vector<HostWindowPart> parts = std::move(pending_parts_);
  pending_parts_.clear();
  for (const HostWindowPart& part : parts) {
    RETURN_IF_ERROR(PublishPart(part));
  }
  // 2-3: flush (windows, dead letters, the previous snapshots), then
  // commit the previous commit's group offsets.
  RETURN_IF_ERROR(FlushAndCommitOffsets());
  // The jobs that changed: their state joins their partition's snapshot
  // and the store batch.
  batch.jobs = jobs_->CommitJobStates(now);
  const bool expire_jobs = now - last_job_expiry_ >= kJobExpiryInterval;
  if (expire_jobs) last_job_expiry_ = now;
  batch.progress = jobs_->CommitProgress(options_.topic, expire_jobs);
  std::vector<PartitionOffset> offsets;
  offsets.reserve(batch.progress.size());
  for (const PartitionProgress& progress : batch.progress) {
    offsets.push_back(PartitionOffset{.topic = options_.topic,
                                      .partition = progress.partition,
                                      .offset = progress.resume_offset});
  }
  // Jobs forgotten after --job-expiry (here or when a new job needed room)
  // ended: their stored state says so.
  for (JobUpdate& u : jobs_->TakeExpiredUpdates()) {
    batch.jobs.push_back(std::move(u));
  }
  if (options_.observer != nullptr) {
    RETURN_IF_ERROR(options_.observer->BeforeCommit(now, batch));
  }
  // A job's alert state joins its partition's snapshot (in this commit:
  // the snapshot and the alert state are of the same windows).
  for (const AlertStateUpdate& u : batch.alert_states) {
    jobs_->CommitAlertState(u.job, u.state);
  }
  // The partitions' snapshots: a record of progress and ledger, and a
  // record per job whose part changed (docs/state.md#partition-snapshots),
  // the same bytes to the store and the changelog.
  absl::flat_hash_map<int32_t, std::vector<JobRecordWrite>> job_writes;
  for (PartitionProgress& progress : batch.progress) {
    const PartitionState& part = jobs_->partitions().at(progress.partition);
    progress.state = EncodePartitionSnapshot(PartitionRecord(part, progress));
    ASSIGN_OR_RETURN(std::vector<JobRecordWrite> writes,
                     jobs_->JobRecordsToWrite(progress));
    progress.job_records.reserve(writes.size());
    for (const JobRecordWrite& w : writes) {
      progress.job_records.emplace_back(w.job, w.record);
    }
    if (!writes.empty()) job_writes[progress.partition] = std::move(writes);
  }
  // 4: one store batch (fsynced unless --store-no-sync).
  absl::Status written = store_->Commit(batch);
  if (!written.ok()) {
    return absl::Status(written.code(),
                        absl::StrCat("cannot write windows to the store, "
                                     "stopping before offsets move: ",
                                     written.message()));
  }
  uncommitted_ = false;
  if (options_.observer != nullptr) options_.observer->AfterCommit(now);
  // 5: this commit's snapshots; their offsets wait for the next flush.
  int64_t snapshots = 0, job_records = 0;
  for (const PartitionProgress& progress : batch.progress) {
    const PartitionState& part = jobs_->partitions().at(progress.partition);
    std::vector<JobRecordWrite>& writes = job_writes[progress.partition];
    using SnapshotWrite = PartitionJobs::SnapshotWrite;
    SnapshotWrite snapshot = SnapshotWrite::kNoChangelog;
    if (changelog_ && part.changed) {
      // Queues one record, counted as undelivered until acknowledged.
      auto queue = [this](absl::Status s) {
        ++shared_->undelivered;
        if (!s.ok()) --shared_->undelivered;
        return s;
      };
      // The jobs first, the partition record last: a restore that finds
      // only some of the jobs takes their previous versions.
      for (const JobRecordWrite& w : writes) {
        const std::optional<std::string>& bytes =
            w.record ? w.record : w.gone_record;
        if (!bytes) continue;  // A stale store record only.
        RETURN_IF_ERROR(queue(changelog_->WriteJob(
            progress.topic, progress.partition, w.job, *bytes)));
        ++job_records;
      }
      // Records of gone jobs, once the snapshot after them is acknowledged
      // (the flush of this commit's step 2 acknowledged the last one).
      for (const std::string& job :
           jobs_->GoneJobsToDelete(progress.partition)) {
        RETURN_IF_ERROR(queue(
            changelog_->DeleteJob(progress.topic, progress.partition, job)));
      }
      RETURN_IF_ERROR(
          queue(changelog_->Write(PartitionRecord(part, progress))));
      snapshot = SnapshotWrite::kWritten;
      ++snapshots;
    } else if (changelog_) {
      snapshot = SnapshotWrite::kUnchanged;
    }
    jobs_->NoteCommitted(progress.partition, progress.committed_position,
                         snapshot);
  }
  if (!offsets.empty()) pending_group_offsets_ = std::move(offsets);
  absl::MutexLock lock(&stats_->mu);
  stats_->stats.windows_written += static_cast<int64_t>(batch.windows.size());
  // Acknowledged: this commit's flush waited for them.
  if (!options_.windows_topic.empty()) {
    stats_->stats.windows_published +=
        static_cast<int64_t>(batch.windows.size());
  }
  stats_->stats.windows_trimmed += trimmed;
  stats_->stats.window_parts_published += static_cast<int64_t>(parts.size());
  stats_->stats.state_snapshots_written += snapshots;
  stats_->stats.state_job_records_written += job_records;
  return absl::OkStatus();
}

}  // namespace bubblewatch
