#include "serve/window_materializer.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "alerts/alert_evaluator.h"
#include "base/status_macros.h"
#include "kafka/fetch_wakeup.h"
#include "kafka/kafka_admin.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "kafka/kafka_status.h"
#include "processor/fleet_topics.h"
#include "processor/job_state.h"
#include "processor/state_changelog.h"
#include "schemas/window_summary_codec.h"
#include "spdlog/spdlog.h"
#include "storage/window_key.h"

namespace bubblewatch {
namespace {

constexpr int kPollMs = 100;
constexpr absl::Duration kMetadataTimeout = absl::Seconds(10);
// How often a wait for a broker looks at Stop: SIGTERM must end serve within
// about a second also while its brokers do not answer.
constexpr absl::Duration kStopCheckInterval = absl::Milliseconds(200);
// A partition whose high watermark no fetch has reported yet is asked for
// it at most this often (a blocking request).
constexpr absl::Duration kWatermarkQueryInterval = absl::Seconds(1);
constexpr absl::Duration kWarningInterval = absl::Seconds(10);

absl::string_view Bytes(const void* data, size_t size) {
  return data == nullptr
             ? absl::string_view()
             : absl::string_view(static_cast<const char*>(data), size);
}

}  // namespace

absl::Status WindowMaterializerOptions::Validate() const {
  std::vector<std::string> problems;
  if (brokers.empty()) problems.push_back("brokers must not be empty");
  if (windows_topic.empty()) problems.push_back("windows_topic is empty");
  if (!state_topic.empty() && state_topic == windows_topic) {
    problems.push_back("state_topic and windows_topic are the same topic");
  }
  auto positive = [&](absl::string_view name, absl::Duration d) {
    if (d <= absl::ZeroDuration()) {
      problems.push_back(
          absl::StrCat(name, " must be > 0, got ", absl::FormatDuration(d)));
    }
  };
  positive("retention", retention);
  positive("retention_interval", retention_interval);
  positive("max_batch_wait", max_batch_wait);
  positive("metadata_interval", metadata_interval);
  positive("missing_topic_retry", missing_topic_retry);
  if (max_batch_messages < 1) {
    problems.push_back(absl::StrCat("max_batch_messages must be >= 1, got ",
                                    max_batch_messages));
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(problems, "; "));
}

namespace {

// The state topic's progress record in serve's store keeps, beside the next
// offset, the snapshots applied last from that partition (usually one key,
// "topic/P"): each as a 4-byte little-endian length, then its
// bytes as the state topic carried them.
struct AppliedSnapshot {
  PartitionSnapshot snapshot;
  std::string bytes;  // As received: stored again without re-encoding.
};
using AppliedSnapshots = std::map<std::string, AppliedSnapshot>;

std::string EncodeAppliedSnapshots(const AppliedSnapshots& applied) {
  std::string out;
  for (const auto& [key, a] : applied) {
    const std::string& bytes = a.bytes;
    const uint32_t n = static_cast<uint32_t>(bytes.size());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(n >> (8 * i)));
    out += bytes;
  }
  return out;
}

absl::StatusOr<AppliedSnapshots> DecodeAppliedSnapshots(
    absl::string_view bytes) {
  AppliedSnapshots out;
  while (!bytes.empty()) {
    if (bytes.size() < 4) {
      return absl::DataLossError("truncated list of applied snapshots");
    }
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) {
      n |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
    }
    bytes.remove_prefix(4);
    if (bytes.size() < n) {
      return absl::DataLossError("truncated list of applied snapshots");
    }
    ASSIGN_OR_RETURN(PartitionSnapshot s,
                     DecodePartitionSnapshot(bytes.substr(0, n)));
    std::string key = absl::StrCat(s.topic, "/", s.partition);
    out.insert_or_assign(
        std::move(key),
        AppliedSnapshot{.snapshot = std::move(s),
                        .bytes = std::string(bytes.substr(0, n))});
    bytes.remove_prefix(n);
  }
  return out;
}

}  // namespace

class WindowMaterializer::Impl {
 public:
  Impl(const WindowMaterializerOptions& options, WindowStore* store,
       RdKafkaPtr consumer)
      : options_(options), store_(store), consumer_(std::move(consumer)) {
    topics_.push_back(Followed{.name = options_.windows_topic});
    if (!options_.state_topic.empty()) {
      topics_.push_back(Followed{.name = options_.state_topic, .state = true});
    }
    status_.topic = options_.windows_topic;
    status_.state_topic = options_.state_topic;
  }

