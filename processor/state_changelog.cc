#include "processor/state_changelog.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "kafka/kafka_admin.h"
#include "kafka/kafka_handles.h"
#include "kafka/kafka_status.h"
#include "processor/fleet_topics.h"
#include "processor/legacy_state.h"
#include "schemas/state_record.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {
namespace {

std::string SnapshotKey(absl::string_view topic, int32_t partition) {
  return absl::StrCat(topic, "/", partition);
}

absl::StatusOr<PartitionSnapshot> FromRecord(
    const fb::PartitionSnapshotRecord& r) {
  PartitionSnapshot s;
  if (r.topic() != nullptr) s.topic = r.topic()->str();
  s.partition = r.partition();
  s.resume_offset = r.resume_offset();
  s.committed_position = r.committed_position();
  s.jobs_per_key = r.jobs_per_key();
  if (r.jobs() != nullptr) {
    for (const fb::JobStateEntry* entry : *r.jobs()) {
      absl::string_view job(entry->job()->data(), entry->job()->size());
      absl::string_view state(
          reinterpret_cast<const char*>(entry->state()->data()),
          entry->state()->size());
      // Ascending and unique as written: a map would silently keep one of
      // two states of a job.
      if (job.empty() || (!s.jobs.empty() && job <= s.jobs.rbegin()->first)) {
        return absl::DataLossError(
            absl::StrCat("corrupt partition snapshot: job '", job.substr(0, 60),
                         "' empty, repeated or out of order"));
      }
      RETURN_IF_ERROR(ReadStateRecord(state, fb::StateBody::JobStateRecord,
                                      "job state of a partition snapshot")
                          .status());
      s.jobs.emplace_hint(s.jobs.end(), job, state);
      if (entry->last_event_ns() != 0 || entry->last_seen_wall_ns() != 0) {
        s.activity.emplace_hint(
            s.activity.end(), job,
            JobActivity{.last_event_ns = FromWire(entry->last_event_ns()),
                        .last_seen_wall_ns = entry->last_seen_wall_ns()});
      }
    }
  }
  if (r.job_alerts() != nullptr) {
    for (const fb::JobStateEntry* entry : *r.job_alerts()) {
      absl::string_view job(entry->job()->data(), entry->job()->size());
      absl::string_view state(
          reinterpret_cast<const char*>(entry->state()->data()),
          entry->state()->size());
      if (job.empty() ||
          (!s.job_alerts.empty() && job <= s.job_alerts.rbegin()->first)) {
        return absl::DataLossError(absl::StrCat(
            "corrupt partition snapshot: alert state of job '",
            job.substr(0, 60), "' empty, repeated or out of order"));
      }
      // Decoded by alerts/ (AlertEvaluator::Restore), which names a bad one.
      s.job_alerts.emplace_hint(s.job_alerts.end(), job, state);
    }
  }
  if (const fb::LimitLedgerRecord* ledger = r.ledger(); ledger != nullptr) {
    std::vector<int64_t> offsets;
    if (ledger->rejected_offsets() != nullptr) {
      offsets.assign(ledger->rejected_offsets()->begin(),
                     ledger->rejected_offsets()->end());
    }
    ASSIGN_OR_RETURN(s.ledger,
                     LimitLedger::Restore(FromWire(ledger->newest_event_ns()),
                                          std::move(offsets)));
  }
  return s;
}

}  // namespace

