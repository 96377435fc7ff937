// EmbeddedKafkaCluster: librdkafka's built-in mock Kafka cluster, running
// inside this process, for `--brokers embedded` (the demo) and fast unit
// tests. Every delivery guarantee is tested against a real broker instead
// (ctest label `kafka`): the mock implements produce, fetch, metadata,
// consumer groups and idempotent producer ids, but no admin API, SSL, SASL or
// read_committed isolation, and it keeps everything in memory.
//
// Usage: create one cluster and give bootstrap_servers() to every client
// (unlike librdkafka's `test.mock.num.brokers`, which gives each client a
// private cluster that no other client can see).
//
// Thread safety: all methods may be called from any thread.
#ifndef BUBBLEWATCH_KAFKA_EMBEDDED_KAFKA_CLUSTER_H_
#define BUBBLEWATCH_KAFKA_EMBEDDED_KAFKA_CLUSTER_H_

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kafka/kafka_handles.h"

namespace bubblewatch {

class EmbeddedKafkaCluster {
 public:
  // Starts a cluster of `num_brokers` brokers (ids 1..num_brokers) listening
  // on ephemeral 127.0.0.1 ports. REQUIRES: num_brokers >= 1.
  // Returns kInternal if librdkafka cannot start it.
  static absl::StatusOr<std::unique_ptr<EmbeddedKafkaCluster>> Create(
      int num_brokers = 1);

  // Stops the cluster. Clients still connected to it see their brokers go
  // down; destroy them first.
  ~EmbeddedKafkaCluster();

  EmbeddedKafkaCluster(const EmbeddedKafkaCluster&) = delete;
  EmbeddedKafkaCluster& operator=(const EmbeddedKafkaCluster&) = delete;

  // "127.0.0.1:port,..." for clients' bootstrap.servers.
  const std::string& bootstrap_servers() const { return bootstrap_servers_; }

  // Creates `topic` with `partitions` partitions. The mock has no admin API,
  // so this is the way to get a topic with more than the default partitions.
  // Returns kAlreadyExists if it exists, kInvalidArgument for bad counts.
  absl::Status CreateTopic(absl::string_view topic, int partitions,
                           int replication_factor = 1);

  // Takes broker `broker_id` down (connections drop, new ones are refused)
  // or brings it back, to test retries. Returns kNotFound for an unknown id.
  absl::Status SetBrokerDown(int32_t broker_id);
  absl::Status SetBrokerUp(int32_t broker_id);

 private:
  EmbeddedKafkaCluster(RdKafkaPtr owner, rd_kafka_mock_cluster_t* cluster);

  // The mock cluster runs on this client's background thread.
  RdKafkaPtr owner_;
  rd_kafka_mock_cluster_t* cluster_;  // Owned; destroyed before owner_.
  std::string bootstrap_servers_;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_KAFKA_EMBEDDED_KAFKA_CLUSTER_H_