  absl::Status Run() {
    absl::Time next_metadata = absl::InfinitePast();
    absl::Time next_retention = absl::InfinitePast();
    while (!stop_.load()) {
      const absl::Time now = absl::Now();
      if (now >= next_metadata) {
        RETURN_IF_ERROR(RefreshPartitions());
        if (stop_.load()) break;
        const bool all_found = absl::c_all_of(
            topics_, [](const Followed& t) { return t.partitions > 0; });
        next_metadata = now + (all_found ? options_.metadata_interval
                                         : options_.missing_topic_retry);
      }
      if (now >= next_retention) {
        absl::StatusOr<RetentionStats> trimmed =
            store_->ApplyRetention(options_.retention);
        if (!trimmed.ok()) return trimmed.status();
        if (trimmed->windows_deleted > 0) {
          spdlog::info("retention removed {} windows of {} jobs",
                       trimmed->windows_deleted, trimmed->jobs_trimmed);
        }
        next_retention = now + options_.retention_interval;
      }
      if (absl::c_none_of(topics_,
                          [](const Followed& t) { return t.partitions > 0; })) {
        absl::SleepFor(absl::Milliseconds(kPollMs));
        continue;
      }
      std::vector<RdKafkaMessagePtr> batch;
      RETURN_IF_ERROR(Gather(batch));
      if (!batch.empty()) RETURN_IF_ERROR(Apply(batch));
      UpdateLag();
    }
    fetch_wakeup_.LogSummary();
    return absl::OkStatus();
  }

  void Stop() { stop_.store(true); }

  MaterializerStatus status() const {
    absl::MutexLock lock(&mu_);
    return status_;
  }

 private:
  // One topic followed: the windows topic, or the processors' state topic.
  struct Followed {
    std::string name;
    bool state = false;
    int32_t partitions = 0;  // 0 until its metadata was read.
    // Partition -> next offset the store holds progress for; -1: none yet.
    absl::flat_hash_map<int32_t, int64_t> next_offset;
    bool missing_logged = false;
  };

  // TopicPartitionCount within kMetadataTimeout, but kCancelled within
  // kStopCheckInterval of Stop while no broker is up: librdkafka first waits
  // up to the whole timeout for a usable broker (kUnavailable when none
  // came), which with the brokers down kept a stopping serve alive for 10 s
  // per topic. So that wait is asked for in slices; a request that reached a
  // broker and timed out gets the rest of the timeout whole, so that a slow
  // broker is still waited for.
  absl::StatusOr<int> PartitionCountUnlessStopped(const std::string& topic) {
    const absl::Time deadline = absl::Now() + kMetadataTimeout;
    for (;;) {
      const absl::Time slice_end =
          std::min(deadline, absl::Now() + kStopCheckInterval);
      absl::StatusOr<int> count = TopicPartitionCount(
          consumer_.get(), topic,
          std::max(slice_end - absl::Now(), absl::Milliseconds(1)));
      if (stop_.load()) return absl::CancelledError("stopping");
      const absl::Time now = absl::Now();
      if (now >= deadline) return count;
      if (absl::IsDeadlineExceeded(count.status())) {
        return TopicPartitionCount(consumer_.get(), topic, deadline - now);
      }
      if (!absl::IsUnavailable(count.status())) return count;
      // Not faster than a slice, should librdkafka answer at once.
      absl::SleepFor(slice_end - now);
    }
  }