std::string EncodePartitionSnapshot(const PartitionSnapshot& snapshot) {
  // A replay starts at the resume offset and ends at the committed
  // position; a snapshot the other way round would skip messages.
  BW_CHECK(snapshot.resume_offset <= snapshot.committed_position);
  flatbuffers::FlatBufferBuilder b(256);
  // `activity` is null for the alert entries (it is the jobs' only).
  auto entries_of = [&b](const JobStates& states,
                         const std::map<std::string, JobActivity>* activity) {
    std::vector<flatbuffers::Offset<fb::JobStateEntry>> entries;
    entries.reserve(states.size());
    for (const auto& [job, state] : states) {
      auto name = b.CreateString(job);
      // A nested FlatBuffer: its 8-byte fields stay aligned in the outer one.
      b.ForceVectorAlignment(state.size(), sizeof(uint8_t), 8);
      auto bytes = b.CreateVector(
          reinterpret_cast<const uint8_t*>(state.data()), state.size());
      // Zero fields are not written: without activity an entry keeps the
      // bytes it had before the fields existed. (A job with activity but no
      // event writes kNoneOnWire.)
      int64_t last_event_ns = 0;
      WallNs last_seen_wall_ns = 0;
      if (activity != nullptr) {
        if (auto it = activity->find(job); it != activity->end()) {
          last_event_ns = ToWire(it->second.last_event_ns);
          last_seen_wall_ns = it->second.last_seen_wall_ns;
        }
      }
      entries.push_back(fb::CreateJobStateEntry(b, name, bytes, last_event_ns,
                                                last_seen_wall_ns));
    }
    return b.CreateVector(entries);
  };
  // The processor keeps only current encodings (Decode* convert).
  for (const auto& [job, state] : snapshot.jobs) {
    BW_DCHECK(IsStateRecord(state));
  }
  auto jobs = entries_of(snapshot.jobs, &snapshot.activity);
  // Absent when empty: the bytes of a snapshot without alerts stay as they
  // were before the field existed.
  flatbuffers::Offset<
      flatbuffers::Vector<flatbuffers::Offset<fb::JobStateEntry>>>
      job_alerts = 0;
  if (!snapshot.job_alerts.empty())
    job_alerts = entries_of(snapshot.job_alerts, nullptr);
  flatbuffers::Offset<fb::LimitLedgerRecord> ledger = 0;
  if (!snapshot.ledger.empty()) {
    ledger = fb::CreateLimitLedgerRecord(
        b, ToWire(snapshot.ledger.newest_event_ns()),
        b.CreateVector(snapshot.ledger.rejected_offsets()));
  }
  auto topic = b.CreateString(snapshot.topic);
  auto body = fb::CreatePartitionSnapshotRecord(
      b, topic, snapshot.partition, snapshot.resume_offset,
      snapshot.committed_position, jobs, ledger, job_alerts,
      snapshot.jobs_per_key);
  return FinishStateRecord(b, fb::StateBody::PartitionSnapshotRecord,
                           body.Union());
}

absl::StatusOr<PartitionSnapshot> DecodePartitionSnapshot(
    absl::string_view bytes) {
  if (!IsStateRecord(bytes)) return LegacyDecodePartitionSnapshot(bytes);
  // FlatBuffers reads its fields in place and needs them aligned (8 bytes
  // for the nested records' longs). Bytes from a Kafka payload or inside a
  // longer record need not be: decode a copy (the heap aligns it).
  if (reinterpret_cast<uintptr_t>(bytes.data()) % 8 != 0) {
    const std::string aligned(bytes);
    return DecodePartitionSnapshot(aligned);
  }
  ASSIGN_OR_RETURN(
      const fb::StateRecord* record,
      ReadStateRecord(bytes, fb::StateBody::PartitionSnapshotRecord,
                      "partition snapshot"));
  return FromRecord(*record->body_as_PartitionSnapshotRecord());
}

absl::StatusOr<PartitionSnapshot> DecodeStoredPartitionState(
    absl::string_view bytes) {
  if (!IsStateRecord(bytes)) return LegacyDecodeStoredJobStates(bytes);
  return DecodePartitionSnapshot(bytes);
}

std::string PartitionJobKey(absl::string_view topic, int32_t partition,
                            absl::string_view job) {
  return absl::StrCat(SnapshotKey(topic, partition), "/job/", job);
}

