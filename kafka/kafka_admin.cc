#include "kafka/kafka_admin.h"

#include <algorithm>
#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "kafka/kafka_handles.h"
#include "kafka/kafka_status.h"

namespace bubblewatch {
namespace {

int TimeoutMs(absl::Duration timeout) {
  return static_cast<int>(absl::ToInt64Milliseconds(timeout));
}

using AdminQueue =
    std::unique_ptr<rd_kafka_queue_t, decltype(&rd_kafka_queue_destroy)>;
using AdminOptions = std::unique_ptr<rd_kafka_AdminOptions_t,
                                     decltype(&rd_kafka_AdminOptions_destroy)>;
using AdminEvent =
    std::unique_ptr<rd_kafka_event_t, decltype(&rd_kafka_event_destroy)>;

// The metadata of all topics: asking for named ones could make the broker
// auto-create them.
absl::StatusOr<RdKafkaMetadataPtr> AllTopicsMetadata(rd_kafka_t* client,
                                                     absl::Duration timeout) {
  const rd_kafka_metadata_t* raw = nullptr;
  rd_kafka_resp_err_t err = rd_kafka_metadata(client, /*all_topics=*/1, nullptr,
                                              &raw, TimeoutMs(timeout));
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return KafkaErrorToStatus(err, "reading topic metadata");
  }
  return RdKafkaMetadataPtr(raw);
}

// The entry of topic `name` in `metadata`, or nullptr.
const rd_kafka_metadata_topic_t* FindTopic(const rd_kafka_metadata_t& metadata,
                                           absl::string_view name) {
  for (int i = 0; i < metadata.topic_cnt; ++i) {
    if (name == metadata.topics[i].topic) return &metadata.topics[i];
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<int> TopicPartitionCount(rd_kafka_t* client,
                                        absl::string_view topic,
                                        absl::Duration timeout) {
  ASSIGN_OR_RETURN(RdKafkaMetadataPtr metadata,
                   AllTopicsMetadata(client, timeout));
  const rd_kafka_metadata_topic_t* t = FindTopic(*metadata, topic);
  if (t == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("topic ", topic, " does not exist"));
  }
  if (t->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return KafkaErrorToStatus(t->err, absl::StrCat("topic ", topic));
  }
  return t->partition_cnt;
}

absl::StatusOr<int> CreatedTopicPartitionCount(rd_kafka_t* client,
                                               absl::string_view topic,
                                               absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<int> count = TopicPartitionCount(client, topic, timeout);
  while (absl::IsNotFound(count.status()) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
    count = TopicPartitionCount(client, topic, timeout);
  }
  return count;
}

absl::StatusOr<bool> CreateTopicIfMissing(
    rd_kafka_t* client, absl::string_view topic, int partitions,
    const std::vector<std::pair<std::string, std::string>>& configs,
    absl::Duration timeout) {
  return CreateTopicIfMissing(client,
                              TopicSpec{.name = std::string(topic),
                                        .partitions = partitions,
                                        .replication_factor = -1,
                                        .configs = configs},
                              timeout);
}

absl::StatusOr<bool> CreateTopicIfMissing(rd_kafka_t* client,
                                          const TopicSpec& spec,
                                          absl::Duration timeout) {
  const std::string& name = spec.name;
  char errstr[512] = {};
  rd_kafka_NewTopic_t* new_topic =
      rd_kafka_NewTopic_new(name.c_str(), spec.partitions,
                            spec.replication_factor, errstr, sizeof(errstr));
  if (new_topic == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("topic ", name, ": ", errstr));
  }
  std::unique_ptr<rd_kafka_NewTopic_t, decltype(&rd_kafka_NewTopic_destroy)>
      owned(new_topic, &rd_kafka_NewTopic_destroy);
  for (const auto& [key, value] : spec.configs) {
    rd_kafka_resp_err_t err =
        rd_kafka_NewTopic_set_config(new_topic, key.c_str(), value.c_str());
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return KafkaErrorToStatus(err, absl::StrCat("topic config ", key));
    }
  }
  AdminQueue queue(rd_kafka_queue_new(client), &rd_kafka_queue_destroy);
  AdminOptions options(
      rd_kafka_AdminOptions_new(client, RD_KAFKA_ADMIN_OP_CREATETOPICS),
      &rd_kafka_AdminOptions_destroy);
  rd_kafka_AdminOptions_set_request_timeout(options.get(), TimeoutMs(timeout),
                                            errstr, sizeof(errstr));
  rd_kafka_CreateTopics(client, &new_topic, 1, options.get(), queue.get());
  AdminEvent event(
      rd_kafka_queue_poll(queue.get(), TimeoutMs(timeout + absl::Seconds(1))),
      &rd_kafka_event_destroy);
  if (!event) {
    return absl::DeadlineExceededError(
        absl::StrCat("creating topic ", name, ": no answer within ",
                     absl::FormatDuration(timeout)));
  }
  if (rd_kafka_event_error(event.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return KafkaErrorToStatus(rd_kafka_event_error(event.get()),
                              absl::StrCat("creating topic ", name));
  }
  const rd_kafka_CreateTopics_result_t* result =
      rd_kafka_event_CreateTopics_result(event.get());
  size_t count = 0;
  const rd_kafka_topic_result_t** topics =
      rd_kafka_CreateTopics_result_topics(result, &count);
  bool created = false;
  for (size_t i = 0; i < count; ++i) {
    rd_kafka_resp_err_t err = rd_kafka_topic_result_error(topics[i]);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      created = true;
      continue;
    }
    if (err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) continue;
    const char* message = rd_kafka_topic_result_error_string(topics[i]);
    return KafkaErrorToStatus(
        err, absl::StrCat("creating topic ", name,
                          message != nullptr ? absl::StrCat(": ", message)
                                             : std::string()));
  }
  return created;
}

