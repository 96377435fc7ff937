#include "processor/window_parts_task.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/strings/str_cat.h"
#include "analysis/varint_codec.h"
#include "base/status_macros.h"
#include "processor/fleet_topics.h"
#include "processor/state_changelog.h"
#include "processor/window_fit.h"
#include "schemas/window_summary_codec.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {
namespace {

constexpr uint8_t kMergeRecordVersion = 1;
constexpr uint8_t kMergeSnapshotVersion = 1;
// A read of the state topic that makes no progress this long fails (as
// StateChangelog's).
constexpr absl::Duration kChangelogTimeout = absl::Seconds(15);
// As CommitPipeline's (commit_pipeline.cc): a flush unacknowledged this
// long means the broker is away; once stopping, a flush waits this long.
constexpr absl::Duration kPartsSlowFlush = absl::Seconds(2);
constexpr absl::Duration kPartsFlushOnStop = absl::Seconds(30);
constexpr absl::Duration kPartsAdminTimeout = absl::Seconds(15);

}  // namespace

std::string EncodeMergeJobRecord(const MergeJobRecord& record) {
  VarintWriter w;
  w.Byte(kMergeRecordVersion);
  w.Signed(record.world_size);
  w.Byte(record.finalized_edge_ns.has_value() ? 1 : 0);
  if (record.finalized_edge_ns) w.Signed(*record.finalized_edge_ns);
  w.Unsigned(record.hosts.size());
  for (const auto& [name, host] : record.hosts) {
    w.String(name);
    w.Unsigned(host.ranks.size());
    for (int32_t r : host.ranks) w.Signed(r);
    w.Byte(host.newest_end_ns.has_value() ? 1 : 0);
    if (host.newest_end_ns) w.Signed(*host.newest_end_ns);
    w.Byte(host.ended ? 1 : 0);
  }
  return w.Take();
}

absl::StatusOr<MergeJobRecord> DecodeMergeJobRecord(absl::string_view bytes) {
  VarintReader r(bytes);
  const uint8_t version = r.Byte();
  if (r.ok() && version != kMergeRecordVersion) {
    return absl::DataLossError(
        absl::StrCat("stage 2 job record: unknown version ", version));
  }
  MergeJobRecord out;
  out.world_size = r.Int32();
  if (r.Byte() != 0) out.finalized_edge_ns = r.Signed();
  const size_t hosts = r.Count();
  for (size_t i = 0; i < hosts && r.ok(); ++i) {
    std::string name = r.String();
    MergeJobRecord::Host host;
    const size_t ranks = r.Count();
    for (size_t j = 0; j < ranks && r.ok(); ++j)
      host.ranks.push_back(r.Int32());
    if (r.Byte() != 0) host.newest_end_ns = r.Signed();
    host.ended = r.Byte() != 0;
    out.hosts.emplace(std::move(name), std::move(host));
  }
  if (!r.ok() || !r.done()) {
    return absl::DataLossError("stage 2 job record: truncated or malformed");
  }
  return out;
}

std::string MergePartitionKey(absl::string_view topic, int32_t partition) {
  return absl::StrCat(topic, "/", partition);
}

std::string EncodeMergePartitionSnapshot(const MergePartitionSnapshot& s) {
  VarintWriter w;
  w.Byte(kMergeSnapshotVersion);
  w.String(s.topic);
  w.Signed(s.partition);
  w.Signed(s.resume_offset);
  w.Signed(s.committed_position);
  w.Unsigned(s.jobs.size());
  for (const auto& [name, record] : s.jobs) {
    w.String(name);
    w.String(record);
  }
  return w.Take();
}

absl::StatusOr<MergePartitionSnapshot> DecodeMergePartitionSnapshot(
    absl::string_view bytes) {
  VarintReader r(bytes);
  const uint8_t version = r.Byte();
  if (r.ok() && version != kMergeSnapshotVersion) {
    return absl::DataLossError(
        absl::StrCat("stage 2 partition snapshot: unknown version ", version));
  }
  MergePartitionSnapshot out;
  out.topic = r.String();
  out.partition = r.Int32();
  out.resume_offset = r.Signed();
  out.committed_position = r.Signed();
  const size_t jobs = r.Count();
  for (size_t i = 0; i < jobs && r.ok(); ++i) {
    std::string name = r.String();
    out.jobs[std::move(name)] = r.String();
  }
  if (!r.ok() || !r.done()) {
    return absl::DataLossError(
        "stage 2 partition snapshot: truncated or malformed");
  }
  return out;
}

