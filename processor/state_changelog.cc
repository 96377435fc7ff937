#include "processor/state_changelog.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "kafka/kafka_admin.h"
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
            JobActivity{.last_event_ns = entry->last_event_ns(),
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
    ASSIGN_OR_RETURN(s.ledger, LimitLedger::Restore(ledger->newest_event_ns(),
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
      // event writes kNoEventNs.)
      JobActivity seen{.last_event_ns = 0, .last_seen_wall_ns = 0};
      if (activity != nullptr) {
        if (auto it = activity->find(job); it != activity->end()) {
          seen = it->second;
        }
      }
      entries.push_back(fb::CreateJobStateEntry(
          b, name, bytes, seen.last_event_ns, seen.last_seen_wall_ns));
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
        b, snapshot.ledger.newest_event_ns(),
        b.CreateVector(snapshot.ledger.rejected_offsets()));
  }
  auto topic = b.CreateString(snapshot.topic);
  auto body = fb::CreatePartitionSnapshotRecord(
      b, topic, snapshot.partition, snapshot.resume_offset,
      snapshot.committed_position, jobs, ledger, job_alerts);
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
  return std::unique_ptr<StateChangelog>(
      new StateChangelog(std::move(topic), producer, std::move(reader)));
}

absl::StatusOr<bool> StateChangelog::Prepare(int input_partitions) {
  // Look first: an operator may have created it (and this client may not
  // be allowed to create topics, or, on librdkafka's mock cluster, can't).
  absl::StatusOr<int> existing =
      TopicPartitionCount(reader_.get(), topic_, kTimeout);
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
  ASSIGN_OR_RETURN(bool created,
                   CreateTopicIfMissing(reader_.get(), topic_, input_partitions,
                                        StateTopicConfigs(), kTimeout));
  // Just created (here or, a moment ago, by another instance: then
  // `created` is false), the topic can be missing from the metadata for a
  // while; a processor killed right after creating it left exactly that to
  // its successor ("topic ... does not exist", exit 1).
  ASSIGN_OR_RETURN(int partitions,
                   CreatedTopicPartitionCount(reader_.get(), topic_, kTimeout));
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
  const std::string key = SnapshotKey(snapshot.topic, snapshot.partition);
  const std::string value = EncodePartitionSnapshot(snapshot);
  return KafkaErrorToStatus(
      rd_kafka_producev(
          producer_, RD_KAFKA_V_TOPIC(topic_.c_str()),
          RD_KAFKA_V_PARTITION(snapshot.partition),
          RD_KAFKA_V_KEY(key.data(), key.size()),
          RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
      absl::StrCat("writing the state of ", key, " to ", topic_));
}

absl::StatusOr<std::optional<PartitionSnapshot>> StateChangelog::ReadLatest(
    absl::string_view topic, int32_t partition) {
  int64_t low = 0, high = 0;
  // A just-created changelog has no partition leaders for a moment: retry
  // what librdkafka calls retriable until the deadline.
  const absl::Time offsets_deadline = absl::Now() + kTimeout;
  for (;;) {
    rd_kafka_resp_err_t err = rd_kafka_query_watermark_offsets(
        reader_.get(), topic_.c_str(), partition, &low, &high,
        static_cast<int>(absl::ToInt64Milliseconds(kTimeout)));
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) break;
    const bool retriable = err == RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION ||
                           err == RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE ||
                           err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
                           err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION ||
                           err == RD_KAFKA_RESP_ERR__TRANSPORT;
    if (!retriable || absl::Now() > offsets_deadline) {
      return KafkaErrorToStatus(
          err, absl::StrCat("reading the offsets of ", topic_, "/", partition));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  if (high <= low) return std::nullopt;
  RdKafkaPartitionListPtr assignment(rd_kafka_topic_partition_list_new(1));
  rd_kafka_topic_partition_list_add(assignment.get(), topic_.c_str(), partition)
      ->offset = std::max(low, high - kLookback);
  RETURN_IF_ERROR(
      KafkaErrorToStatus(rd_kafka_assign(reader_.get(), assignment.get()),
                         absl::StrCat("assigning ", topic_, "/", partition)));
  std::optional<PartitionSnapshot> best;
  const std::string key = SnapshotKey(topic, partition);
  const absl::Time deadline = absl::Now() + kTimeout;
  absl::Status status = absl::OkStatus();
  bool done = false;
  while (!done) {
    if (absl::Now() > deadline) {
      status = absl::DeadlineExceededError(
          absl::StrCat("reading the state of ", key, " from ", topic_,
                       ": not done within ", absl::FormatDuration(kTimeout)));
      break;
    }
    RdKafkaMessagePtr m(rd_kafka_consumer_poll(reader_.get(), 100));
    if (!m) continue;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) break;
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      status = KafkaErrorToStatus(m->err, absl::StrCat("reading ", topic_));
      break;
    }
    done = m->offset >= high - 1;
    if (m->key_len != key.size() ||
        absl::string_view(static_cast<const char*>(m->key), m->key_len) !=
            key) {
      continue;  // Not ours (should not happen: one partition per key).
    }
    absl::StatusOr<PartitionSnapshot> s =
        DecodePartitionSnapshot({static_cast<const char*>(m->payload), m->len});
    if (!s.ok()) {
      spdlog::warn("skipping {}/{}@{}: {}", topic_, partition, m->offset,
                   s.status().ToString());
      continue;
    }
    if (!best || s->committed_position >= best->committed_position) {
      best = *std::move(s);
    }
  }
  rd_kafka_assign(reader_.get(), nullptr);
  RETURN_IF_ERROR(status);
  return best;
}

}  // namespace bubblewatch