namespace {

flatbuffers::Offset<fb::JobSnapshotVersion> BuildVersion(
    flatbuffers::FlatBufferBuilder& b, const JobSnapshotVersion& v) {
  // Nested FlatBuffers: their 8-byte fields stay aligned in the outer one.
  auto nested = [&b](const std::optional<std::string>& bytes)
      -> flatbuffers::Offset<flatbuffers::Vector<uint8_t>> {
    if (!bytes) return 0;
    b.ForceVectorAlignment(bytes->size(), sizeof(uint8_t), 8);
    return b.CreateVector(reinterpret_cast<const uint8_t*>(bytes->data()),
                          bytes->size());
  };
  auto state = nested(v.state);
  auto alerts = nested(v.alerts);
  return fb::CreateJobSnapshotVersion(
      b, v.committed_position, /*forgotten=*/!v.state, state, alerts,
      ToWire(v.activity.last_event_ns), v.activity.last_seen_wall_ns);
}

absl::StatusOr<JobSnapshotVersion> ReadVersion(
    const fb::JobSnapshotVersion& r) {
  JobSnapshotVersion v;
  v.committed_position = r.committed_position();
  auto bytes = [](const flatbuffers::Vector<uint8_t>* vec) {
    return std::string(reinterpret_cast<const char*>(vec->data()), vec->size());
  };
  if (r.state() != nullptr && !r.forgotten()) {
    v.state = bytes(r.state());
    RETURN_IF_ERROR(ReadStateRecord(*v.state, fb::StateBody::JobStateRecord,
                                    "job state of a partition job record")
                        .status());
  }
  // Decoded by alerts/ (AlertEvaluator::Restore), which names a bad one.
  if (r.alerts() != nullptr) v.alerts = bytes(r.alerts());
  v.activity.last_event_ns = FromWire(r.last_event_ns());
  v.activity.last_seen_wall_ns = r.last_seen_wall_ns();
  return v;
}

}  // namespace

std::string EncodePartitionJob(const PartitionJobRecord& record) {
  BW_CHECK(!record.job.empty());
  flatbuffers::FlatBufferBuilder b(256);
  auto current = BuildVersion(b, record.current);
  flatbuffers::Offset<fb::JobSnapshotVersion> previous = 0;
  if (record.previous) previous = BuildVersion(b, *record.previous);
  auto topic = b.CreateString(record.topic);
  auto job = b.CreateString(record.job);
  auto body = fb::CreatePartitionJobRecord(b, topic, record.partition, job,
                                           current, previous);
  return FinishStateRecord(b, fb::StateBody::PartitionJobRecord, body.Union());
}

bool IsPartitionJobRecord(absl::string_view bytes) {
  if (!IsStateRecord(bytes)) return false;
  if (reinterpret_cast<uintptr_t>(bytes.data()) % 8 != 0) {
    const std::string aligned(bytes);
    return IsPartitionJobRecord(aligned);
  }
  flatbuffers::Verifier verifier(reinterpret_cast<const uint8_t*>(bytes.data()),
                                 bytes.size());
  if (!fb::VerifyStateRecordBuffer(verifier)) return false;
  return fb::GetStateRecord(bytes.data())->body_type() ==
         fb::StateBody::PartitionJobRecord;
}

absl::StatusOr<PartitionJobRecord> DecodePartitionJob(absl::string_view bytes) {
  if (reinterpret_cast<uintptr_t>(bytes.data()) % 8 != 0) {
    const std::string aligned(bytes);
    return DecodePartitionJob(aligned);
  }
  ASSIGN_OR_RETURN(const fb::StateRecord* record,
                   ReadStateRecord(bytes, fb::StateBody::PartitionJobRecord,
                                   "partition job record"));
  const fb::PartitionJobRecord& r = *record->body_as_PartitionJobRecord();
  PartitionJobRecord out;
  if (r.topic() != nullptr) out.topic = r.topic()->str();
  out.partition = r.partition();
  out.job = r.job()->str();
  if (out.job.empty()) {
    return absl::DataLossError("corrupt partition job record: empty job");
  }
  if (r.current() == nullptr) {
    return absl::DataLossError(absl::StrCat("corrupt partition job record of '",
                                            out.job.substr(0, 60),
                                            "': no current version"));
  }
  ASSIGN_OR_RETURN(out.current, ReadVersion(*r.current()));
  if (r.previous() != nullptr) {
    ASSIGN_OR_RETURN(out.previous, ReadVersion(*r.previous()));
  }
  return out;
}