WindowPartsTask::WindowPartsTask(const StreamProcessorOptions& options,
                                 WindowStore* store, BrokerHealth* health,
                                 RuntimeShared* shared)
    : options_(options), store_(store), health_(health), shared_(shared) {}

void WindowPartsTask::Connect(std::unique_ptr<CommitKafka> kafka,
                              DeadLetterKafka* dead_letters) {
  kafka_ = std::move(kafka);
  dead_letters_ = std::make_unique<DeadLetterSink>(
      dead_letters, options_.topic, options_.dlq_topic, shared_, &stats_);
}

void WindowPartsTask::PrepareWindowsTopic() {
  if (topics_prepared_ || options_.windows_topic.empty()) return;
  topics_prepared_ = true;
  const std::string& topic = options_.windows_topic;
  absl::StatusOr<int> partitions =
      kafka_->PartitionCount(topic, /*just_created=*/false, kPartsAdminTimeout);
  if (absl::IsNotFound(partitions.status())) {
    absl::StatusOr<int> input = kafka_->PartitionCount(
        options_.topic, /*just_created=*/false, kPartsAdminTimeout);
    absl::StatusOr<bool> made = kafka_->CreateTopicIfMissing(
        TopicSpec{.name = topic,
                  .partitions = input.ok() ? *input : 1,
                  .replication_factor = -1,
                  .configs = WindowsTopicConfigs(options_.retention)},
        kPartsAdminTimeout);
    if (!made.ok()) {
      spdlog::warn("windows topic {} is missing and could not be created: {}",
                   topic, std::string(made.status().message()));
      return;
    }
    partitions = kafka_->PartitionCount(topic, /*just_created=*/true,
                                        kPartsAdminTimeout);
  }
  if (!partitions.ok()) {
    spdlog::warn("windows topic {}: {}; windows go where their key hashes to",
                 topic, std::string(partitions.status().message()));
    return;
  }
  windows_partitions_ = *partitions;
}

absl::StatusOr<std::optional<MergePartitionSnapshot>>
WindowPartsTask::ReadChangelog(int32_t partition) {
  if (changelog_ == nullptr || options_.state_topic.empty()) {
    return std::nullopt;
  }
  if (!changelog_prepared_) {
    // Created with as many partitions as the parts topic: the snapshot of
    // parts partition P lives in its partition P (StateChangelog::Prepare).
    ASSIGN_OR_RETURN(int partitions, changelog_->TopicPartitions(
                                         options_.topic, /*just_created=*/false,
                                         kChangelogTimeout));
    StateChangelog topic(options_.state_topic, changelog_);
    ASSIGN_OR_RETURN(changelog_created_now_, topic.Prepare(partitions));
    changelog_prepared_ = true;
  }
  if (changelog_created_now_) return std::nullopt;
  // The whole partition (compacted: about one record per key); the record
  // with the highest committed position wins, which also discards a late
  // record of a fenced-out former owner.
  const std::string key = MergePartitionKey(options_.topic, partition);
  std::optional<MergePartitionSnapshot> newest;
  RETURN_IF_ERROR(changelog_->ReadPartition(
      options_.state_topic, partition, kChangelogTimeout,
      [&](const ChangelogKafka::Record& record) {
        if (record.key != key || !record.value) return;
        absl::StatusOr<MergePartitionSnapshot> s =
            DecodeMergePartitionSnapshot(*record.value);
        if (!s.ok() || s->topic != options_.topic ||
            s->partition != partition) {
          spdlog::warn("state topic {} offset {}: skipped: {}",
                       options_.state_topic, record.offset,
                       s.ok() ? "another partition's snapshot"
                              : std::string(s.status().message()));
          return;
        }
        if (!newest || s->committed_position >= newest->committed_position) {
          newest = *std::move(s);
        }
      }));
  return newest;
}

