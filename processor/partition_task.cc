#include "processor/partition_task.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {

PartitionTask::PartitionTask(const StreamProcessorOptions& options,
                             WindowStore* store, BrokerHealth* health,
                             RuntimeShared* shared)
    : options_(options),
      shared_(shared),
      health_(health),
      jobs_(options_, store, &stats_),
      commits_(options_, store, &jobs_, health, shared, &stats_) {}

void PartitionTask::Connect(std::unique_ptr<CommitKafka> kafka,
                            std::unique_ptr<StateChangelog> changelog,
                            DeadLetterKafka* dead_letters) {
  dead_letters_ = std::make_unique<DeadLetterSink>(
      dead_letters, options_.topic, options_.dlq_topic, shared_, &stats_);
  commits_.Connect(std::move(kafka), std::move(changelog));
}

void PartitionTask::Assign(std::span<Assigned> partitions) {
  for (Assigned& a : partitions) {
    absl::StatusOr<RestoredPartition> restored =
        commits_.RestorePartition(options_.topic, a.partition, a.offset);
    if (!restored.ok()) {
      shared_->fatal = restored.status();
      continue;
    }
    if (absl::Status s = jobs_.AddPartition(a.partition, *std::move(restored));
        !s.ok()) {
      shared_->fatal = s;
      continue;
    }
    if (options_.observer != nullptr) {
      const PartitionState& part = jobs_.partitions().at(a.partition);
      std::vector<std::string> jobs;
      for (const auto& [job, unused] : part.committed_states) {
        jobs.push_back(job);
      }
      options_.observer->OnJobsAssigned(jobs, part.job_alerts);
    }
  }
  commits_.AssignmentDone();
}

void PartitionTask::Revoke(std::span<const int32_t> partitions,
                           absl::Time now) {
  // Everything final is already in the store with its progress; open
  // windows are rebuilt by the next owner from the stored resume offset.
  absl::Status s = commits_.Commit(now);
  // The next owner reads the changelog: it must hold this last snapshot.
  if (s.ok()) s = commits_.FlushAndCommitOffsets(/*sync=*/true);
  if (!s.ok()) shared_->fatal = s;
  for (int32_t p : partitions) {
    spdlog::info("revoked {}/{}", options_.topic, p);
    if (options_.observer != nullptr) {
      absl::btree_set<std::string> jobs;
      if (auto it = jobs_.partitions().find(p);
          it != jobs_.partitions().end()) {
        for (const auto& [job, unused] : it->second.committed_states) {
          jobs.insert(job);
        }
        for (const auto& [job, unused] : it->second.job_alerts) {
          jobs.insert(job);
        }
      }
      for (const auto& [job, entry] : jobs_.live_jobs()) {
        if (entry.partition == p) jobs.insert(job);
      }
      options_.observer->OnJobsRevoked({jobs.begin(), jobs.end()});
    }
    jobs_.DropPartition(p);
  }
}

