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

absl::Status CommitPipeline::RestorePartition(rd_kafka_topic_partition_t& tp,
                                              PartitionState& state) {
  ASSIGN_OR_RETURN(std::optional<PartitionProgress> local,
                   store_->Progress(tp.topic, tp.partition));
  std::optional<PartitionSnapshot> remote;
  if (!topics_prepared_ && (changelog_ || !options_.windows_topic.empty())) {
    ASSIGN_OR_RETURN(
        int partitions,
        TopicPartitionCount(consumer_, options_.topic, kAdminTimeout));
    if (changelog_) {
      ASSIGN_OR_RETURN(changelog_created_now_, changelog_->Prepare(partitions));
    }
    if (!options_.windows_topic.empty()) PrepareWindowsTopic(partitions);
    topics_prepared_ = true;
  }
  if (changelog_) {
    if (!changelog_created_now_) {
      ASSIGN_OR_RETURN(remote, changelog_->ReadLatest(tp.topic, tp.partition));
    }
  }
  // Both are consistent snapshots (progress + job states of one commit);
  // the newer one is the one that processed more. On a tie the local one is
  // as good and saves nothing but a decode.
  const char* source = "none (group offset)";
  if (remote &&
      (!local || remote->committed_position > local->committed_position)) {
    tp.offset = remote->resume_offset;
    state.committed_position = remote->committed_position;
    state.jobs = std::move(remote->jobs);
    state.ledger = std::move(remote->ledger);
    state.job_alerts = std::move(remote->job_alerts);
    state.activity = std::move(remote->activity);
    source = "changelog";
    absl::MutexLock lock(&stats_->mu);
    ++stats_->stats.state_restores;
  } else if (local) {
    // Resume where an open window still needs data; what lies below the
    // committed position is replay.
    tp.offset = local->resume_offset;
    state.committed_position = local->committed_position;
    if (!local->state.empty()) {
      ASSIGN_OR_RETURN(PartitionSnapshot stored,
                       DecodeStoredPartitionState(local->state));
      state.jobs = std::move(stored.jobs);
      state.ledger = std::move(stored.ledger);
      state.job_alerts = std::move(stored.job_alerts);
      state.activity = std::move(stored.activity);
    }
    source = "local store";
  }
  state.resume_offset = tp.offset;
  spdlog::info(
      "assigned {}/{}: state from {} ({} jobs, {} limit rejections to "
      "replay), resume at {}, replay below {}",
      tp.topic, tp.partition, source, PartitionJobs::TrackedJobs(state),
      state.ledger.rejections(), tp.offset, state.committed_position);
  return absl::OkStatus();
}