absl::Status WindowPartsTask::WriteChangelog(const PartitionProgress& p) {
  if (changelog_ == nullptr || options_.state_topic.empty()) {
    return absl::OkStatus();
  }
  MergePartitionSnapshot snapshot{.topic = p.topic,
                                  .partition = p.partition,
                                  .resume_offset = p.resume_offset,
                                  .committed_position = p.committed_position};
  for (const auto& [name, job] : jobs_) {
    if (job.partition == p.partition) {
      snapshot.jobs[name] = EncodeMergeJobRecord(job.record);
    }
  }
  // Counted as undelivered until acknowledged: the next commit's flush
  // waits for it before its group offsets move.
  ++shared_->undelivered;
  absl::Status s = changelog_->ProduceRecord(
      options_.state_topic, p.partition,
      MergePartitionKey(p.topic, p.partition),
      EncodeMergePartitionSnapshot(snapshot), "stage 2 state topic");
  if (!s.ok()) {
    --shared_->undelivered;
    return s;
  }
  absl::MutexLock lock(&stats_.mu);
  ++stats_.stats.state_snapshots_written;
  return absl::OkStatus();
}

void WindowPartsTask::Assign(std::span<PartitionTask::Assigned> partitions) {
  for (PartitionTask::Assigned& a : partitions) {
    if (kafka_ != nullptr) PrepareWindowsTopic();
    absl::StatusOr<std::optional<PartitionProgress>> progress =
        store_->Progress(options_.topic, a.partition);
    if (!progress.ok()) {
      shared_->fatal = progress.status();
      continue;
    }
    absl::StatusOr<std::vector<std::pair<std::string, std::string>>> records =
        store_->PartitionJobRecords(options_.topic, a.partition);
    if (!records.ok()) {
      shared_->fatal = records.status();
      continue;
    }
    absl::StatusOr<std::optional<MergePartitionSnapshot>> remote =
        ReadChangelog(a.partition);
    if (!remote.ok()) {
      shared_->fatal = absl::Status(
          remote.status().code(),
          absl::StrCat("cannot read the state topic ", options_.state_topic,
                       ": ", remote.status().message()));
      continue;
    }
    // Both are the state of one commit; the newer one processed more. On a
    // tie the local one is as good.
    const bool from_changelog =
        remote->has_value() &&
        (!progress->has_value() ||
         (*remote)->committed_position > (*progress)->committed_position);
    if (from_changelog) {
      progress->emplace(PartitionProgress{
          .topic = options_.topic,
          .partition = a.partition,
          .resume_offset = (*remote)->resume_offset,
          .committed_position = (*remote)->committed_position});
      records->assign((*remote)->jobs.begin(), (*remote)->jobs.end());
      absl::MutexLock lock(&stats_.mu);
      ++stats_.stats.state_restores;
    }
    std::map<std::string, Job> restored;
    absl::Status failed;
    for (const auto& [name, bytes] : *records) {
      absl::StatusOr<MergeJobRecord> r = DecodeMergeJobRecord(bytes);
      if (!r.ok()) {
        failed = absl::Status(
            r.status().code(),
            absl::StrCat("job ", name, ": ", r.status().message()));
        break;
      }
      Job& job = restored[name];
      job.partition = a.partition;
      job.record = *std::move(r);
      job.ranks_held = RanksHeld(job.record);
      // The store may lack the records (or hold older ones): the first
      // commit writes them.
      job.dirty = from_changelog;
    }
    if (!failed.ok()) {
      shared_->fatal = failed;
      continue;
    }
    Partition& part = partitions_[a.partition];
    part = Partition{};
    if (progress->has_value()) {
      a.offset = (*progress)->resume_offset;
      part.committed_position = (*progress)->committed_position;
      // Where this owner stands before it reads anything: its first
      // commit stores the same progress and commits the group offset that
      // a crash after the last store write may have left behind.
      part.next_offset = a.offset;
      uncommitted_ = true;
    }
    spdlog::info("assigned {}/{}: {} jobs from the {}, resume at {}",
                 options_.topic, a.partition, restored.size(),
                 from_changelog ? "state topic" : "store", a.offset);
    for (auto& [name, job] : restored) jobs_[name] = std::move(job);
  }
}

