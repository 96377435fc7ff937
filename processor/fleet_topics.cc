#include "processor/fleet_topics.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace bubblewatch {
namespace {

std::string Ms(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Milliseconds(d));
}

}  // namespace

std::string WindowTopicKey(absl::string_view job, int64_t window_start_ns) {
  return absl::StrCat(job, "@", window_start_ns);
}

bool ParseWindowTopicKey(absl::string_view key, std::string* job,
                         int64_t* window_start_ns) {
  const size_t at = key.rfind('@');
  if (at == absl::string_view::npos || at == 0) return false;
  const absl::string_view start = key.substr(at + 1);
  // SimpleAtoi also takes "+5" and surrounding spaces: keys are written
  // with StrCat, so anything but [-]digits is not one of ours.
  if (start.empty() ||
      start.find_first_not_of("-0123456789", start[0] == '-' ? 1 : 0) !=
          absl::string_view::npos ||
      start.find('-', 1) != absl::string_view::npos) {
    return false;
  }
  if (!absl::SimpleAtoi(start, window_start_ns)) return false;
  *job = std::string(key.substr(0, at));
  return true;
}

int32_t WindowTopicPartition(absl::string_view job, int partitions) {
  // librdkafka's own murmur2 partitioner (Java-client compatible); it reads
  // neither the topic handle nor the opaques.
  return rd_kafka_msg_partitioner_murmur2(nullptr, job.data(), job.size(),
                                          partitions, nullptr, nullptr);
}

TopicConfigs WindowsTopicConfigs(absl::Duration retention) {
  return {{"cleanup.policy", "compact,delete"},
          {"retention.ms", Ms(std::max(retention, kDefaultTopicRetention))},
          // Retention and compaction act on closed segments only: an hour
          // per segment keeps what is past retention from lingering a week.
          {"segment.ms", "3600000"}};
}

TopicConfigs PartsTopicConfigs(absl::Duration retention) {
  return DeleteTopicConfigs(std::max(retention, kDefaultTopicRetention));
}

TopicConfigs StateTopicConfigs() {
  return {{"cleanup.policy", "compact"},
          // Compaction only touches closed segments: roll them often so the
          // topic stays about one record per partition.
          {"segment.ms", "600000"},
          {"min.cleanable.dirty.ratio", "0.1"}};
}

TopicConfigs DeleteTopicConfigs(absl::Duration retention) {
  return {{"cleanup.policy", "delete"}, {"retention.ms", Ms(retention)}};
}

TopicConfigs EventsTopicConfigs(absl::Duration retention,
                                int64_t max_record_bytes) {
  TopicConfigs configs = DeleteTopicConfigs(retention);
  if (max_record_bytes > 0) {
    configs.emplace_back(kMaxDecompressedRecordConfig,
                         absl::StrCat(max_record_bytes));
  }
  return configs;
}

absl::StatusOr<bool> CreateFleetTopicIfMissing(rd_kafka_t* client,
                                               TopicSpec spec,
                                               absl::Duration timeout,
                                               std::string* dropped_config) {
  dropped_config->clear();
  absl::StatusOr<bool> created = CreateTopicIfMissing(client, spec, timeout);
  auto bounded = std::find_if(
      spec.configs.begin(), spec.configs.end(),
      [](const auto& c) { return c.first == kMaxDecompressedRecordConfig; });
  // The broker names the config it does not know ("Unknown topic config
  // name: ..."); any other refusal stands.
  if (created.ok() || bounded == spec.configs.end() ||
      !absl::StrContains(created.status().message(),
                         kMaxDecompressedRecordConfig)) {
    return created;
  }
  spec.configs.erase(bounded);
  *dropped_config = kMaxDecompressedRecordConfig;
  return CreateTopicIfMissing(client, spec, timeout);
}

std::vector<TopicSpec> FleetTopicSpecs(const FleetTopicOptions& o) {
  std::vector<TopicSpec> specs;
  auto add = [&](const std::string& name, int partitions,
                 TopicConfigs configs) {
    if (name.empty()) return;
    specs.push_back(TopicSpec{.name = name,
                              .partitions = partitions,
                              .replication_factor = o.replication_factor,
                              .configs = std::move(configs)});
  };
  add(o.events_topic, o.partitions,
      EventsTopicConfigs(o.retention, o.max_record_bytes));
  add(o.windows_topic, o.partitions, WindowsTopicConfigs(o.retention));
  add(o.parts_topic, o.partitions, PartsTopicConfigs(o.retention));
  add(o.state_topic, o.partitions, StateTopicConfigs());
  add(o.dlq_topic, 1, DeleteTopicConfigs(o.retention));
  add(o.alerts_topic, 1, DeleteTopicConfigs(o.retention));
  return specs;
}

}  // namespace bubblewatch