  // Reads each topic's partition count; when one grew, assigns every
  // partition of every topic (again: an assignment replaces the last), each
  // from the next offset the store holds (the beginning when it holds none).
  absl::Status RefreshPartitions() {
    bool grew = false;
    for (Followed& t : topics_) {
      absl::StatusOr<int> count = PartitionCountUnlessStopped(t.name);
      if (absl::IsCancelled(count.status())) return absl::OkStatus();
      if (absl::IsNotFound(count.status())) {
        if (!t.missing_logged) {
          spdlog::warn(
              "{} topic {} does not exist (yet); waiting for it (a processor "
              "creates it on its first assignment, `bubblewatch topics "
              "create` beforehand)",
              t.state ? "state" : "windows", t.name);
          t.missing_logged = true;
        }
        continue;
      }
      if (!count.ok()) {
        spdlog::warn("reading the metadata of {}: {}", t.name,
                     count.status().ToString());
        continue;
      }
      if (*count <= t.partitions) continue;
      for (int32_t p = 0; p < *count; ++p) {
        if (t.next_offset.contains(p)) continue;
        ASSIGN_OR_RETURN(std::optional<PartitionProgress> stored,
                         store_->Progress(t.name, p));
        t.next_offset[p] = stored ? stored->committed_position : -1;
        if (t.state && stored && !stored->state.empty()) {
          absl::StatusOr<AppliedSnapshots> applied =
              DecodeAppliedSnapshots(stored->state);
          if (!applied.ok()) {
            return absl::DataLossError(
                absl::StrCat("serve's store: the snapshots applied from ",
                             t.name, "/", p, ": ", applied.status().message()));
          }
          applied_[p] = *std::move(applied);
        }
      }
      t.partitions = *count;
      grew = true;
    }
    if (!grew) return absl::OkStatus();
    RdKafkaPartitionListPtr list(rd_kafka_topic_partition_list_new(1));
    for (const Followed& t : topics_) {
      std::vector<std::string> resumed;
      for (int32_t p = 0; p < t.partitions; ++p) {
        const int64_t next = t.next_offset.at(p);
        rd_kafka_topic_partition_list_add(list.get(), t.name.c_str(), p)
            ->offset = next >= 0 ? next : RD_KAFKA_OFFSET_BEGINNING;
        if (next >= 0) resumed.push_back(absl::StrCat(p, "@", next));
      }
      if (t.partitions == 0) continue;
      spdlog::info("following {}: {} partitions, resuming {} from the store{}",
                   t.name, t.partitions,
                   resumed.empty() ? "none" : absl::StrJoin(resumed, " "),
                   resumed.size() < static_cast<size_t>(t.partitions)
                       ? ", the others from the beginning"
                       : "");
    }
    RETURN_IF_ERROR(KafkaErrorToStatus(
        rd_kafka_assign(consumer_.get(), list.get()),
        absl::StrCat("assigning the partitions of ", options_.windows_topic,
                     options_.state_topic.empty() ? "" : " and ",
                     options_.state_topic)));
    absl::MutexLock lock(&mu_);
    status_.partitions = topics_[0].partitions;
    if (topics_.size() > 1) status_.state_partitions = topics_[1].partitions;
    return absl::OkStatus();
  }