void WindowPartsTask::Revoke(std::span<const int32_t> partitions,
                             absl::Time now) {
  absl::Status s = Commit(now);
  if (s.ok()) s = FlushAndCommitOffsets(/*sync=*/true);
  if (!s.ok()) shared_->fatal = s;
  for (int32_t p : partitions) {
    spdlog::info("revoked {}/{}", options_.topic, p);
    partitions_.erase(p);
    std::erase_if(jobs_,
                  [p](const auto& j) { return j.second.partition == p; });
  }
}

void WindowPartsTask::OnEndOfPartition(int32_t partition) {
  auto it = partitions_.find(partition);
  if (it != partitions_.end()) it->second.at_end = true;
}

void WindowPartsTask::DeadLetter(const ConsumedMessage& message, bool replay,
                                 absl::string_view reason, std::string detail) {
  // A replayed rejection got its dead letter the first time.
  if (replay) return;
  dead_letters_->Send(
      message.partition, message.offset, message.key,
      absl::string_view(reinterpret_cast<const char*>(message.payload.data()),
                        message.payload.size()),
      message.read_headers == nullptr
          ? MessageHeaders()
          : message.read_headers(message.headers_source),
      reason, detail);
}

void WindowPartsTask::NoteHost(Job& job, const HostWindowPart& part) {
  MergeJobRecord& record = job.record;
  bool changed = false;
  bool ranks_changed = false;
  if (part.world_size > record.world_size) {
    record.world_size = part.world_size;
    ranks_changed = true;
  }
  auto [it, inserted] = record.hosts.try_emplace(part.host);
  MergeJobRecord::Host& host = it->second;
  changed |= inserted;
  for (int32_t r : part.ranks) {
    auto at = std::lower_bound(host.ranks.begin(), host.ranks.end(), r);
    if (at == host.ranks.end() || *at != r) {
      host.ranks.insert(at, r);
      ranks_changed = true;
    }
  }
  // A host's parts come in window order: an older part (a copy, a replay)
  // says nothing new of where the host is. A part of the newest window
  // again (its copy) says the same `last`.
  const int64_t end = part.window.end_ns;
  if (host.newest_end_ns && end > *host.newest_end_ns && host.ended) {
    // A host that had ended sends a newer window: a new run. When every
    // host had ended (the job had), the job starts afresh: the others'
    // ends were the previous run's, and their new parts may not be read
    // yet (as the events stage takes a batch after the end as the job
    // active again: docs/semantics.md#job-lifecycle).
    bool job_ended = true;
    for (const auto& [name, h] : record.hosts) job_ended &= h.ended;
    if (job_ended) {
      for (auto& [name, h] : record.hosts) h.ended = false;
      changed = true;
    }
  }
  if (!host.newest_end_ns || end >= *host.newest_end_ns) {
    changed |= host.newest_end_ns != end || host.ended != part.last;
    host.newest_end_ns = end;
    host.ended = part.last;
  }
  if (ranks_changed) job.ranks_held = RanksHeld(record);
  if (changed || ranks_changed) job.dirty = true;
}

bool WindowPartsTask::RanksHeld(const MergeJobRecord& record) {
  if (record.world_size <= 0) return false;
  // The distinct ranks in [0, world): as many as the world has. Nothing
  // proportional to the declared world is allocated (a part may declare
  // any size).
  std::vector<int32_t> held;
  for (const auto& [name, host] : record.hosts) {
    for (int32_t r : host.ranks) {
      if (r >= 0 && r < record.world_size) held.push_back(r);
    }
  }
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  return static_cast<int64_t>(held.size()) == record.world_size;
}

bool WindowPartsTask::Complete(const Job& job, int64_t end_ns) {
  const MergeJobRecord& record = job.record;
  if (!job.ranks_held) return false;
  for (const auto& [name, host] : record.hosts) {
    // Every known host, whether it states ranks or not: a host that can
    // still send a part of the window holds it open.
    if (!host.ended && (!host.newest_end_ns || *host.newest_end_ns < end_ns)) {
      return false;
    }
  }
  return true;
}

