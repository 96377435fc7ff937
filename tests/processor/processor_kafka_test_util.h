// Helpers shared by the processor's tests against a real Kafka broker: the
// synthetic fleet they all stream, spawning `bubblewatch produce|process` as
// child processes, the offline oracle (analyze --window on the same fleet),
// and reading windows back from stores and topics for comparison.
#ifndef BUBBLEWATCH_TESTS_PROCESSOR_PROCESSOR_KAFKA_TEST_UTIL_H_
#define BUBBLEWATCH_TESTS_PROCESSOR_PROCESSOR_KAFKA_TEST_UTIL_H_

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "analysis/bubble_analyzer.h"
#include "gtest/gtest.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "kafka/kafka_admin.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_handles.h"
#include "schemas/window_summary.h"
#include "schemas/window_summary_codec.h"
#include "storage/window_store.h"
#include "tests/processor/window_oracle.h"
#include "tests/testing/child_process.h"
#include "tests/testing/kafka_broker.h"
#include "tests/testing/test_time.h"

extern char** environ;

namespace bubblewatch {

using testing::Brokers;
using testing::CreateTopic;
using testing::Unique;

// Starts `bubblewatch ARGS...`; with `stderr_path`, the child's standard
// error goes to that file.
inline pid_t Spawn(const std::vector<std::string>& args,
                   const std::string& stderr_path = "") {
  return testing::SpawnChild(BUBBLEWATCH_BINARY, args, stderr_path);
}

inline int Wait(pid_t pid) { return testing::WaitChild(pid); }

inline int RunToEnd(const std::vector<std::string>& args) {
  return Wait(Spawn(args));
}

inline std::vector<std::string> ProduceArgs(
    const std::string& topic, const std::string& brokers = Brokers(),
    const SyntheticFleetOptions& o = Fleet()) {
  return {"produce",
          "--brokers",
          brokers,
          "--topic",
          topic,
          "--synthetic",
          "--jobs",
          std::to_string(o.jobs),
          "--gpus-per-job",
          std::to_string(o.gpus_per_job),
          "--duration",
          absl::FormatDuration(o.duration),
          "--rate",
          std::to_string(static_cast<int>(o.events_per_second_per_gpu)),
          "--scenario",
          "mix",
          "--seed",
          std::to_string(o.seed),
          "--log-level",
          "error"};
}

inline std::vector<std::string> ProcessArgs(
    const std::string& topic, const std::string& store,
    const std::string& brokers = Brokers()) {
  // Wall-clock durations scale with the programs' speed (test_time.h);
  // --lateness is event time and does not.
  using testing::ScaledFlag;
  return {"process", "--brokers", brokers, "--topic", topic, "--group",
          topic + "-group", "--store", store, "--lateness", "5s",
          "--idle-timeout", ScaledFlag(absl::Seconds(3)), "--exit-when-idle",
          ScaledFlag(absl::Seconds(4)), "--windows-topic", topic + ".windows",
          "--dlq-topic", topic + ".dlq", "--state-topic", topic + ".state",
          "--log-level", "warn",
          // A killed member leaves the group only when its session expires.
          "-X", "session.timeout.ms=" + testing::GroupSessionMs(), "-X",
          "heartbeat.interval.ms=" + testing::GroupHeartbeatMs()};
}

// A message as read back from a topic: key, value and headers in order.
struct TopicMessage {
  std::string key;
  std::string payload;
  std::vector<std::pair<std::string, std::string>> headers;
  // The value of the last header named `name` ("" if none): what a reader
  // taking the last header of a name sees.
  std::string LastHeader(const std::string& name) const {
    std::string value;
    for (const auto& [n, v] : headers) {
      if (n == name) value = v;
    }
    return value;
  }
};

// Every message of partition 0 of `topic` from the beginning, until its end
// once at least `at_least` messages were read, or 30 s pass.
inline std::vector<TopicMessage> ReadTopicMessages(const std::string& topic,
                                                   size_t at_least = 0) {
  KafkaConfig config(Brokers());
  config.Set("group.id", Unique(topic + "-reader"));
  config.Set("enable.auto.commit", "false");
  config.Set("enable.partition.eof", "true");
  absl::StatusOr<RdKafkaPtr> consumer =
      NewKafkaClient(RD_KAFKA_CONSUMER, config);
  EXPECT_TRUE(consumer.ok()) << consumer.status();
  std::vector<TopicMessage> out;
  if (!consumer.ok()) return out;
  RdKafkaPartitionListPtr parts(rd_kafka_topic_partition_list_new(1));
  rd_kafka_topic_partition_list_add(parts.get(), topic.c_str(), 0)->offset =
      RD_KAFKA_OFFSET_BEGINNING;
  rd_kafka_assign(consumer->get(), parts.get());
  const auto deadline =
      std::chrono::steady_clock::now() +
      absl::ToChronoSeconds(testing::Scaled(absl::Seconds(30)));
  while (std::chrono::steady_clock::now() < deadline) {
    RdKafkaMessagePtr m(rd_kafka_consumer_poll(consumer->get(), 200));
    if (!m) continue;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      if (out.size() >= at_least) break;
      continue;
    }
    if (m->err) continue;
    TopicMessage message;
    if (m->key != nullptr) {
      message.key.assign(static_cast<const char*>(m->key), m->key_len);
    }
    if (m->payload != nullptr) {
      message.payload.assign(static_cast<const char*>(m->payload), m->len);
    }
    rd_kafka_headers_t* headers = nullptr;
    if (rd_kafka_message_headers(m.get(), &headers) ==
        RD_KAFKA_RESP_ERR_NO_ERROR) {
      const char* name = nullptr;
      const void* value = nullptr;
      size_t size = 0;
      for (size_t i = 0;
           rd_kafka_header_get_all(headers, i, &name, &value, &size) ==
           RD_KAFKA_RESP_ERR_NO_ERROR;
           ++i) {
        message.headers.emplace_back(
            name, value == nullptr
                      ? std::string()
                      : std::string(static_cast<const char*>(value), size));
      }
    }
    out.push_back(std::move(message));
  }
  rd_kafka_consumer_close(consumer->get());
  return out;
}