  // Polls one batch: until max_batch_messages, max_batch_wait after its
  // first message, or a poll that brings nothing (caught up).
  absl::Status Gather(std::vector<RdKafkaMessagePtr>& batch) {
    absl::Time deadline = absl::InfiniteFuture();
    gathered_next_.clear();
    while (static_cast<int>(batch.size()) < options_.max_batch_messages &&
           !stop_.load()) {
      const int timeout_ms =
          batch.empty() ? kPollMs
                        : static_cast<int>(std::clamp<int64_t>(
                              absl::ToInt64Milliseconds(deadline - absl::Now()),
                              0, kPollMs));
      RdKafkaMessagePtr m(rd_kafka_consumer_poll(consumer_.get(), timeout_ms));
      if (!m) {
        // Everything gathered before is in the store: next_offset is where
        // each partition goes on.
        if (batch.empty()) WakeStalledFetches();
        break;
      }
      fetch_wakeup_.OnMessage(absl::Now());
      if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) continue;
      if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        absl::Status s = KafkaErrorToStatus(
            m->err, absl::StrCat("consuming ", options_.windows_topic));
        if (absl::IsUnauthenticated(s) || m->err == RD_KAFKA_RESP_ERR__FATAL) {
          return s;
        }
        Warn(s.ToString());
        continue;
      }
      if (Refetched(*m)) continue;
      if (fetch_wakeup_.seeks() > 0) {  // Only Refetched reads it.
        int64_t& next = gathered_next_[{TopicIndex(m.get()), m->partition}];
        next = std::max(next, m->offset + 1);
      }
      if (batch.empty()) deadline = absl::Now() + options_.max_batch_wait;
      batch.push_back(std::move(m));
      if (absl::Now() >= deadline) break;
    }
    return absl::OkStatus();
  }

  // Restarts fetching that librdkafka < 2.4 put to sleep while a partition
  // lags behind the high watermark it last saw (kafka/fetch_wakeup.h): a
  // backlog of windows (serve restarted, or a new replica) is otherwise read
  // 16 MiB per second.
  void WakeStalledFetches() {
    std::vector<FetchWakeup::Position> positions;
    for (const Followed& t : topics_) {
      for (const auto& [p, next] : t.next_offset) {
        positions.push_back(
            {.topic = t.name, .partition = p, .next_offset = next});
      }
    }
    fetch_wakeup_.WakeIfStalled(consumer_.get(), positions, absl::Now());
  }

  // A message below what the store or this batch already holds, sent again
  // because it raced a seek of WakeStalledFetches: skipped (counted).
  bool Refetched(const rd_kafka_message_t& m) {
    if (m.err != RD_KAFKA_RESP_ERR_NO_ERROR) return false;
    const size_t topic = TopicIndex(&m);
    int64_t next = -1;
    if (auto it = topics_[topic].next_offset.find(m.partition);
        it != topics_[topic].next_offset.end()) {
      next = it->second;
    }
    if (auto it = gathered_next_.find({topic, m.partition});
        it != gathered_next_.end()) {
      next = std::max(next, it->second);
    }
    return fetch_wakeup_.Refetched(topics_[topic].name, m.partition, m.offset,
                                   next);
  }

  // What one batch changes, before it is written.
  struct Pending {
    // (job, start) -> the last version in the batch; nullopt: deleted.
    std::map<std::pair<std::string, int64_t>, std::optional<WindowSummary>>
        windows;
    absl::flat_hash_map<std::string, JobUpdate> jobs;
    // Alert-state key -> its update (the last one of the batch wins).
    std::map<std::string, AlertStateUpdate> alerts;
    // (topic index, partition) -> next offset.
    std::map<std::pair<size_t, int32_t>, int64_t> next;
    int64_t invalid = 0;
    int64_t state_invalid = 0;
    int64_t snapshots = 0;
    int64_t superseded = 0;
  };

  // One store commit: the newest version of each window of the batch (or
  // its deletion), what the snapshots say of jobs and alerts, the next
  // offset of each partition.
  absl::Status Apply(const std::vector<RdKafkaMessagePtr>& batch) {
    Pending pending;
    std::vector<uint64_t> scratch;
    for (const RdKafkaMessagePtr& m : batch) {
      const size_t topic = TopicIndex(m.get());
      int64_t& n = pending.next[{topic, m->partition}];
      n = std::max(n, m->offset + 1);
      if (topics_[topic].state) {
        AddSnapshot(*m, pending);
      } else {
        AddWindow(*m, pending, scratch);
      }
    }
    StoreBatch out;
    int64_t deletes = 0;
    for (auto& [key, window] : pending.windows) {
      if (window) {
        out.windows.push_back(*std::move(window));
      } else {
        out.window_deletes.push_back(
            WindowDelete{.job = key.first, .start_ns = key.second});
        ++deletes;
      }
    }
    for (auto& [job, update] : pending.jobs) {
      out.jobs.push_back(std::move(update));
    }
    for (auto& [key, update] : pending.alerts) {
      out.alert_states.push_back(std::move(update));
    }
    for (const auto& [where, offset] : pending.next) {
      const Followed& t = topics_[where.first];
      PartitionProgress progress{.topic = t.name,
                                 .partition = where.second,
                                 .resume_offset = offset,
                                 .committed_position = offset,
                                 .state = {}};
      if (t.state)
        progress.state = EncodeAppliedSnapshots(applied_[where.second]);
      out.progress.push_back(std::move(progress));
    }
    absl::Status written = store_->Commit(out);
    if (!written.ok()) {
      return absl::Status(
          written.code(),
          absl::StrCat("cannot write windows to the store, stopping: ",
                       written.message()));
    }
    for (const auto& [where, offset] : pending.next) {
      topics_[where.first].next_offset[where.second] = offset;
    }
    absl::MutexLock lock(&mu_);
    status_.windows_applied += static_cast<int64_t>(out.windows.size());
    status_.windows_deleted += deletes;
    status_.invalid_messages += pending.invalid;
    status_.state_invalid_messages += pending.state_invalid;
    status_.snapshots_applied += pending.snapshots;
    status_.snapshots_superseded += pending.superseded;
    return absl::OkStatus();
  }

  size_t TopicIndex(const rd_kafka_message_t* m) const {
    if (topics_.size() > 1 && rd_kafka_topic_name(m->rkt) == topics_[1].name) {
      return 1;
    }
    return 0;
  }

  void Skip(const rd_kafka_message_t& m, absl::string_view why,
            int64_t& counter) {
    ++counter;
    Warn(absl::StrCat("skipping ", rd_kafka_topic_name(m.rkt), "/", m.partition,
                      "@", m.offset, ": ", why));
  }

  void AddWindow(const rd_kafka_message_t& m, Pending& pending,
                 std::vector<uint64_t>& scratch) {
    const absl::string_view key = Bytes(m.key, m.key_len);
    if (m.payload == nullptr) {  // A tombstone.
      std::string job;
      int64_t start = 0;
      if (!ParseWindowTopicKey(key, &job, &start) ||
          !ValidateJobName(job).ok()) {
        Skip(m, "a tombstone whose key is not JOB@WINDOW_START_NS",
             pending.invalid);
        return;
      }
      pending.windows[{std::move(job), start}] = std::nullopt;
      return;
    }
    absl::StatusOr<WindowSummary> w = DecodeWindowSummary(
        Bytes(m.payload, m.len), WindowDetail::kFull, &scratch);
    if (!w.ok()) {
      Skip(m, w.status().message(), pending.invalid);
      return;
    }
    if (!ValidateJobName(w->job).ok() ||
        w->window.end_ns < w->window.start_ns ||
        key != WindowTopicKey(w->job, w->window.start_ns)) {
      Skip(m, "the key does not name the window in the value", pending.invalid);
      return;
    }
    // With the state topic a job's times are its owner's (the snapshots');
    // without (or while it does not exist), the newest window's end and its
    // publish time.
    if (topics_.size() == 1 || topics_[1].partitions == 0) {
      rd_kafka_timestamp_type_t type;
      const int64_t ms = rd_kafka_message_timestamp(&m, &type);
      const absl::Time published =
          ms >= 0 ? absl::FromUnixMillis(ms) : absl::Now();
      JobUpdate& u = JobOf(pending, w->job);
      RaiseTo(u.last_event_ns, w->window.end_ns);
      u.last_seen_wall = std::max(u.last_seen_wall, published);
    }
    pending.windows[{w->job, w->window.start_ns}] = *std::move(w);
  }

  // A split unit's state (a job's host, stored under `JOB@HOST`,
  // JobState::split_unit) is no job: its job's windows and record are stage
  // 2's (docs/architecture.md#one-job-across-processors).
  static bool IsSplitUnitState(const std::string& bytes) {
    absl::StatusOr<JobState> parsed = JobState::Parse(bytes);
    return parsed.ok() && parsed->split_unit;
  }

  static JobUpdate& JobOf(Pending& pending, const std::string& job) {
    auto [it, added] = pending.jobs.try_emplace(job);
    if (added) it->second.job = job;
    return it->second;
  }

  // One job's record of a partition snapshot kept per key
  // (docs/state.md#partition-snapshots): its current version becomes the
  // job's update, as its owner's store has it.
  void AddJobRecord(const rd_kafka_message_t& m, Pending& pending) {
    absl::StatusOr<PartitionJobRecord> r =
        DecodePartitionJob(Bytes(m.payload, m.len));
    if (!r.ok()) {
      Skip(m, r.status().message(), pending.state_invalid);
      return;
    }
    if (Bytes(m.key, m.key_len) !=
        PartitionJobKey(r->topic, r->partition, r->job)) {
      Skip(m, "the key does not name the record's job", pending.state_invalid);
      return;
    }
    const JobSnapshotVersion& now = r->current;
    const std::optional<JobSnapshotVersion>& before = r->previous;
    const std::optional<std::string>& state =
        now.state ? now.state : (before ? before->state : std::nullopt);
    if (state && IsSplitUnitState(*state)) return;
    if (now.state) {
      const bool same = before && before->state == now.state &&
                        before->activity == now.activity;
      if (!same) {
        JobUpdate& u = JobOf(pending, r->job);
        u.state = *now.state;
        if (now.activity.last_seen_wall_ns != 0) {  // Known activity.
          u.last_event_ns =
              LaterOf(u.last_event_ns, now.activity.last_event_ns);
          u.last_seen_wall =
              std::max(u.last_seen_wall,
                       absl::FromUnixNanos(now.activity.last_seen_wall_ns));
        }
      }
    } else if (before && before->state) {
      // Forgotten by its owner past --job-expiry: stored as its store has it.
      absl::StatusOr<JobState> expired = JobState::Parse(*before->state);
      if (expired.ok() && expired->MarkExpired()) {
        JobOf(pending, r->job).state = expired->Serialize();
      }
    }
    if (now.alerts != (before ? before->alerts : std::nullopt)) {
      const std::string alert_key = JobAlertStateKey(r->job);
      pending.alerts.insert_or_assign(
          alert_key, AlertStateUpdate{
                         .key = alert_key, .job = r->job, .state = now.alerts});
    }
  }

  // A partition snapshot: what changed since the one applied last under its
  // key becomes job and alert-state updates.
  void AddSnapshot(const rd_kafka_message_t& m, Pending& pending) {
    // A tombstone deletes a gone job's record, whose last version (without
    // state or alerts) was applied when it came.
    if (m.payload == nullptr) return;
    if (IsPartitionJobRecord(Bytes(m.payload, m.len))) {
      AddJobRecord(m, pending);
      return;
    }
    absl::StatusOr<PartitionSnapshot> s =
        DecodePartitionSnapshot(Bytes(m.payload, m.len));
    if (!s.ok()) {
      Skip(m, s.status().message(), pending.state_invalid);
      return;
    }
    const std::string key = absl::StrCat(s->topic, "/", s->partition);
    if (Bytes(m.key, m.key_len) != key) {
      Skip(m, "the key does not name the snapshot's partition",
           pending.state_invalid);
      return;
    }
    AppliedSnapshots& applied = applied_[m.partition];
    if (s->jobs_per_key) {
      // Its jobs come in records of their own (AddJobRecord); there is no
      // older snapshot's job list left to compare with.
      applied.erase(key);
      ++pending.snapshots;
      return;
    }
    auto previous = applied.find(key);
    const PartitionSnapshot* before =
        previous == applied.end() ? nullptr : &previous->second.snapshot;
    if (before != nullptr &&
        s->committed_position < before->committed_position) {
      ++pending.superseded;
      return;
    }
    static const JobStates kNone;
    static const std::map<std::string, JobActivity> kNoActivity;
    const JobStates& jobs_before = before ? before->jobs : kNone;
    const JobStates& alerts_before = before ? before->job_alerts : kNone;
    const auto& activity_before = before ? before->activity : kNoActivity;
    for (const auto& [job, state] : s->jobs) {
      auto seen = s->activity.find(job);
      auto seen_before = activity_before.find(job);
      auto old = jobs_before.find(job);
      const bool same_state = old != jobs_before.end() && old->second == state;
      const bool same_activity =
          seen == s->activity.end() || (seen_before != activity_before.end() &&
                                        seen_before->second == seen->second);
      if (same_state && same_activity) continue;
      if (IsSplitUnitState(state)) continue;
      JobUpdate& u = JobOf(pending, job);
      u.state = state;
      if (seen != s->activity.end()) {
        u.last_event_ns = LaterOf(u.last_event_ns, seen->second.last_event_ns);
        u.last_seen_wall =
            std::max(u.last_seen_wall,
                     absl::FromUnixNanos(seen->second.last_seen_wall_ns));
      }
    }
    for (const auto& [job, state] : jobs_before) {
      if (s->jobs.contains(job)) continue;
      // Forgotten by its owner past --job-expiry: stored as its store has it.
      absl::StatusOr<JobState> expired = JobState::Parse(state);
      if (!expired.ok() || expired->split_unit) continue;  // (Checked.)
      if (expired->MarkExpired())
        JobOf(pending, job).state = expired->Serialize();
    }
    for (const auto& [job, state] : s->job_alerts) {
      auto old = alerts_before.find(job);
      if (old != alerts_before.end() && old->second == state) continue;
      const std::string alert_key = JobAlertStateKey(job);
      pending.alerts.insert_or_assign(
          alert_key,
          AlertStateUpdate{.key = alert_key, .job = job, .state = state});
    }
    for (const auto& [job, state] : alerts_before) {
      if (s->job_alerts.contains(job)) continue;
      const std::string alert_key = JobAlertStateKey(job);
      pending.alerts.insert_or_assign(
          alert_key, AlertStateUpdate{
                         .key = alert_key, .job = job, .state = std::nullopt});
    }
    applied.insert_or_assign(
        key, AppliedSnapshot{.snapshot = *std::move(s),
                             .bytes = std::string(Bytes(m.payload, m.len))});
    ++pending.snapshots;
  }

  // Lag from the high watermarks librdkafka caches from its fetches; a
  // partition without one yet is asked for it.
  void UpdateLag() {
    const absl::Time now = absl::Now();
    bool may_query = now >= next_watermark_query_;
    std::vector<std::optional<int64_t>> lags;
    for (Followed& t : topics_) {
      std::optional<int64_t> total;
      if (t.partitions > 0) total = 0;
      for (int32_t p = 0; p < t.partitions; ++p) {
        int64_t low = -1, high = -1;
        rd_kafka_get_watermark_offsets(consumer_.get(), t.name.c_str(), p, &low,
                                       &high);
        if (high < 0 && may_query) {
          next_watermark_query_ = now + kWatermarkQueryInterval;
          if (rd_kafka_query_watermark_offsets(consumer_.get(), t.name.c_str(),
                                               p, &low, &high, 1000) !=
              RD_KAFKA_RESP_ERR_NO_ERROR) {
            high = -1;
          }
        }
        if (high < 0) {
          total.reset();
          break;
        }
        const int64_t next = std::max<int64_t>(t.next_offset[p], low);
        *total += std::max<int64_t>(0, high - std::max<int64_t>(next, 0));
      }
      lags.push_back(total);
    }
    absl::MutexLock lock(&mu_);
    status_.lag_messages = lags[0];
    if (lags.size() > 1) status_.state_lag_messages = lags[1];
  }

  void Warn(const std::string& message) {
    const absl::Time now = absl::Now();
    if (now < next_warning_) {
      ++warnings_suppressed_;
      return;
    }
    if (warnings_suppressed_ > 0) {
      spdlog::warn("{} ({} similar warnings suppressed)", message,
                   warnings_suppressed_);
    } else {
      spdlog::warn("{}", message);
    }
    warnings_suppressed_ = 0;
    next_warning_ = now + kWarningInterval;
  }

  const WindowMaterializerOptions options_;
  WindowStore* const store_;
  RdKafkaPtr consumer_;
  std::atomic<bool> stop_{false};
  // The windows topic, then the state topic when followed.
  std::vector<Followed> topics_;
  FetchWakeup fetch_wakeup_;
  // Of the batch being gathered: (topic index, partition) -> next offset.
  absl::flat_hash_map<std::pair<size_t, int32_t>, int64_t> gathered_next_;
  // State partition -> snapshot key -> the snapshot applied last (what the
  // store holds of its jobs and alerts).
  absl::flat_hash_map<int32_t, AppliedSnapshots> applied_;
  absl::Time next_watermark_query_ = absl::InfinitePast();
  absl::Time next_warning_ = absl::InfinitePast();
  int64_t warnings_suppressed_ = 0;
  mutable absl::Mutex mu_;
  MaterializerStatus status_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<WindowMaterializer>> WindowMaterializer::Create(
    const WindowMaterializerOptions& options, WindowStore* store) {
  RETURN_IF_ERROR(options.Validate());
  KafkaConfig config(options.brokers);
  RETURN_IF_ERROR(config.SetAssignments(options.kafka_properties));
  // librdkafka's assign() wants a group id, though this consumer never
  // joins the group nor commits: offsets live in the store, with the
  // windows. One fixed name that no member uses.
  config.Set("group.id", "bubblewatch-serve");
  RETURN_IF_ERROR(config.Require("enable.auto.commit", "false"));
  config.Set("enable.auto.offset.store", "false");
  // Stored offsets can fall below the topic's start (retention deleted
  // them while serve was down): start over from what is there.
  config.SetDefault("auto.offset.reset", "earliest");
  SetConsumerPrefetchDefaults(config);
  ASSIGN_OR_RETURN(RdKafkaPtr consumer,
                   NewKafkaClient(RD_KAFKA_CONSUMER, config));
  rd_kafka_poll_set_consumer(consumer.get());
  return std::unique_ptr<WindowMaterializer>(new WindowMaterializer(
      std::make_unique<Impl>(options, store, std::move(consumer))));
}

WindowMaterializer::WindowMaterializer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
WindowMaterializer::~WindowMaterializer() = default;
absl::Status WindowMaterializer::Run() { return impl_->Run(); }
void WindowMaterializer::Stop() { impl_->Stop(); }
MaterializerStatus WindowMaterializer::status() const {
  return impl_->status();
}

}  // namespace bubblewatch