absl::Status PartitionTask::OnMessage(const ConsumedMessage& message,
                                      absl::Time now) {
  // Within one assignment a partition is read once, in order: an offset
  // below the next one was handled already. librdkafka sends such again
  // (a rebalance pauses and resumes the fetchers of the partitions a member
  // keeps). Taken as a replay (it is below the committed position after a
  // commit) it would be added to the open windows a second time: the
  // windower already holds its events (docs/semantics.md#effectively-once).
  if (auto it = jobs_.partitions().find(message.partition);
      it != jobs_.partitions().end() &&
      message.offset < it->second.next_offset) {
    absl::MutexLock lock(&stats_.mu);
    if (stats_.stats.redelivered_messages++ == 0) {
      spdlog::warn(
          "{}/{}: offset {} sent again (the next is {}): skipped, as every "
          "message handled already in this assignment",
          options_.topic, message.partition, message.offset,
          it->second.next_offset);
    }
    return absl::OkStatus();
  }
  // The message counts in its partition's progress before it is decided:
  // a failure below stops the processor with nothing more committed.
  const PartitionState& part =
      jobs_.NoteMessage(message.partition, message.offset);
  const bool replay = message.offset < part.committed_position;
  commits_.MarkUncommitted();
  {
    absl::MutexLock lock(&stats_.mu);
    ++stats_.stats.messages;
    if (replay) ++stats_.stats.replayed_messages;
  }
  absl::StatusOr<Admission> admitted =
      admission_.Admit(message.payload, message.partition, message.offset,
                       replay, now, message.key);
  if (!admitted.ok()) {
    shared_->fatal = admitted.status();
    return admitted.status();
  }
  Admission& admission = *admitted;
  switch (admission.verdict) {
    case Admission::Verdict::kSkip:
      return absl::OkStatus();
    case Admission::Verdict::kDeadLetter:
      dead_letters_->Send(
          message.partition, message.offset, message.key,
          absl::string_view(
              reinterpret_cast<const char*>(message.payload.data()),
              message.payload.size()),
          message.read_headers == nullptr
              ? MessageHeaders()
              : message.read_headers(message.headers_source),
          admission.rejection.reason, admission.rejection.detail,
          admission.source ? &*admission.source : nullptr);
      return absl::OkStatus();
    case Admission::Verdict::kDuplicate: {
      absl::MutexLock lock(&stats_.mu);
      ++stats_.stats.duplicate_batches;
      return absl::OkStatus();
    }
    case Admission::Verdict::kAccept:
      break;
  }
  const std::string& job_name = admission.name;
  PartitionJobs::Added added =
      jobs_.AddBatch(message.partition, job_name, *admission.job,
                     admission.batch, message.offset, replay, now, HostIdle());
  // A split unit stores no window to add its late events to: its windower
  // made a kLate part of them, which stage 2 adds to the merged windows
  // (docs/semantics.md#split-jobs).
  if (!admission.job->split) {
    commits_.AddLateCounts(job_name, added.late_counts,
                           added.late_collective_counts);
  }
  // Windows that could not be made (docs/semantics.md#no-silent-loss).
  if (absl::Status s = jobs_.analysis_failure(); !s.ok()) {
    shared_->fatal = s;
    return s;
  }
  for (WindowSummary& w : added.windows) {
    commits_.pending_windows().push_back(std::move(w));
  }
  for (HostWindowPart& p : jobs_.TakeParts()) {
    commits_.pending_parts().push_back(std::move(p));
  }
  return absl::OkStatus();
}

absl::Status PartitionTask::Tick(absl::Time now) {
  if (CaughtUp() && jobs_.CloseIdle(now, commits_.pending_windows()) > 0) {
    commits_.MarkUncommitted();
  }
  for (HostWindowPart& p : jobs_.TakeParts()) {
    commits_.pending_parts().push_back(std::move(p));
  }
  if (absl::Status s = jobs_.analysis_failure(); !s.ok()) {
    shared_->fatal = s;
    return s;
  }
  if (!commits_.pending_windows().empty() ||
      !commits_.pending_parts().empty() ||
      now - last_commit_ >= options_.commit_interval) {
    RETURN_IF_ERROR(commits_.Commit(now));
    last_commit_ = now;
  }
  return absl::OkStatus();
}

absl::Status PartitionTask::Finish(absl::Time now) {
  RETURN_IF_ERROR(commits_.Commit(now));
  return commits_.FlushAndCommitOffsets(/*sync=*/true);
}

bool PartitionTask::CaughtUp() const {
  if (jobs_.partitions().empty() || health_->down()) return false;
  for (const auto& [p, part] : jobs_.partitions()) {
    if (!part.at_end) return false;
  }
  return true;
}

absl::Duration PartitionTask::HostIdle() const {
  // Silence only means something once the consumer has read everything:
  // while it lags, a host's next batch may simply not be read yet.
  return CaughtUp() ? options_.idle_timeout : absl::InfiniteDuration();
}

std::optional<int32_t> PartitionTask::AnyPartition() const {
  if (jobs_.partitions().empty()) return std::nullopt;
  return jobs_.partitions().begin()->first;
}

KafkaOffset PartitionTask::next_offset(int32_t partition) const {
  auto it = jobs_.partitions().find(partition);
  return it == jobs_.partitions().end() ? -1 : it->second.next_offset;
}

std::vector<std::pair<int32_t, KafkaOffset>> PartitionTask::Lagging() const {
  std::vector<std::pair<int32_t, KafkaOffset>> out;
  for (const auto& [p, part] : jobs_.partitions()) {
    if (!part.at_end) out.emplace_back(p, part.next_offset);
  }
  return out;
}

}  // namespace bubblewatch