// The header `bubblewatch.error` of each message of `topic` (partition 0),
// once at least `expected` are there.
inline std::vector<std::string> ReadErrorHeaders(const std::string& topic,
                                                 size_t expected) {
  std::vector<std::string> reasons;
  for (const TopicMessage& m : ReadTopicMessages(topic, expected)) {
    reasons.push_back(m.LastHeader("bubblewatch.error"));
  }
  return reasons;
}

// Every window published to `topic` (all partitions, from the beginning to
// the end as of now), in the order read.
inline std::vector<WindowSummary> ReadWindowsTopic(
    const std::string& topic, const std::string& brokers = Brokers()) {
  std::vector<WindowSummary> out;
  KafkaConfig config(brokers);
  config.Set("group.id", topic + "-reader");  // assign() wants one.
  config.Set("enable.auto.commit", "false");
  config.Set("enable.partition.eof", "true");
  absl::StatusOr<RdKafkaPtr> consumer =
      NewKafkaClient(RD_KAFKA_CONSUMER, config);
  EXPECT_TRUE(consumer.ok()) << consumer.status();
  if (!consumer.ok()) return out;
  absl::StatusOr<int> partitions =
      TopicPartitionCount(consumer->get(), topic, absl::Seconds(30));
  EXPECT_TRUE(partitions.ok()) << partitions.status();
  if (!partitions.ok()) return out;
  RdKafkaPartitionListPtr parts(rd_kafka_topic_partition_list_new(*partitions));
  for (int p = 0; p < *partitions; ++p) {
    rd_kafka_topic_partition_list_add(parts.get(), topic.c_str(), p)->offset =
        RD_KAFKA_OFFSET_BEGINNING;
  }
  rd_kafka_assign(consumer->get(), parts.get());
  int at_end = 0;
  auto deadline = std::chrono::steady_clock::now() +
                  absl::ToChronoSeconds(testing::Scaled(absl::Seconds(60)));
  while (at_end < *partitions && std::chrono::steady_clock::now() < deadline) {
    RdKafkaMessagePtr m(rd_kafka_consumer_poll(consumer->get(), 200));
    if (!m) continue;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      ++at_end;
      continue;
    }
    if (m->err) continue;
    absl::StatusOr<WindowSummary> w =
        DecodeWindowSummary({static_cast<const char*>(m->payload), m->len});
    EXPECT_TRUE(w.ok()) << w.status();
    if (w.ok()) out.push_back(*std::move(w));
  }
  EXPECT_EQ(at_end, *partitions) << "did not reach the end of " << topic;
  rd_kafka_consumer_close(consumer->get());
  return out;
}