PartitionSnapshot AssemblePartitionSnapshot(
    PartitionSnapshot partition_record,
    const std::vector<PartitionJobRecord>& jobs,
    std::vector<std::string>* gone_jobs) {
  PartitionSnapshot s = std::move(partition_record);
  const int64_t at = s.committed_position;
  // An old-form record holds its jobs as of exactly `at`: a job record
  // from before it is older than what it holds.
  const bool old_form = !s.jobs_per_key;
  auto usable = [&](const JobSnapshotVersion& v) {
    return old_form ? v.committed_position == at : v.committed_position <= at;
  };
  for (const PartitionJobRecord& r : jobs) {
    const JobSnapshotVersion* v = nullptr;
    if (usable(r.current)) {
      v = &r.current;
    } else if (r.previous && usable(*r.previous)) {
      v = &r.previous.value();
    }
    if (v == nullptr) continue;  // Newer than the partition: not yet in it.
    if (v->state) {
      s.jobs.insert_or_assign(r.job, *v->state);
      // Known activity always has the owner's commit time.
      if (v->activity.last_seen_wall_ns != 0) {
        s.activity.insert_or_assign(r.job, v->activity);
      }
    } else {
      s.jobs.erase(r.job);
      s.activity.erase(r.job);
    }
    if (v->alerts) {
      s.job_alerts.insert_or_assign(r.job, *v->alerts);
    } else {
      s.job_alerts.erase(r.job);
    }
    if (v->gone() && gone_jobs != nullptr) gone_jobs->push_back(r.job);
  }
  s.jobs_per_key = true;
  return s;
}

absl::StatusOr<std::unique_ptr<StateChangelog>> StateChangelog::Create(
    const KafkaConfig& reader_config, std::string topic, rd_kafka_t* producer) {
  KafkaConfig config = reader_config;
  // librdkafka's assign() wants a group id even though this consumer never
  // joins the group nor commits: a fixed name that no member uses.
  config.Set("group.id", absl::StrCat(topic, ".restore"));
  config.Set("enable.auto.commit", "false");
  config.Set("enable.partition.eof", "true");
  ASSIGN_OR_RETURN(RdKafkaPtr reader,
                   NewKafkaClient(RD_KAFKA_CONSUMER, config));
  auto kafka =
      std::make_unique<RdKafkaChangelogKafka>(std::move(reader), producer);
  auto changelog =
      std::make_unique<StateChangelog>(std::move(topic), kafka.get());
  changelog->owned_ = std::move(kafka);
  return changelog;
}

absl::StatusOr<bool> StateChangelog::Prepare(int input_partitions) {
  // Look first: an operator may have created it (and this client may not
  // be allowed to create topics, or, on librdkafka's mock cluster, can't).
  absl::StatusOr<int> existing =
      kafka_->TopicPartitions(topic_, /*just_created=*/false, kTimeout);
  if (existing.ok()) {
    if (*existing < input_partitions) {
      return absl::FailedPreconditionError(absl::StrCat(
          "state changelog topic ", topic_, " has ", *existing,
          " partitions but the input topic has ", input_partitions,
          "; add partitions to it (kafka-topics --alter --partitions ",
          input_partitions, ")"));
    }
    return false;
  }
  if (!absl::IsNotFound(existing.status())) return existing.status();
  ASSIGN_OR_RETURN(bool created, kafka_->CreateTopic(
                                     TopicSpec{.name = topic_,
                                               .partitions = input_partitions,
                                               .replication_factor = -1,
                                               .configs = StateTopicConfigs()},
                                     kTimeout));
  // Just created (here or, a moment ago, by another instance: then
  // `created` is false), the topic can be missing from the metadata for a
  // while; a processor killed right after creating it left exactly that to
  // its successor ("topic ... does not exist", exit 1).
  ASSIGN_OR_RETURN(
      int partitions,
      kafka_->TopicPartitions(topic_, /*just_created=*/true, kTimeout));
  if (partitions < input_partitions) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state changelog topic ", topic_, " has ", partitions,
        " partitions but the input topic has ", input_partitions,
        "; add partitions to it (kafka-topics --alter --partitions ",
        input_partitions, ")"));
  }
  return created;
}