absl::StatusOr<std::vector<TopicDescription>> DescribeTopics(
    rd_kafka_t* client, const std::vector<std::string>& topics,
    absl::Duration timeout) {
  std::vector<TopicDescription> out;
  // Partitions and replicas from the metadata.
  ASSIGN_OR_RETURN(RdKafkaMetadataPtr metadata,
                   AllTopicsMetadata(client, timeout));
  for (const std::string& name : topics) {
    TopicDescription d;
    d.name = name;
    const rd_kafka_metadata_topic_t* t = FindTopic(*metadata, name);
    if (t != nullptr && t->err != RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) {
      if (t->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        return KafkaErrorToStatus(t->err, absl::StrCat("topic ", name));
      }
      d.exists = true;
      d.partitions = t->partition_cnt;
      d.replication_factor =
          t->partition_cnt > 0 ? t->partitions[0].replica_cnt : 0;
    }
    out.push_back(std::move(d));
  }

  // Configs of the existing ones, in one DescribeConfigs request.
  std::vector<rd_kafka_ConfigResource_t*> resources;
  absl::Cleanup destroy_resources = [&resources] {
    for (rd_kafka_ConfigResource_t* r : resources) {
      rd_kafka_ConfigResource_destroy(r);
    }
  };
  for (const TopicDescription& d : out) {
    if (d.exists) {
      resources.push_back(
          rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, d.name.c_str()));
    }
  }
  if (resources.empty()) return out;
  char errstr[512] = {};
  AdminQueue queue(rd_kafka_queue_new(client), &rd_kafka_queue_destroy);
  AdminOptions options(
      rd_kafka_AdminOptions_new(client, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS),
      &rd_kafka_AdminOptions_destroy);
  rd_kafka_AdminOptions_set_request_timeout(options.get(), TimeoutMs(timeout),
                                            errstr, sizeof(errstr));
  rd_kafka_DescribeConfigs(client, resources.data(), resources.size(),
                           options.get(), queue.get());
  AdminEvent event(
      rd_kafka_queue_poll(queue.get(), TimeoutMs(timeout + absl::Seconds(1))),
      &rd_kafka_event_destroy);
  if (!event) {
    return absl::DeadlineExceededError(
        absl::StrCat("describing topic configs: no answer within ",
                     absl::FormatDuration(timeout)));
  }
  if (rd_kafka_event_error(event.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return KafkaErrorToStatus(rd_kafka_event_error(event.get()),
                              "describing topic configs");
  }
  const rd_kafka_DescribeConfigs_result_t* result =
      rd_kafka_event_DescribeConfigs_result(event.get());
  size_t count = 0;
  const rd_kafka_ConfigResource_t** described =
      rd_kafka_DescribeConfigs_result_resources(result, &count);
  for (size_t i = 0; i < count; ++i) {
    const std::string name = rd_kafka_ConfigResource_name(described[i]);
    auto it = std::find_if(
        out.begin(), out.end(),
        [&](const TopicDescription& d) { return d.exists && d.name == name; });
    if (it == out.end()) continue;
    if (rd_kafka_resp_err_t e = rd_kafka_ConfigResource_error(described[i]);
        e != RD_KAFKA_RESP_ERR_NO_ERROR) {
      const char* message = rd_kafka_ConfigResource_error_string(described[i]);
      return KafkaErrorToStatus(
          e, absl::StrCat("describing the configs of topic ", name,
                          message != nullptr ? absl::StrCat(": ", message)
                                             : std::string()));
    }
    size_t entries = 0;
    const rd_kafka_ConfigEntry_t** configs =
        rd_kafka_ConfigResource_configs(described[i], &entries);
    for (size_t j = 0; j < entries; ++j) {
      const char* value = rd_kafka_ConfigEntry_value(configs[j]);
      // Sensitive entries have no value to show.
      if (value == nullptr || rd_kafka_ConfigEntry_is_sensitive(configs[j])) {
        continue;
      }
      it->configs[rd_kafka_ConfigEntry_name(configs[j])] = value;
    }
  }
  return out;
}

absl::StatusOr<std::optional<int64_t>> TopicMaxMessageBytes(
    rd_kafka_t* client, const std::string& topic, absl::Duration timeout) {
  ASSIGN_OR_RETURN(std::vector<TopicDescription> described,
                   DescribeTopics(client, {topic}, timeout));
  if (described.empty() || !described.front().exists) return std::nullopt;
  const auto& configs = described.front().configs;
  auto it = configs.find("max.message.bytes");
  int64_t bytes = 0;
  if (it == configs.end() || !absl::SimpleAtoi(it->second, &bytes) ||
      bytes <= 0) {
    return absl::InternalError(absl::StrCat(
        "topic ", topic, ": DescribeConfigs gave no max.message.bytes"));
  }
  return bytes;
}

}  // namespace bubblewatch
