// `bubblewatch topics create|describe`: sets up the topics of a fleet with
// the layout of processor/fleet_topics.h (docs/topics.md) and shows what a
// cluster has: partitions, replication factor, cleanup policy, retention.
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json_writer.h"
#include "base/logging.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "kafka/kafka_admin.h"
#include "kafka/kafka_config.h"
#include "processor/fleet_topics.h"

namespace bubblewatch {
namespace {

int Usage(absl::string_view message) {
  std::cerr << "bubblewatch topics: " << message
            << "\nTry 'bubblewatch topics --help'.\n";
  return kExitUsage;
}

int Fail(absl::string_view message) {
  std::cerr << "bubblewatch topics: " << message << "\n";
  return kExitFailure;
}

std::string ConfigOr(const TopicDescription& d, const std::string& key,
                     absl::string_view fallback) {
  auto it = d.configs.find(key);
  return it != d.configs.end() ? it->second : std::string(fallback);
}

// "7d", "6h", "forever" for a retention.ms value; the value itself when it
// is not a number.
std::string RetentionText(const std::string& ms_text) {
  int64_t ms = 0;
  if (!absl::SimpleAtoi(ms_text, &ms)) return ms_text;
  if (ms < 0) return "forever";
  constexpr int64_t kDay = 24 * 3600 * 1000LL;
  if (ms > 0 && ms % kDay == 0) return absl::StrCat(ms / kDay, "d");
  return absl::FormatDuration(absl::Milliseconds(ms));
}

// The configs `describe` shows; the JSON form gives them as they are.
constexpr const char* kShownConfigs[] = {"cleanup.policy",
                                         "retention.ms",
                                         "segment.ms",
                                         "min.insync.replicas",
                                         "min.cleanable.dirty.ratio",
                                         kMaxDecompressedRecordConfig};

std::string DescribeJson(const std::vector<TopicDescription>& topics,
                         bool pretty) {
  JsonWriter w(pretty ? 2 : 0);
  w.BeginObject().Key("topics").BeginArray();
  for (const TopicDescription& d : topics) {
    w.BeginObject().Key("topic").String(d.name);
    w.Key("exists").Bool(d.exists);
    if (d.exists) {
      w.Key("partitions").Int(d.partitions);
      w.Key("replication_factor").Int(d.replication_factor);
      const std::string policy = ConfigOr(d, "cleanup.policy", "");
      w.Key("compacted").Bool(absl::StrContains(policy, "compact"));
      int64_t retention_ms = 0;
      if (absl::SimpleAtoi(ConfigOr(d, "retention.ms", ""), &retention_ms)) {
        w.Key("retention_ms").Int(retention_ms);
      } else {
        w.Key("retention_ms").Null();
      }
      w.Key("configs").BeginObject();
      for (const char* key : kShownConfigs) {
        auto it = d.configs.find(key);
        if (it != d.configs.end()) w.Key(key).String(it->second);
      }
      w.EndObject();
    }
    w.EndObject();
  }
  w.EndArray().EndObject();
  return std::move(w).Take();
}

std::string DescribeText(const std::vector<TopicDescription>& topics) {
  size_t width = 5;
  for (const TopicDescription& d : topics) {
    width = std::max(width, d.name.size());
  }
  std::string out = absl::StrFormat("%-*s  %10s  %11s  %-14s  %s\n", width,
                                    "topic", "partitions", "replication",
                                    "cleanup.policy", "retention");
  for (const TopicDescription& d : topics) {
    if (!d.exists) {
      absl::StrAppend(&out,
                      absl::StrFormat("%-*s  (missing)\n", width, d.name));
      continue;
    }
    absl::StrAppend(
        &out, absl::StrFormat("%-*s  %10d  %11d  %-14s  %s\n", width, d.name,
                              d.partitions, d.replication_factor,
                              ConfigOr(d, "cleanup.policy", "?"),
                              RetentionText(ConfigOr(d, "retention.ms", "?"))));
  }
  return out;
}

}  // namespace

int RunTopicsCommand(int argc, char** argv) {
  std::string brokers;
  FleetTopicOptions fleet;
  std::vector<std::string> properties;
  absl::Duration timeout = absl::Seconds(30);
  std::string log_level = "warn";
  bool json = false;
  bool pretty = false;
  CommandLine cl(
      "bubblewatch topics create --brokers HOST:PORT[,..] [--partitions N] "
      "[options]\n"
      "       bubblewatch topics describe --brokers HOST:PORT[,..] [--json] "
      "[TOPIC...]",
      "Sets up the Kafka topics of a fleet, or shows them. `create` makes "
      "the events topic with\n--partitions partitions (the most processor "
      "instances that share the work), the windows\nand state topics "
      "compacted with as many, and one-partition dead-letter and alerts\n"
      "topics; a topic that exists is left as it is. `describe` shows "
      "partitions, replication\nfactor, cleanup policy and retention of "
      "the fleet's topics (or of each TOPIC).\nSee docs/topics.md.\n\n"
      "Exit codes: 0 ok, 1 Kafka failure (or, for describe, a missing "
      "topic), 2 usage error.");
  cl.AddString("brokers", &brokers, "HOST:PORT[,..]",
               "Kafka bootstrap servers");
  cl.AddInt("partitions", &fleet.partitions, "N",
            "create: partitions of the events, windows and state topics");
  cl.AddInt("replication-factor", &fleet.replication_factor, "R",
            "create: replicas of each partition (-1 = the broker's "
            "default.replication.factor; 3 for production)");
  cl.AddDuration("retention", &fleet.retention, "DURATION",
                 "create: how long events, dead letters and alerts are kept, "
                 "and windows at least");
  cl.AddInt64("max-record-bytes", &fleet.max_record_bytes, "BYTES",
              "create: the largest events record the broker accepts once "
              "decompressed (Kafka 4.4+; keep it at process's "
              "--max-batch-bytes; 0 = no bound)");
  cl.AddString("topic", &fleet.events_topic, "TOPIC", "events topic");
  cl.AddString("windows-topic", &fleet.windows_topic, "TOPIC",
               "windows topic (\"\" = leave out)");
  cl.AddString("parts-topic", &fleet.parts_topic, "TOPIC",
               "split jobs' window parts (\"\" = leave out; "
               "docs/architecture.md#one-job-across-processors)");
  cl.AddString("state-topic", &fleet.state_topic, "TOPIC",
               "the processor's state changelog (\"\" = leave out)");
  cl.AddString("dlq-topic", &fleet.dlq_topic, "TOPIC",
               "dead-letter topic (\"\" = leave out)");
  cl.AddString("alerts-topic", &fleet.alerts_topic, "TOPIC",
               "alert events topic (\"\" = leave out)");
  cl.AddList("property", &properties, "KEY=VALUE",
             "librdkafka property (repeatable; SASL/SSL settings go here)");
  cl.AddAlias('X', "property");
  cl.AddDuration("timeout", &timeout, "DURATION",
                 "how long to wait for the cluster's answers");
  cl.AddBool("json", &json, "describe: print JSON");
  cl.AddBool("pretty", &pretty, "indent the JSON");
  cl.AddString("log-level", &log_level, "LEVEL",
               "trace, debug, info, warn, error or off");
  std::vector<std::string> positional;
  if (std::optional<int> exit = cl.ParseOrExit(argc, argv, &positional)) {
    return *exit;
  }
  if (positional.empty()) return Usage("want an action: create or describe");
  const std::string action = positional[0];
  if (action != "create" && action != "describe") {
    return Usage(
        absl::StrCat("unknown action '", action, "': want create or describe"));
  }
  if (action == "create" && positional.size() > 1) {
    return Usage(absl::StrCat("unexpected argument ", positional[1]));
  }
  if (brokers.empty()) return Usage("--brokers is required");
  if (brokers == "embedded") {
    return Usage(
        "--brokers embedded is a cluster inside one process: there are no "
        "topics to set up");
  }
  if (fleet.partitions < 1) return Usage("--partitions must be >= 1");
  if (fleet.max_record_bytes < 0) {
    return Usage("--max-record-bytes must be >= 0");
  }
  if (fleet.replication_factor == 0 || fleet.replication_factor < -1) {
    return Usage("--replication-factor must be >= 1 or -1");
  }
  if (fleet.retention <= absl::ZeroDuration()) {
    return Usage("--retention must be positive");
  }
  if (timeout <= absl::ZeroDuration()) {
    return Usage("--timeout must be positive");
  }
  if (fleet.events_topic.empty()) return Usage("--topic must not be empty");
  if (absl::Status s = InitLogging(log_level); !s.ok()) {
    return Usage(s.message());
  }
  KafkaConfig config(brokers);
  if (absl::Status s = config.SetAssignments(properties); !s.ok()) {
    return Usage(s.message());
  }
  absl::StatusOr<RdKafkaPtr> client = NewKafkaClient(RD_KAFKA_PRODUCER, config);
  if (!client.ok()) return Usage(client.status().message());

  if (action == "create") {
    for (TopicSpec& spec : FleetTopicSpecs(fleet)) {
      std::string dropped;
      absl::StatusOr<bool> created =
          CreateFleetTopicIfMissing(client->get(), spec, timeout, &dropped);
      if (!created.ok()) return Fail(created.status().message());
      if (!dropped.empty()) {
        std::cerr << "bubblewatch topics: the broker does not know " << dropped
                  << " (Kafka before 4.4): " << spec.name
                  << " has no bound on a record's decompressed size; the "
                     "processor still dead-letters one over its limit, but "
                     "only after librdkafka has inflated it\n";
        std::erase_if(spec.configs,
                      [&](const auto& c) { return c.first == dropped; });
      }
      // Returns once the metadata shows the topic, so that what runs next
      // (a describe, a processor) finds it.
      absl::StatusOr<int> partitions =
          CreatedTopicPartitionCount(client->get(), spec.name, timeout);
      if (!partitions.ok()) return Fail(partitions.status().message());
      std::string configs;
      for (const auto& [key, value] : spec.configs) {
        absl::StrAppend(&configs, " ", key, "=", value);
      }
      std::cout << (*created ? "created " : "exists  ") << spec.name;
      if (*created) {
        std::cout << ": " << *partitions
                  << (*partitions == 1 ? " partition," : " partitions,")
                  << configs;
      }
      std::cout << "\n";
    }
    return kExitOk;
  }

  std::vector<std::string> names(positional.begin() + 1, positional.end());
  if (names.empty()) {
    for (const TopicSpec& spec : FleetTopicSpecs(fleet)) {
      names.push_back(spec.name);
    }
  }
  absl::StatusOr<std::vector<TopicDescription>> topics =
      DescribeTopics(client->get(), names, timeout);
  if (!topics.ok()) return Fail(topics.status().message());
  std::cout << (json ? DescribeJson(*topics, pretty) + "\n"
                     : DescribeText(*topics));
  for (const TopicDescription& d : *topics) {
    if (!d.exists) return kExitFailure;
  }
  return kExitOk;
}

}  // namespace bubblewatch