void CommitPipeline::PrepareWindowsTopic(int input_partitions) {
  const std::string& topic = options_.windows_topic;
  absl::StatusOr<int> partitions =
      TopicPartitionCount(consumer_, topic, kAdminTimeout);
  bool created = false;
  if (absl::IsNotFound(partitions.status())) {
    absl::StatusOr<bool> made = CreateTopicIfMissing(
        consumer_,
        TopicSpec{.name = topic,
                  .partitions = input_partitions,
                  .replication_factor = -1,
                  .configs = WindowsTopicConfigs(options_.retention)},
        kAdminTimeout);
    if (!made.ok()) {
      spdlog::warn(
          "windows topic {} is missing and could not be created ({}); the "
          "broker may create it on the first window with its defaults, not "
          "compacted: create it with `bubblewatch topics create`",
          topic, std::string(made.status().message()));
      return;
    }
    created = *made;
    partitions = CreatedTopicPartitionCount(consumer_, topic, kAdminTimeout);
  }
  if (!partitions.ok()) {
    spdlog::warn(
        "windows topic {}: {}; its windows go to the partition their "
        "key hashes to",
        topic, std::string(partitions.status().message()));
    return;
  }
  windows_partitions_ = *partitions;
  if (created) {
    spdlog::info("created windows topic {}: {} partitions, compacted", topic,
                 windows_partitions_);
  }
  // An existing topic is used as it is: whether it is compacted is for
  // `bubblewatch topics describe` to show (DescribeConfigs here would hang
  // the assignment on clusters that do not answer it, like the mock one).
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
                              : RD_KAFKA_PARTITION_UA;
  const absl::Time start = absl::Now();
  while (true) {
    ++shared_->undelivered;
    const rd_kafka_resp_err_t err = rd_kafka_producev(
        producer_, RD_KAFKA_V_TOPIC(options_.windows_topic.c_str()),
        RD_KAFKA_V_PARTITION(partition), RD_KAFKA_V_KEY(key.data(), key.size()),
        RD_KAFKA_V_VALUE(value.data(), value.size()),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return absl::OkStatus();
    --shared_->undelivered;
    // Refused before sending is as fatal as refused by the broker (the
    // delivery report sets shared_->fatal): a window stored but never
    // published would be missing from serve --brokers for ever.
    if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
      return KafkaErrorToStatus(
          err, absl::StrCat("cannot publish the window of ", w.job, " at ",
                            w.window.start_ns, " (", value.size(),
                            " bytes) to ", options_.windows_topic,
                            "; stopping before it is stored"));
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
    rd_kafka_poll(producer_, 100);
  }
}

absl::Status CommitPipeline::AddLateUpdates(StoreBatch& batch) {
  for (const auto& [key, count] : pending_late_) {
    const auto& [job, start] = key;
    WindowSummary* target = nullptr;
    for (WindowSummary& w : batch.windows) {
      if (w.job == job && w.window.start_ns == start) target = &w;
    }
    if (target == nullptr) {
      ASSIGN_OR_RETURN(std::vector<WindowSummary> stored,
                       store_->Scan(job, absl::FromUnixNanos(start),
                                    absl::FromUnixNanos(start + 1)));
      // No stored window (e.g. retention removed it): the job's total in
      // the stats still counts these events.
      if (stored.empty()) continue;
      batch.windows.push_back(std::move(stored.front()));
      target = &batch.windows.back();
    }
    target->late_events += count.events;
    target->late_collectives += count.collectives;
  }
  pending_late_.clear();
  return absl::OkStatus();
}

absl::Status CommitPipeline::FlushAndCommitOffsets(bool sync) {
  // Waits for the acknowledgements as long as the producer keeps trying
  // (message.timeout.ms, 5 min by default, after which the delivery report
  // fails and sets shared_->fatal): a broker restart is waited out, not fatal.
  // Once asked to stop, it waits kFlushOnStop at most.
  const absl::Time start = absl::Now();
  absl::Time next_warning = start + absl::Seconds(10);
  while (shared_->undelivered > 0 && shared_->fatal.ok()) {
    rd_kafka_flush(producer_, 1000);
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
  if (pending_group_offsets_ && pending_group_offsets_->cnt > 0) {
    // Best effort: with a changelog, a new owner resumes from the snapshot;
    // the group offset only matters to one that finds no snapshot, and it
    // never runs ahead of the acknowledged snapshots.
    rd_kafka_resp_err_t err = rd_kafka_commit(
        consumer_, pending_group_offsets_.get(), /*async=*/sync ? 0 : 1);
    if (sync && err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      spdlog::warn("committing group offsets: {}", rd_kafka_err2str(err));
    }
  }
  pending_group_offsets_.reset();
  return absl::OkStatus();
}

absl::Status CommitPipeline::Commit(absl::Time now) {
  // After a failed store write nothing more may be written: the failed batch
  // is gone from memory (its windows, its advanced positions), so a later
  // commit, e.g. the one a revocation makes while the consumer closes, would
  // store progress past windows that were never written.
  if (!store_failed_.ok()) return store_failed_;
  const bool observer_wants =
      options_.observer != nullptr && options_.observer->WantsCommit(now);
  if (!uncommitted_ && pending_windows_.empty() && !observer_wants) {
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(shared_->fatal);
  StoreBatch batch;
  batch.windows = std::move(pending_windows_);
  pending_windows_.clear();
  RETURN_IF_ERROR(AddLateUpdates(batch));
  // The steps below, in this order, are the commit protocol:
  // docs/architecture.md#commit-protocol says why each crash point between
  // them is harmless. 1: publish this commit's windows.
  int64_t trimmed = 0;
  if (!options_.windows_topic.empty()) {
    for (WindowSummary& w : batch.windows) {
      RETURN_IF_ERROR(PublishWindow(w, trimmed));
    }
  }
  // 2-3: flush (windows, dead letters, the previous snapshots), then
  // commit the previous commit's group offsets.
  RETURN_IF_ERROR(FlushAndCommitOffsets());
  absl::flat_hash_map<int32_t, int64_t> resume;
  for (auto& [name, job] : jobs_->jobs()) {
    if (job.dirty) {
      std::string state = job.state.Serialize();
      if (auto part = jobs_->partitions().find(job.partition);
          part != jobs_->partitions().end()) {
        part->second.jobs[name] = state;
        // As the store keeps it: both only move forward.
        JobActivity& seen = part->second.activity[name];
        seen.last_event_ns = std::max(seen.last_event_ns, job.last_event_ns);
        seen.last_seen_wall_ns =
            std::max(seen.last_seen_wall_ns, absl::ToUnixNanos(now));
        part->second.changed = true;
      }
      batch.jobs.push_back(JobUpdate{.job = name,
                                     .last_event_ns = job.last_event_ns,
                                     .last_seen_wall = now,
                                     .state = std::move(state),
                                     .lifecycle = job.state.lifecycle});
      job.dirty = false;
    }
    if (job.windower) {
      if (std::optional<int64_t> r = job.windower->ResumeOffset()) {
        spdlog::debug("job {} partition {}: resume {} finalized through {}",
                      name, job.partition, *r,
                      job.windower->finalized_through_ns());
        auto [it, inserted] = resume.try_emplace(job.partition, *r);
        if (!inserted) it->second = std::min(it->second, *r);
      }
    }
  }
  const bool expire_jobs = now - last_job_expiry_ >= kJobExpiryInterval;
  if (expire_jobs) last_job_expiry_ = now;
  RdKafkaPartitionListPtr offsets(rd_kafka_topic_partition_list_new(
      static_cast<int>(jobs_->partitions().size())));
  for (auto& [p, part] : jobs_->partitions()) {
    if (part.next_offset < 0) continue;
    PartitionProgress progress;
    progress.topic = options_.topic;
    progress.partition = p;
    auto it = resume.find(p);
    progress.resume_offset = it != resume.end() ? it->second : part.next_offset;
    progress.committed_position =
        std::max(part.committed_position, part.next_offset);
    part.resume_offset = progress.resume_offset;
    if (expire_jobs) jobs_->ForgetExpired(part, progress.resume_offset);
    // No replay starts below the resume offset: older decisions are done.
    part.ledger.ForgetBefore(progress.resume_offset);
    part.committed_position = progress.committed_position;
    rd_kafka_topic_partition_list_add(offsets.get(), options_.topic.c_str(), p)
        ->offset = progress.resume_offset;
    batch.progress.push_back(std::move(progress));
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
    if (u.job.empty()) continue;
    PartitionState* part = jobs_->PartitionOf(u.job);
    if (part == nullptr) continue;  // Not an owned partition's job.
    if (u.state) {
      part->job_alerts[u.job] = *u.state;
    } else {
      part->job_alerts.erase(u.job);
    }
    part->changed = true;
  }
  for (PartitionProgress& progress : batch.progress) {
    const PartitionState& part = jobs_->partitions()[progress.partition];
    progress.state = EncodePartitionSnapshot(
        PartitionSnapshot{.topic = progress.topic,
                          .partition = progress.partition,
                          .resume_offset = progress.resume_offset,
                          .committed_position = progress.committed_position,
                          .jobs = part.jobs,
                          .ledger = part.ledger,
                          .job_alerts = part.job_alerts,
                          .activity = part.activity});
  }
  // 4: one store batch (fsynced unless --store-no-sync).
  absl::Status written = store_->Commit(batch);
  if (!written.ok()) {
    store_failed_ = absl::Status(
        written.code(), absl::StrCat("cannot write windows to the store, "
                                     "stopping before offsets move: ",
                                     written.message()));
    return store_failed_;
  }
  uncommitted_ = false;
  if (options_.observer != nullptr) options_.observer->AfterCommit(now);
  // 5: this commit's snapshots; their offsets wait for the next flush.
  int64_t snapshots = 0;
  if (changelog_) {
    for (const PartitionProgress& progress : batch.progress) {
      PartitionState& part = jobs_->partitions()[progress.partition];
      if (!part.changed) continue;
      ++shared_->undelivered;
      absl::Status s = changelog_->Write(
          PartitionSnapshot{.topic = progress.topic,
                            .partition = progress.partition,
                            .resume_offset = progress.resume_offset,
                            .committed_position = progress.committed_position,
                            .jobs = part.jobs,
                            .ledger = part.ledger,
                            .job_alerts = part.job_alerts,
                            .activity = part.activity});
      if (!s.ok()) {
        --shared_->undelivered;
        return s;
      }
      part.changed = false;
      ++snapshots;
    }
  }
  if (offsets->cnt > 0) pending_group_offsets_ = std::move(offsets);
  absl::MutexLock lock(&stats_->mu);
  stats_->stats.windows_written += static_cast<int64_t>(batch.windows.size());
  // Acknowledged: this commit's flush waited for them.
  if (!options_.windows_topic.empty()) {
    stats_->stats.windows_published +=
        static_cast<int64_t>(batch.windows.size());
  }
  stats_->stats.windows_trimmed += trimmed;
  stats_->stats.state_snapshots_written += snapshots;
  return absl::OkStatus();
}

}  // namespace bubblewatch