absl::Status WindowPartsTask::CloseFirst(const std::string& name, Job& job,
                                         WindowSummary::ClosedBy closed_by) {
  auto first = job.open.begin();
  std::vector<HostWindowPart> parts;
  parts.reserve(first->second.parts.size());
  for (auto& [host, held] : first->second.parts) {
    parts.push_back(std::move(held.part));
  }
  absl::StatusOr<WindowSummary> merged =
      MergeHostWindowParts(parts, options_.windower.top_bubbles_per_window);
  if (!merged.ok() && absl::IsInvalidArgument(merged.status())) {
    // The collective analysis refused the ranks (two hosts claiming one
    // rank, say): as the events stage does, the window is stored without
    // it, counted, and the reason logged (parts conflicting otherwise were
    // dead-lettered on arrival).
    bool had_digests = false;
    for (HostWindowPart& part : parts) {
      had_digests |= !part.digests.empty();
      part.digests.clear();
    }
    if (had_digests) {
      absl::StatusOr<WindowSummary> without =
          MergeHostWindowParts(parts, options_.windower.top_bubbles_per_window);
      if (without.ok()) {
        spdlog::warn(
            "window of {} at {}: stored without its collective "
            "analysis: {}",
            name, first->first, std::string(merged.status().message()));
        merged = std::move(without);
        absl::MutexLock lock(&stats_.mu);
        ++stats_.stats.collective_errors;
      }
    }
  }
  if (!merged.ok()) {
    absl::Status s(merged.status().code(),
                   absl::StrCat("cannot merge the window of ", name, " at ",
                                first->first, " from ", parts.size(),
                                " parts: ", merged.status().message()));
    shared_->fatal = s;
    return s;
  }
  merged->job = name;
  merged->closed_by = closed_by;
  job.record.finalized_edge_ns =
      std::max(job.record.finalized_edge_ns.value_or(first->second.end_ns),
               first->second.end_ns);
  job.dirty = true;
  job.open.erase(first);
  pending_windows_.push_back(*std::move(merged));
  ++counts_.windows_closed;
  uncommitted_ = true;
  return absl::OkStatus();
}

absl::Status WindowPartsTask::CloseReady(const std::string& name, Job& job) {
  // Every known host ended: the job's stream is over, unless its declared
  // world has ranks no host holds yet (a host whose stage 1 lags has sent
  // nothing so far; its parts would come after the windows closed).
  bool all_ended = !job.record.hosts.empty() &&
                   (job.record.world_size <= 0 || job.ranks_held);
  for (const auto& [host, h] : job.record.hosts) all_ended &= h.ended;
  while (!job.open.empty()) {
    const int64_t end = job.open.begin()->second.end_ns;
    // Every host moved on past the window: the watermark closed it. Some
    // ended with it or before it: their end markers did.
    bool passed = job.ranks_held;
    for (const auto& [host, h] : job.record.hosts) {
      passed &= h.newest_end_ns.has_value() && *h.newest_end_ns >= end &&
                !(h.ended && *h.newest_end_ns == end);
    }
    if (passed) {
      RETURN_IF_ERROR(
          CloseFirst(name, job, WindowSummary::ClosedBy::kWatermark));
    } else if (all_ended || Complete(job, end)) {
      RETURN_IF_ERROR(
          CloseFirst(name, job, WindowSummary::ClosedBy::kEndMarker));
    } else {
      break;
    }
  }
  return absl::OkStatus();
}

