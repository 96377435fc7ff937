#include "processor/window_parts_task.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/strings/match.h"
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

// Version 1: up to the hosts; version 2 adds the late counts and
// idle_closed.
constexpr uint8_t kMergeRecordVersion = 2;
constexpr uint8_t kMergeRecordVersion1 = 1;
// Version 1: the jobs inline; 2: the jobs per key (MergeJobSnapshot).
constexpr uint8_t kMergeSnapshotVersion = 1;
constexpr uint8_t kMergeSnapshotPerKeyVersion = 2;
constexpr uint8_t kMergeJobSnapshotVersion = 1;
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
  w.Unsigned(record.pending_late.size());
  for (const auto& [start, late] : record.pending_late) {
    w.Signed(start);
    w.Unsigned(static_cast<uint64_t>(late.events));
    w.Unsigned(static_cast<uint64_t>(late.collectives));
  }
  w.Unsigned(record.late_offsets.size());
  for (const auto& [host, offset] : record.late_offsets) {
    w.String(host);
    w.Signed(offset);
  }
  w.Byte(record.idle_closed ? 1 : 0);
  return w.Take();
}

absl::StatusOr<MergeJobRecord> DecodeMergeJobRecord(absl::string_view bytes) {
  VarintReader r(bytes);
  const uint8_t version = r.Byte();
  if (r.ok() && version != kMergeRecordVersion &&
      version != kMergeRecordVersion1) {
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
  if (version >= 2) {
    const size_t late = r.Count();
    for (size_t i = 0; i < late && r.ok(); ++i) {
      const int64_t start = r.Signed();
      const uint64_t events = r.Unsigned();
      const uint64_t collectives = r.Unsigned();
      if (events > static_cast<uint64_t>(INT64_MAX) ||
          collectives > static_cast<uint64_t>(INT64_MAX)) {
        r.Fail();
        break;
      }
      out.pending_late[start] = {
          .events = static_cast<int64_t>(events),
          .collectives = static_cast<int64_t>(collectives)};
    }
    const size_t offsets = r.Count();
    for (size_t i = 0; i < offsets && r.ok(); ++i) {
      std::string host = r.String();
      out.late_offsets[std::move(host)] = r.Signed();
    }
    out.idle_closed = r.Byte() != 0;
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
  w.Byte(s.jobs_per_key ? kMergeSnapshotPerKeyVersion : kMergeSnapshotVersion);
  w.String(s.topic);
  w.Signed(s.partition);
  w.Signed(s.resume_offset);
  w.Signed(s.committed_position);
  if (s.jobs_per_key) return w.Take();
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
  if (r.ok() && version != kMergeSnapshotVersion &&
      version != kMergeSnapshotPerKeyVersion) {
    return absl::DataLossError(
        absl::StrCat("stage 2 partition snapshot: unknown version ", version));
  }
  MergePartitionSnapshot out;
  out.jobs_per_key = version == kMergeSnapshotPerKeyVersion;
  out.topic = r.String();
  out.partition = r.Int32();
  out.resume_offset = r.Signed();
  out.committed_position = r.Signed();
  if (!out.jobs_per_key) {
    const size_t jobs = r.Count();
    for (size_t i = 0; i < jobs && r.ok(); ++i) {
      std::string name = r.String();
      out.jobs[std::move(name)] = r.String();
    }
  }
  if (!r.ok() || !r.done()) {
    return absl::DataLossError(
        "stage 2 partition snapshot: truncated or malformed");
  }
  return out;
}

std::string MergeJobKey(absl::string_view topic, int32_t partition,
                        absl::string_view job) {
  return absl::StrCat(MergePartitionKey(topic, partition), "/job/", job);
}

namespace {

void WriteVersion(VarintWriter& w, const MergeJobVersion& v) {
  w.Signed(v.committed_position);
  w.Byte(v.record.has_value() ? 1 : 0);
  if (v.record) w.String(*v.record);
}

MergeJobVersion ReadVersion(VarintReader& r) {
  MergeJobVersion v;
  v.committed_position = r.Signed();
  if (r.Byte() != 0) v.record = r.String();
  return v;
}

}  // namespace

std::string EncodeMergeJobSnapshot(const MergeJobSnapshot& s) {
  VarintWriter w;
  w.Byte(kMergeJobSnapshotVersion);
  w.String(s.topic);
  w.Signed(s.partition);
  w.String(s.job);
  WriteVersion(w, s.current);
  w.Byte(s.previous.has_value() ? 1 : 0);
  if (s.previous) WriteVersion(w, *s.previous);
  return w.Take();
}

absl::StatusOr<MergeJobSnapshot> DecodeMergeJobSnapshot(
    absl::string_view bytes) {
  VarintReader r(bytes);
  const uint8_t version = r.Byte();
  if (r.ok() && version != kMergeJobSnapshotVersion) {
    return absl::DataLossError(
        absl::StrCat("stage 2 job snapshot: unknown version ", version));
  }
  MergeJobSnapshot out;
  out.topic = r.String();
  out.partition = r.Int32();
  out.job = r.String();
  out.current = ReadVersion(r);
  if (r.Byte() != 0) out.previous = ReadVersion(r);
  if (!r.ok() || !r.done()) {
    return absl::DataLossError("stage 2 job snapshot: truncated or malformed");
  }
  return out;
}

std::optional<MergeJobVersion> MergeJobVersionAt(const MergeJobSnapshot& s,
                                                 KafkaOffset q) {
  if (s.current.committed_position <= q) return s.current;
  if (s.previous && s.previous->committed_position <= q) return s.previous;
  return std::nullopt;
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

absl::StatusOr<WindowPartsTask::TopicState> WindowPartsTask::ReadChangelog(
    int32_t partition) {
  TopicState out;
  if (!has_state_topic()) return out;
  if (!changelog_prepared_) {
    // Created with as many partitions as the parts topic: the records of
    // parts partition P live in its partition P (StateChangelog::Prepare).
    ASSIGN_OR_RETURN(int partitions, changelog_->TopicPartitions(
                                         options_.topic, /*just_created=*/false,
                                         kChangelogTimeout));
    StateChangelog topic(options_.state_topic, changelog_);
    ASSIGN_OR_RETURN(changelog_created_now_, topic.Prepare(partitions));
    changelog_prepared_ = true;
  }
  if (changelog_created_now_) return out;
  // The whole partition (compacted: about one record per key). The
  // progress record with the highest committed position wins, which also
  // discards a late record of a fenced-out former owner; of a job, its
  // last record (as compaction keeps), a tombstone deleting it.
  const std::string key = MergePartitionKey(options_.topic, partition);
  const std::string job_prefix = MergeJobKey(options_.topic, partition, "");
  std::map<std::string, MergeJobSnapshot> jobs;
  RETURN_IF_ERROR(changelog_->ReadPartition(
      options_.state_topic, partition, kChangelogTimeout,
      [&](const ChangelogKafka::Record& record) {
        if (absl::StartsWith(record.key, job_prefix)) {
          const std::string job(record.key.substr(job_prefix.size()));
          if (!record.value) {
            jobs.erase(job);
            return;
          }
          absl::StatusOr<MergeJobSnapshot> j =
              DecodeMergeJobSnapshot(*record.value);
          if (!j.ok() || j->topic != options_.topic ||
              j->partition != partition || j->job != job) {
            spdlog::warn("state topic {} offset {}: skipped: {}",
                         options_.state_topic, record.offset,
                         j.ok() ? "another key's job record"
                                : std::string(j.status().message()));
            return;
          }
          jobs[job] = *std::move(j);
          return;
        }
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
        if (!out.snapshot ||
            s->committed_position >= out.snapshot->committed_position) {
          out.snapshot = *std::move(s);
        }
      }));
  // The snapshot at the progress record's position Q: per job the version
  // written at or before Q (docs/state.md#stage-2-state-topic). A record
  // of the old form holds its jobs itself.
  const KafkaOffset q = out.snapshot ? out.snapshot->committed_position
                                     : std::numeric_limits<int64_t>::min();
  const bool per_key = out.snapshot && out.snapshot->jobs_per_key;
  for (const auto& [job, record] : jobs) {
    std::optional<MergeJobVersion> v =
        per_key ? MergeJobVersionAt(record, q) : std::nullopt;
    if (per_key && v && v->record) out.snapshot->jobs[job] = *v->record;
    out.keys[job] = std::move(v);
  }
  if (out.snapshot && !per_key) {
    for (const auto& [job, bytes] : out.snapshot->jobs) {
      out.keys[job] = MergeJobVersion{.committed_position = q, .record = bytes};
    }
  }
  return out;
}

absl::Status WindowPartsTask::ProduceState(int32_t partition,
                                           const std::string& key,
                                           std::optional<std::string> value) {
  // Counted as undelivered until acknowledged: the next commit's flush
  // waits for it before its group offsets move (and before that commit
  // writes records that name this one as their previous version).
  ++shared_->undelivered;
  absl::Status s = changelog_->ProduceRecord(
      options_.state_topic, partition, key,
      value ? std::optional<absl::string_view>(*value) : std::nullopt,
      "stage 2 state topic");
  if (!s.ok()) --shared_->undelivered;
  return s;
}

absl::Status WindowPartsTask::WriteChangelog(const PartitionProgress& p) {
  if (!has_state_topic()) return absl::OkStatus();
  Partition& part = partitions_[p.partition];
  const KafkaOffset at = p.committed_position;
  // The jobs the previous commit wrote as gone: its progress record is
  // acknowledged (this commit's flush), so no restore needs them now.
  for (const auto& [name, unused] : part.gone) {
    RETURN_IF_ERROR(ProduceState(
        p.partition, MergeJobKey(p.topic, p.partition, name), std::nullopt));
  }
  part.gone.clear();
  // Each job's record before the progress record, with the version it
  // replaces: a restore from an older progress record takes that one.
  int64_t written = 0;
  for (const auto& [name, bytes] : p.job_records) {
    if (!bytes) continue;  // A store deletion: written as gone below.
    auto job = jobs_.find(name);
    if (job == jobs_.end()) continue;
    MergeJobSnapshot record{
        .topic = p.topic,
        .partition = p.partition,
        .job = name,
        .current = {.committed_position = at, .record = *bytes},
        .previous = job->second.on_topic};
    RETURN_IF_ERROR(ProduceState(p.partition,
                                 MergeJobKey(p.topic, p.partition, name),
                                 EncodeMergeJobSnapshot(record)));
    job->second.on_topic = record.current;
    ++written;
  }
  for (auto& [name, previous] : part.to_forget) {
    MergeJobSnapshot record{.topic = p.topic,
                            .partition = p.partition,
                            .job = name,
                            .current = {.committed_position = at},
                            .previous = std::move(previous)};
    RETURN_IF_ERROR(ProduceState(p.partition,
                                 MergeJobKey(p.topic, p.partition, name),
                                 EncodeMergeJobSnapshot(record)));
    part.gone[name] = record.current;
    ++written;
  }
  part.to_forget.clear();
  RETURN_IF_ERROR(
      ProduceState(p.partition, MergePartitionKey(p.topic, p.partition),
                   EncodeMergePartitionSnapshot(
                       MergePartitionSnapshot{.topic = p.topic,
                                              .partition = p.partition,
                                              .resume_offset = p.resume_offset,
                                              .committed_position = at,
                                              .jobs_per_key = true})));
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
    absl::StatusOr<TopicState> remote = ReadChangelog(a.partition);
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
        remote->snapshot.has_value() &&
        (!progress->has_value() || remote->snapshot->committed_position >
                                       (*progress)->committed_position);
    Partition& part = partitions_[a.partition];
    part = Partition{};
    if (from_changelog) {
      const MergePartitionSnapshot& s = *remote->snapshot;
      progress->emplace(
          PartitionProgress{.topic = options_.topic,
                            .partition = a.partition,
                            .resume_offset = s.resume_offset,
                            .committed_position = s.committed_position});
      // The store's records of jobs the snapshot lacks (forgotten since, or
      // never this partition's) go with the first commit.
      for (const auto& [name, unused] : *records) {
        if (!s.jobs.contains(name)) part.store_deletes.push_back(name);
      }
      records->assign(s.jobs.begin(), s.jobs.end());
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
      // The copy not restored from may lack the record or hold an older
      // one: the first commit writes every job to both.
      job.dirty = from_changelog || has_state_topic();
      if (auto k = remote->keys.find(name); k != remote->keys.end()) {
        job.on_topic = k->second;
      }
    }
    if (!failed.ok()) {
      partitions_.erase(a.partition);
      shared_->fatal = failed;
      continue;
    }
    // A job the state topic holds that the snapshot lacks would come back
    // with a later progress record: the first commit writes it as gone.
    for (auto& [name, version] : remote->keys) {
      if (!restored.contains(name)) part.to_forget[name] = std::move(version);
    }
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
  MergeJobRecord& record = job.record;
  if (auto late = record.pending_late.find(first->first);
      late != record.pending_late.end()) {
    merged->late_events += late->second.events;
    merged->late_collectives += late->second.collectives;
    record.pending_late.erase(late);
  }
  record.idle_closed = closed_by == WindowSummary::ClosedBy::kIdleTimeout;
  record.finalized_edge_ns =
      std::max(record.finalized_edge_ns.value_or(first->second.end_ns),
               first->second.end_ns);
  // Late counts of windows the edge passed without a part of them: as
  // counts of closed windows (their stored window, if any).
  while (!record.pending_late.empty() &&
         record.pending_late.begin()->first < *record.finalized_edge_ns) {
    auto late = record.pending_late.begin();
    MergeJobRecord::Late& update = late_updates_[{name, late->first}];
    update.events += late->second.events;
    update.collectives += late->second.collectives;
    record.pending_late.erase(late);
  }
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
  if (p.kind == HostWindowPart::Kind::kLate && p.late_offset < 0) {
    DeadLetter(message, replay, kBadPart,
               "a late part without the offset of its batch");
    return absl::OkStatus();
  }
  auto [it, inserted] = jobs_.try_emplace(p.job);
  Job& job = it->second;
  const std::string& name = it->first;
  if (inserted) {
    job.partition = message.partition;
    // A job forgotten before (or never seen): the store's newest window of
    // it is its finalized edge, so that a part of a window it stored is
    // stale still (docs/semantics.md#split-jobs).
    absl::StatusOr<std::optional<int64_t>> edge = StoredEdge(name);
    if (!edge.ok()) {
      absl::Status s(edge.status().code(),
                     absl::StrCat("cannot read the stored windows of ", name,
                                  ": ", edge.status().message()));
      jobs_.erase(it);
      shared_->fatal = s;
      return s;
    }
    job.record.finalized_edge_ns = *edge;
    if (*edge && p.window.start_ns < **edge) {
      // A stale part of a forgotten job (a slow host's, a replay of stage
      // 1): counted, and the job stays forgotten; noting its host would
      // make that host's old run part of the job's next one.
      jobs_.erase(it);
      ++counts_.stale_parts;
      ++counts_.parts;
      return absl::OkStatus();
    }
    // Its state-topic key as this owner left it: the previous version of
    // its next record.
    Partition& owner = partitions_[message.partition];
    if (auto g = owner.gone.extract(name); !g.empty()) {
      job.on_topic = std::move(g.mapped());
    } else if (auto f = owner.to_forget.extract(name); !f.empty()) {
      job.on_topic = std::move(f.mapped());
    }
    std::erase(owner.store_deletes, name);
    job.dirty = true;
  }
  job.last_offset = message.offset;
  if (p.kind == HostWindowPart::Kind::kLate) {
    TakeLate(name, job, p);
    job.last_part_wall = now;
    return absl::OkStatus();
  }
  if (p.kind == HostWindowPart::Kind::kEnd) {
    job.last_part_wall = now;
    // The host ended at the end of its last finalized window, which it may
    // have sent a part of already: nothing to hold, only its host.
    NoteHost(job, p);
    ++counts_.parts;
    ++counts_.end_parts;
    return CloseReady(name, job);
  }
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
      if (job.record.idle_closed) {
        job.record.idle_closed = false;  // Active again.
        job.dirty = true;
      }
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

void WindowPartsTask::TakeLate(const std::string& name, Job& job,
                               const HostWindowPart& part) {
  MergeJobRecord& record = job.record;
  auto [taken, first] = record.late_offsets.try_emplace(part.host, -1);
  if (!first && part.late_offset <= taken->second) {
    // A stage-1 replay republished it: its counts are in already.
    ++counts_.duplicate_parts;
    absl::MutexLock lock(&stats_.mu);
    ++stats_.stats.duplicate_batches;
    return;
  }
  taken->second = part.late_offset;
  int64_t events = 0, collectives = 0;
  for (const HostWindowPart::Late& l : part.late) {
    MergeJobRecord::Late& to =
        record.finalized_edge_ns &&
                l.window_start_ns < *record.finalized_edge_ns
            ? late_updates_[{name, l.window_start_ns}]
            : record.pending_late[l.window_start_ns];
    to.events += l.events;
    to.collectives += l.collectives;
    events += l.events;
    collectives += l.collectives;
  }
  job.dirty = true;
  ++counts_.parts;
  ++counts_.late_parts;
  absl::MutexLock lock(&stats_.mu);
  stats_.stats.late_events += events;
  stats_.stats.late_collectives += collectives;
}

void WindowPartsTask::ForgetExpired(int32_t p, KafkaOffset resume_offset,
                                    std::vector<std::string>& forgotten) {
  Partition& part = partitions_[p];
  // While replaying, jobs with parts ahead are not known in full yet.
  if (part.next_offset < part.committed_position) return;
  // The partition's event-time clock: the newest window end any of its
  // jobs' parts named (a function of the records: the job that holds it is
  // never forgotten, so a restore finds the same clock).
  auto newest_end = [](const MergeJobRecord& r) {
    std::optional<int64_t> out;
    for (const auto& [host, h] : r.hosts) {
      if (h.newest_end_ns && (!out || *h.newest_end_ns > *out)) {
        out = h.newest_end_ns;
      }
    }
    return out;
  };
  std::optional<int64_t> clock;
  for (const auto& [name, job] : jobs_) {
    if (job.partition != p) continue;
    const std::optional<int64_t> end = newest_end(job.record);
    if (end && (!clock || *end > *clock)) clock = end;
  }
  if (!clock) return;
  const int64_t expiry = absl::ToInt64Nanoseconds(options_.job_expiry);
  if (*clock < std::numeric_limits<int64_t>::min() + expiry) return;
  const int64_t cutoff = *clock - expiry;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const Job& job = it->second;
    const MergeJobRecord& r = job.record;
    bool ended = !r.hosts.empty();
    for (const auto& [host, h] : r.hosts) ended &= h.ended;
    const std::optional<int64_t> end = newest_end(r);
    // Open windows, a part a replay from the resume offset would read
    // again, a job still running or not quiet long enough: still needed.
    if (job.partition != p || !job.open.empty() ||
        job.last_offset >= resume_offset || !(ended || r.idle_closed) || !end ||
        *end >= cutoff) {
      ++it;
      continue;
    }
    spdlog::debug(
        "split job {} forgotten: ended, its newest part {} behind its "
        "partition's",
        it->first, absl::FormatDuration(options_.job_expiry));
    if (has_state_topic()) part.to_forget[it->first] = job.on_topic;
    forgotten.push_back(it->first);
    it = jobs_.erase(it);
  }
  if (!forgotten.empty()) {
    counts_.jobs_forgotten += static_cast<int64_t>(forgotten.size());
    absl::MutexLock lock(&stats_.mu);
    stats_.stats.jobs_forgotten += static_cast<int64_t>(forgotten.size());
  }
}

absl::StatusOr<std::optional<int64_t>> WindowPartsTask::StoredEdge(
    const std::string& job) {
  ASSIGN_OR_RETURN(std::optional<WindowSummary> latest, store_->Latest(job));
  if (!latest) return std::nullopt;
  return latest->window.end_ns;
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
  out.jobs = static_cast<int64_t>(jobs_.size());
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
  // Closed windows' late counts: their stored windows rewritten, in this
  // batch with the job records that took them.
  ASSIGN_OR_RETURN(const int64_t without_window,
                   AddLateCountsToBatch(late_updates_, *store_, batch));
  counts_.late_without_window += without_window;
  late_updates_.clear();
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
    }
    std::vector<std::string> forgotten;
    ForgetExpired(p, progress.resume_offset, forgotten);
    for (auto& [name, job] : jobs_) {
      if (job.partition == p && job.dirty) {
        progress.job_records.emplace_back(name,
                                          EncodeMergeJobRecord(job.record));
      }
    }
    for (std::string& name : forgotten) {
      progress.job_records.emplace_back(std::move(name), std::nullopt);
    }
    for (std::string& name : part.store_deletes) {
      progress.job_records.emplace_back(std::move(name), std::nullopt);
    }
    part.store_deletes.clear();
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
