#include "processor/state_changelog.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "kafka/kafka_admin.h"
#include "kafka/kafka_status.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {
namespace {

constexpr uint8_t kSnapshotFormat = 1;

void PutU64(uint64_t u, std::string& out) {
  for (int shift = 0; shift < 64; shift += 8) {
    out.push_back(static_cast<char>((u >> shift) & 0xff));
  }
}

void PutBytes(absl::string_view bytes, std::string& out) {
  PutU64(bytes.size(), out);
  out.append(bytes.data(), bytes.size());
}

// Reads from the front of `in`, consuming what it reads; false when `in` is
// too short.
bool GetU64(absl::string_view& in, uint64_t& u) {
  if (in.size() < 8) return false;
  u = 0;
  for (int i = 7; i >= 0; --i) u = (u << 8) | static_cast<uint8_t>(in[i]);
  in.remove_prefix(8);
  return true;
}

bool GetBytes(absl::string_view& in, std::string& out) {
  uint64_t size = 0;
  if (!GetU64(in, size) || in.size() < size) return false;
  out.assign(in.data(), size);
  in.remove_prefix(size);
  return true;
}

bool GetJobStates(absl::string_view& in, JobStates& jobs) {
  uint64_t count = 0;
  if (!GetU64(in, count)) return false;
  for (uint64_t i = 0; i < count; ++i) {
    std::string job, state;
    if (!GetBytes(in, job) || !GetBytes(in, state)) return false;
    jobs.emplace(std::move(job), std::move(state));
  }
  return true;
}

void PutJobStates(const JobStates& jobs, std::string& out) {
  PutU64(jobs.size(), out);
  for (const auto& [job, state] : jobs) {
    PutBytes(job, out);
    PutBytes(state, out);
  }
}

std::string SnapshotKey(absl::string_view topic, int32_t partition) {
  return absl::StrCat(topic, "/", partition);
}

}  // namespace

std::string EncodeJobStates(const JobStates& jobs) {
  std::string out;
  PutJobStates(jobs, out);
  return out;
}

absl::StatusOr<JobStates> DecodeJobStates(absl::string_view bytes) {
  JobStates jobs;
  if (!GetJobStates(bytes, jobs) || !bytes.empty()) {
    return absl::DataLossError("corrupt job states of a partition snapshot");
  }
  return jobs;
}

std::string EncodePartitionSnapshot(const PartitionSnapshot& snapshot) {
  std::string out;
  out.push_back(static_cast<char>(kSnapshotFormat));
  PutBytes(snapshot.topic, out);
  PutU64(static_cast<uint64_t>(snapshot.partition), out);
  PutU64(static_cast<uint64_t>(snapshot.resume_offset), out);
  PutU64(static_cast<uint64_t>(snapshot.committed_position), out);
  PutJobStates(snapshot.jobs, out);
  return out;
}

absl::StatusOr<PartitionSnapshot> DecodePartitionSnapshot(
    absl::string_view bytes) {
  if (bytes.empty() || static_cast<uint8_t>(bytes[0]) != kSnapshotFormat) {
    return absl::DataLossError(
        "partition snapshot: empty or of an unknown format");
  }
  bytes.remove_prefix(1);
  PartitionSnapshot s;
  uint64_t partition = 0, resume = 0, committed = 0;
  if (!GetBytes(bytes, s.topic) || !GetU64(bytes, partition) ||
      !GetU64(bytes, resume) || !GetU64(bytes, committed) ||
      !GetJobStates(bytes, s.jobs) || !bytes.empty()) {
    return absl::DataLossError("corrupt partition snapshot");
  }
  s.partition = static_cast<int32_t>(partition);
  s.resume_offset = static_cast<int64_t>(resume);
  s.committed_position = static_cast<int64_t>(committed);
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
  ASSIGN_OR_RETURN(
      bool created,
      CreateTopicIfMissing(
          reader_.get(), topic_, input_partitions,
          {{"cleanup.policy", "compact"},
           // Compaction only touches closed segments: roll them often so the
           // topic stays about one record per partition.
           {"segment.ms", "600000"},
           {"min.cleanable.dirty.ratio", "0.1"}},
          kTimeout));
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
