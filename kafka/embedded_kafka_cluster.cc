#include "kafka/embedded_kafka_cluster.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_status.h"

namespace bubblewatch {

absl::StatusOr<std::unique_ptr<EmbeddedKafkaCluster>>
EmbeddedKafkaCluster::Create(int num_brokers) {
  if (num_brokers < 1) {
    return absl::InvalidArgumentError("an embedded cluster needs a broker");
  }
  // The owning client never connects anywhere: it only lends its thread.
  KafkaConfig config("");
  config.Set("client.id", "bubblewatch-embedded-cluster");
  // Without bootstrap servers it would note so at every start.
  config.Set("log_level", "4");
  absl::StatusOr<RdKafkaPtr> owner = NewKafkaClient(RD_KAFKA_PRODUCER, config);
  if (!owner.ok()) {
    return absl::InternalError(absl::StrCat(
        "cannot start the embedded Kafka cluster: ", owner.status().message()));
  }
  rd_kafka_mock_cluster_t* cluster =
      rd_kafka_mock_cluster_new(owner->get(), num_brokers);
  if (cluster == nullptr) {
    return absl::InternalError(
        "cannot start the embedded Kafka cluster (librdkafka mock cluster)");
  }
  return std::unique_ptr<EmbeddedKafkaCluster>(
      new EmbeddedKafkaCluster(*std::move(owner), cluster));
}

EmbeddedKafkaCluster::EmbeddedKafkaCluster(RdKafkaPtr owner,
                                           rd_kafka_mock_cluster_t* cluster)
    : owner_(std::move(owner)),
      cluster_(cluster),
      bootstrap_servers_(rd_kafka_mock_cluster_bootstraps(cluster)) {}

EmbeddedKafkaCluster::~EmbeddedKafkaCluster() {
  rd_kafka_mock_cluster_destroy(cluster_);
}

absl::Status EmbeddedKafkaCluster::CreateTopic(absl::string_view topic,
                                               int partitions,
                                               int replication_factor) {
  if (partitions < 1 || replication_factor < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("topic ", topic,
                     ": need at least one partition and "
                     "replica, got ",
                     partitions, " and ", replication_factor));
  }
  const std::string name(topic.data(), topic.size());
  rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(
      cluster_, name.c_str(), partitions, replication_factor);
  if (err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
    return absl::AlreadyExistsError(absl::StrCat("topic ", name, " exists"));
  }
  return KafkaErrorToStatus(err, absl::StrCat("creating topic ", name));
}

absl::Status EmbeddedKafkaCluster::SetBrokerDown(int32_t broker_id) {
  rd_kafka_resp_err_t err = rd_kafka_mock_broker_set_down(cluster_, broker_id);
  if (err == RD_KAFKA_RESP_ERR__UNKNOWN_BROKER ||
      err == RD_KAFKA_RESP_ERR_BROKER_NOT_AVAILABLE) {
    return absl::NotFoundError(absl::StrCat("no embedded broker ", broker_id));
  }
  return KafkaErrorToStatus(err,
                            absl::StrCat("taking broker ", broker_id, " down"));
}

absl::Status EmbeddedKafkaCluster::SetBrokerUp(int32_t broker_id) {
  rd_kafka_resp_err_t err = rd_kafka_mock_broker_set_up(cluster_, broker_id);
  if (err == RD_KAFKA_RESP_ERR__UNKNOWN_BROKER ||
      err == RD_KAFKA_RESP_ERR_BROKER_NOT_AVAILABLE) {
    return absl::NotFoundError(absl::StrCat("no embedded broker ", broker_id));
  }
  return KafkaErrorToStatus(err,
                            absl::StrCat("bringing broker ", broker_id, " up"));
}

}  // namespace bubblewatch