absl::Status WindowPartsTask::OnMessage(const ConsumedMessage& message,
                                        absl::Time now) {
  // An offset below the next one was handled already in this assignment
  // (librdkafka may send it again: PartitionTask::OnMessage).
  if (auto it = partitions_.find(message.partition);
      it != partitions_.end() && message.offset < it->second.next_offset) {
    absl::MutexLock lock(&stats_.mu);
    ++stats_.stats.redelivered_messages;
    return absl::OkStatus();
  }
  Partition& part = partitions_[message.partition];
  part.next_offset = std::max(part.next_offset, message.offset + 1);
  const bool replay = message.offset < part.committed_position;
  uncommitted_ = true;
  {
    absl::MutexLock lock(&stats_.mu);
    ++stats_.stats.messages;
    if (replay) ++stats_.stats.replayed_messages;
  }
  const absl::string_view bytes(
      reinterpret_cast<const char*>(message.payload.data()),
      message.payload.size());
  absl::StatusOr<HostWindowPart> decoded = DecodeHostWindowPart(bytes);
  if (!decoded.ok()) {
    DeadLetter(message, replay, kBadPart,
               std::string(decoded.status().message()));
    return absl::OkStatus();
  }
  HostWindowPart& p = *decoded;
  if (p.job.empty() || p.job != message.key) {
    DeadLetter(message, replay, kKeyMismatch,
               absl::StrCat("the part's job \"", p.job, "\" is not its key \"",
                            message.key, "\""));
    return absl::OkStatus();
  }
  if (p.window.end_ns <= p.window.start_ns) {
    DeadLetter(message, replay, kBadPart,
               absl::StrCat("the window ends at ", p.window.end_ns,
                            ", not after its start ", p.window.start_ns));
    return absl::OkStatus();
  }
  auto [it, inserted] = jobs_.try_emplace(p.job);
  Job& job = it->second;
  if (inserted) job.partition = message.partition;
  const std::string& name = it->first;
  const WindowStartNs start = p.window.start_ns;
  const bool stale =
      job.record.finalized_edge_ns && start < *job.record.finalized_edge_ns;
  if (!stale) {
    // What the part is to the window: its first copy, another copy, or a
    // part that cannot be merged with the others (dead-lettered, and not
    // taken into the host table either).
    std::string conflict;
    bool copy = false;
    auto window = job.open.find(start);
    if (window != job.open.end()) {
      auto held = window->second.parts.find(p.host);
      if (held != window->second.parts.end()) {
        copy = held->second.bytes == bytes;
        if (!copy) {
          conflict = absl::StrCat(
              "host ", p.host, " sent another part of the window at ", start,
              " (offset ", held->second.offset, "), with other bytes");
        }
      } else if (window->second.end_ns != p.window.end_ns) {
        conflict = absl::StrCat("the window at ", start, " ends at ",
                                p.window.end_ns, " in this part, at ",
                                window->second.end_ns, " in the others");
      } else {
        for (const auto& [host, other] : window->second.parts) {
          for (const DeviceWindow& d : p.window.devices) {
            if (std::any_of(other.part.window.devices.begin(),
                            other.part.window.devices.end(),
                            [&](const DeviceWindow& o) {
                              return o.device == d.device;
                            })) {
              conflict =
                  absl::StrCat("device ", d.device, " of the window at ", start,
                               " is in host ", host, "'s part too");
            }
          }
        }
      }
    }
    if (!conflict.empty()) {
      DeadLetter(message, replay, kPartConflict, conflict);
      return absl::OkStatus();
    }
    NoteHost(job, p);
    if (copy) {
      ++counts_.duplicate_parts;
      absl::MutexLock lock(&stats_.mu);
      ++stats_.stats.duplicate_batches;
    } else {
      OpenWindow& w = job.open[start];
      w.end_ns = p.window.end_ns;
      std::string host = p.host;
      w.parts.emplace(std::move(host), HeldPart{.part = std::move(p),
                                                .bytes = std::string(bytes),
                                                .offset = message.offset});
    }
  } else {
    // Its window is closed; the host's progress still counts.
    NoteHost(job, p);
    ++counts_.stale_parts;
  }
  ++counts_.parts;
  job.last_part_wall = now;
  return CloseReady(name, job);
}

absl::Status WindowPartsTask::Tick(absl::Time now) {
  if (CaughtUp()) {
    for (auto& [name, job] : jobs_) {
      if (job.open.empty() ||
          now - job.last_part_wall < options_.idle_timeout) {
        continue;
      }
      while (!job.open.empty()) {
        RETURN_IF_ERROR(
            CloseFirst(name, job, WindowSummary::ClosedBy::kIdleTimeout));
      }
    }
  }
  if (!pending_windows_.empty() ||
      now - last_commit_ >= options_.commit_interval) {
    RETURN_IF_ERROR(Commit(now));
    last_commit_ = now;
  }
  return absl::OkStatus();
}

absl::Status WindowPartsTask::Finish(absl::Time now) {
  RETURN_IF_ERROR(Commit(now));
  return FlushAndCommitOffsets(/*sync=*/true);
}

void WindowPartsTask::RestartIdleTimers(absl::Time now) {
  for (auto& [name, job] : jobs_) job.last_part_wall = now;
}