// The consumer group's committed offset for each partition of `topic` that
// has one.
inline std::vector<std::pair<int32_t, int64_t>> GroupOffsets(
    const std::string& topic, const std::string& group,
    const std::string& brokers = Brokers()) {
  KafkaConfig config(brokers);
  config.Set("group.id", group);
  absl::StatusOr<RdKafkaPtr> consumer =
      NewKafkaClient(RD_KAFKA_CONSUMER, config);
  EXPECT_TRUE(consumer.ok()) << consumer.status();
  std::vector<std::pair<int32_t, int64_t>> out;
  if (!consumer.ok()) return out;
  RdKafkaPartitionListPtr parts(rd_kafka_topic_partition_list_new(16));
  for (int32_t p = 0; p < 16; ++p) {
    rd_kafka_topic_partition_list_add(parts.get(), topic.c_str(), p);
  }
  EXPECT_EQ(rd_kafka_committed(consumer->get(), parts.get(), 10'000),
            RD_KAFKA_RESP_ERR_NO_ERROR);
  for (int i = 0; i < parts->cnt; ++i) {
    if (parts->elems[i].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
        parts->elems[i].offset >= 0) {
      out.emplace_back(parts->elems[i].partition, parts->elems[i].offset);
    }
  }
  rd_kafka_consumer_close(consumer->get());
  return out;
}

// After a store fault: nothing moved past what the store at `store` holds.
// Every committed group offset of `topic` is at or below the store's resume
// offset for its partition (printed, so a run shows how far each got).
inline void ExpectGroupOffsetsWithinStoredProgress(const std::string& store,
                                                   const std::string& topic,
                                                   const std::string& group) {
  absl::StatusOr<std::unique_ptr<WindowStoreReader>> reader =
      OpenRocksDbWindowStoreReadOnly(store);
  ASSERT_TRUE(reader.ok()) << reader.status();
  for (auto [partition, offset] : GroupOffsets(topic, group)) {
    absl::StatusOr<std::optional<PartitionProgress>> progress =
        (*reader)->Progress(topic, partition);
    ASSERT_TRUE(progress.ok()) << progress.status();
    if (!progress->has_value()) {
      ADD_FAILURE() << "partition " << partition << ": group offset " << offset
                    << " but no progress in the store";
      continue;
    }
    EXPECT_LE(offset, (*progress)->resume_offset) << "partition " << partition;
    std::cout << "partition " << partition << ": group offset " << offset
              << ", store resume offset " << (*progress)->resume_offset
              << ", committed position " << (*progress)->committed_position
              << "\n";
  }
}

// True when one of `a` and `b` is the idle timeout and the other a close
// in partition order (end marker, observation): the same close, decided on
// wall time by one instance and on the events by another (an instance that
// idled a job and published its windows, then was killed before its commit,
// and the replay that closed the job at its marker).
inline bool IdleOrInOrder(WindowSummary::ClosedBy a,
                          WindowSummary::ClosedBy b) {
  using C = WindowSummary::ClosedBy;
  auto in_order = [](C c) {
    return c == C::kEndMarker || c == C::kObservationEnd;
  };
  return (a == C::kIdleTimeout && in_order(b)) ||
         (b == C::kIdleTimeout && in_order(a));
}

// The union of several sets of windows keyed by (job, window start), in key
// order. A key seen twice with different values (a conflicting duplicate:
// two instances, or a replay, disagreeing about a window) is a test failure;
// identical duplicates are fine (idempotent upserts, at-least-once output),
// and so are duplicates that differ only in closed_by as IdleOrInOrder
// allows (the analysis is the same: both closes end each device at its last
// kernel).
inline std::vector<WindowSummary> UnionWithoutConflicts(
    const std::vector<std::vector<WindowSummary>>& sets,
    const std::string& what) {
  absl::btree_map<std::pair<std::string, int64_t>, WindowSummary> merged;
  for (const std::vector<WindowSummary>& set : sets) {
    for (const WindowSummary& w : set) {
      auto [it, inserted] = merged.try_emplace({w.job, w.window.start_ns}, w);
      if (inserted) continue;
      const WindowSummary* other = &w;
      WindowSummary relabeled;
      if (IdleOrInOrder(it->second.closed_by, w.closed_by)) {
        relabeled = w;
        relabeled.closed_by = it->second.closed_by;
        other = &relabeled;
      }
      std::string diff;
      if (!SameWindow(it->second, *other, &diff)) {
        ADD_FAILURE() << what << ": conflicting duplicates of " << w.job
                      << " window " << w.window.start_ns << ": " << diff;
      }
    }
  }
  std::vector<WindowSummary> out;
  for (auto& [key, w] : merged) out.push_back(std::move(w));
  return out;
}

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_TESTS_PROCESSOR_PROCESSOR_KAFKA_TEST_UTIL_H_