absl::Status StateChangelog::Write(const PartitionSnapshot& snapshot) {
  return kafka_->ProduceRecord(topic_, snapshot.partition,
                               SnapshotKey(snapshot.topic, snapshot.partition),
                               EncodePartitionSnapshot(snapshot), "the state");
}

absl::Status StateChangelog::WriteJob(absl::string_view topic,
                                      int32_t partition, absl::string_view job,
                                      absl::string_view record) {
  return kafka_->ProduceRecord(topic_, partition,
                               PartitionJobKey(topic, partition, job), record,
                               "the job state");
}

absl::Status StateChangelog::DeleteJob(absl::string_view topic,
                                       int32_t partition,
                                       absl::string_view job) {
  return kafka_->ProduceRecord(topic_, partition,
                               PartitionJobKey(topic, partition, job),
                               std::nullopt, "the deletion");
}

absl::StatusOr<std::optional<PartitionSnapshot>> StateChangelog::ReadLatest(
    absl::string_view topic, int32_t partition,
    std::vector<std::string>* gone_jobs) {
  std::optional<PartitionSnapshot> best;
  // job -> its newest record (the last in the log, as compaction keeps).
  absl::flat_hash_map<std::string, PartitionJobRecord> jobs;
  const std::string key = SnapshotKey(topic, partition);
  const std::string job_prefix = absl::StrCat(key, "/job/");
  // The whole partition: a job's record may be anywhere in it. Compaction
  // keeps it about one record per job plus the segment being written
  // (StateTopicConfigs rolls segments often for that).
  auto visit = [&](const ChangelogKafka::Record& m) {
    const absl::string_view k = m.key;
    if (absl::StartsWith(k, job_prefix) && k.size() > job_prefix.size()) {
      const std::string job(k.substr(job_prefix.size()));
      if (!m.value) {  // A tombstone: the job is gone.
        jobs.erase(job);
        return;
      }
      absl::StatusOr<PartitionJobRecord> r = DecodePartitionJob(*m.value);
      if (r.ok() && r->job != job) {
        r = absl::DataLossError("the key names another job");
      }
      if (!r.ok()) {
        spdlog::warn("skipping {}/{}@{}: {}", topic_, partition, m.offset,
                     r.status().ToString());
        return;
      }
      jobs.insert_or_assign(job, *std::move(r));
      return;
    }
    if (k != key || !m.value) {
      return;  // Not ours (should not happen: one partition per key).
    }
    absl::StatusOr<PartitionSnapshot> s = DecodePartitionSnapshot(*m.value);
    if (!s.ok()) {
      spdlog::warn("skipping {}/{}@{}: {}", topic_, partition, m.offset,
                   s.status().ToString());
      return;
    }
    // The highest committed position wins, which also discards a late
    // write of a fenced-out (zombie) former owner.
    if (!best || s->committed_position >= best->committed_position) {
      best = *std::move(s);
    }
  };
  RETURN_IF_ERROR(kafka_->ReadPartition(topic_, partition, kTimeout, visit));
  if (!best) return std::nullopt;
  std::vector<PartitionJobRecord> newest;
  newest.reserve(jobs.size());
  for (auto& [job, r] : jobs) newest.push_back(std::move(r));
  return AssemblePartitionSnapshot(*std::move(best), newest, gone_jobs);
}

}  // namespace bubblewatch