bool WindowPartsTask::CaughtUp() const {
  if (partitions_.empty() || health_->down()) return false;
  for (const auto& [p, part] : partitions_) {
    if (!part.at_end) return false;
  }
  return true;
}

std::optional<int32_t> WindowPartsTask::AnyPartition() const {
  if (partitions_.empty()) return std::nullopt;
  return partitions_.begin()->first;
}

KafkaOffset WindowPartsTask::next_offset(int32_t partition) const {
  auto it = partitions_.find(partition);
  return it == partitions_.end() ? -1 : it->second.next_offset;
}

std::vector<std::pair<int32_t, KafkaOffset>> WindowPartsTask::Lagging() const {
  std::vector<std::pair<int32_t, KafkaOffset>> out;
  for (const auto& [p, part] : partitions_) {
    if (!part.at_end) out.emplace_back(p, part.next_offset);
  }
  return out;
}

bool WindowPartsTask::AllClosed() const {
  return std::all_of(jobs_.begin(), jobs_.end(),
                     [](const auto& j) { return j.second.open.empty(); });
}

std::vector<WindowStartNs> WindowPartsTask::OpenWindows(
    absl::string_view job) const {
  std::vector<WindowStartNs> out;
  auto it = jobs_.find(std::string(job));
  if (it == jobs_.end()) return out;
  for (const auto& [start, unused] : it->second.open) out.push_back(start);
  return out;
}

std::optional<MergeJobRecord> WindowPartsTask::JobRecord(
    absl::string_view job) const {
  auto it = jobs_.find(std::string(job));
  if (it == jobs_.end()) return std::nullopt;
  return it->second.record;
}

WindowPartsStats WindowPartsTask::parts_stats() const {
  WindowPartsStats out = counts_;
  out.open_windows = 0;
  for (const auto& [name, job] : jobs_) {
    out.open_windows += static_cast<int64_t>(job.open.size());
  }
  return out;
}

absl::Status WindowPartsTask::PublishWindow(WindowSummary& w,
                                            int64_t& trimmed) {
  const std::string key = WindowTopicKey(w.job, w.window.start_ns);
  const bool was_trimmed = w.trimmed.has_value();
  ASSIGN_OR_RETURN(
      std::string value,
      FitWindow(w, WindowValueBudget(windows_limit_bytes_, key.size())));
  if (w.trimmed.has_value() && !was_trimmed) ++trimmed;
  const int32_t partition =
      windows_partitions_ > 0 ? WindowTopicPartition(w.job, windows_partitions_)
                              : CommitKafka::kAnyPartition;
  const absl::Time start = absl::Now();
  while (true) {
    ++shared_->undelivered;
    const absl::Status produced =
        kafka_->Produce(options_.windows_topic, partition, key, value);
    if (produced.ok()) return absl::OkStatus();
    --shared_->undelivered;
    if (!absl::IsResourceExhausted(produced)) {
      return absl::Status(
          produced.code(),
          absl::StrCat("cannot publish the window of ", w.job, " at ",
                       w.window.start_ns, " to ", options_.windows_topic,
                       "; stopping before it is stored: ", produced.message()));
    }
    RETURN_IF_ERROR(shared_->fatal);
    const absl::Time now = absl::Now();
    if (now - start >= kPartsSlowFlush) {
      health_->NoteDown(start, "the producer's queue stays full");
    }
    if ((stop_ == nullptr || stop_->load()) &&
        now - start >= kPartsFlushOnStop) {
      return absl::UnavailableError(
          "the producer's queue stayed full while stopping; not storing "
          "windows that are not published");
    }
    kafka_->Poll(absl::Milliseconds(100));
  }
}

absl::Status WindowPartsTask::FlushAndCommitOffsets(bool sync) {
  const absl::Time start = absl::Now();
  while (shared_->undelivered > 0 && shared_->fatal.ok()) {
    kafka_->Flush(absl::Seconds(1));
    if (shared_->undelivered == 0) break;
    const absl::Time now = absl::Now();
    if (now - start >= kPartsSlowFlush) {
      health_->NoteDown(start, "no acknowledgement of windows");
    }
    if ((stop_ == nullptr || stop_->load()) &&
        now - start >= kPartsFlushOnStop) {
      return absl::UnavailableError(absl::StrCat(
          shared_->undelivered,
          " window/dead-letter messages not acknowledged while stopping; not "
          "committing past them"));
    }
  }
  RETURN_IF_ERROR(shared_->fatal);
  if (!pending_group_offsets_.empty()) {
    absl::Status committed =
        kafka_->CommitOffsets(pending_group_offsets_, sync);
    if (sync && !committed.ok()) {
      spdlog::warn("{}", std::string(committed.message()));
    }
  }
  pending_group_offsets_.clear();
  return absl::OkStatus();
}

absl::Status WindowPartsTask::Commit(absl::Time now) {
  // After a failed commit nothing more may be written (as CommitPipeline:
  // the failed batch's windows are gone from memory).
  if (!commit_failed_.ok()) return commit_failed_;
  absl::Status s = CommitOnce(now);
  if (!s.ok()) commit_failed_ = s;
  return s;
}

absl::Status WindowPartsTask::CommitOnce(absl::Time now) {
  if (!uncommitted_ && pending_windows_.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(shared_->fatal);
  StoreBatch batch;
  batch.windows = std::move(pending_windows_);
  pending_windows_.clear();
  // The commit protocol's steps (docs/architecture.md#commit-protocol).
  // 1: publish this commit's windows.
  int64_t trimmed = 0;
  if (!options_.windows_topic.empty()) {
    for (WindowSummary& w : batch.windows) {
      RETURN_IF_ERROR(PublishWindow(w, trimmed));
    }
  }
  // 2-3: flush (windows, dead letters), then the previous commit's group
  // offsets.
  RETURN_IF_ERROR(FlushAndCommitOffsets(/*sync=*/false));
  // 4: the windows, their jobs, and per partition its progress with the
  // records of the jobs that changed, in one batch.
  absl::btree_set<std::string> with_windows;
  for (const WindowSummary& w : batch.windows) with_windows.insert(w.job);
  for (const std::string& job : with_windows) {
    batch.jobs.push_back(JobUpdate{.job = job, .last_seen_wall = now});
  }
  std::vector<PartitionOffset> offsets;
  for (auto& [p, part] : partitions_) {
    if (part.next_offset < 0) continue;
    PartitionProgress progress{.topic = options_.topic, .partition = p};
    progress.resume_offset = part.next_offset;
    for (auto& [name, job] : jobs_) {
      if (job.partition != p) continue;
      for (const auto& [start, window] : job.open) {
        for (const auto& [host, held] : window.parts) {
          progress.resume_offset =
              std::min(progress.resume_offset, held.offset);
        }
      }
      if (job.dirty) {
        progress.job_records.emplace_back(name,
                                          EncodeMergeJobRecord(job.record));
      }
    }
    progress.committed_position =
        std::max(part.committed_position, part.next_offset);
    offsets.push_back(PartitionOffset{.topic = options_.topic,
                                      .partition = p,
                                      .offset = progress.resume_offset});
    batch.progress.push_back(std::move(progress));
  }
  absl::Status written = store_->Commit(batch);
  if (!written.ok()) {
    return absl::Status(written.code(),
                        absl::StrCat("cannot write windows to the store, "
                                     "stopping before offsets move: ",
                                     written.message()));
  }
  uncommitted_ = false;
  // 5: the partitions' snapshots, to the state topic, now that the store
  // holds them; acknowledged by the next commit's flush, before its group
  // offsets move.
  for (const PartitionProgress& progress : batch.progress) {
    partitions_[progress.partition].committed_position =
        progress.committed_position;
    RETURN_IF_ERROR(WriteChangelog(progress));
  }
  for (auto& [name, job] : jobs_) {
    if (partitions_.contains(job.partition)) job.dirty = false;
  }
  if (!offsets.empty()) pending_group_offsets_ = std::move(offsets);
  absl::MutexLock lock(&stats_.mu);
  stats_.stats.windows_written += static_cast<int64_t>(batch.windows.size());
  if (!options_.windows_topic.empty()) {
    stats_.stats.windows_published +=
        static_cast<int64_t>(batch.windows.size());
  }
  stats_.stats.windows_trimmed += trimmed;
  return absl::OkStatus();
}

}  // namespace bubblewatch
