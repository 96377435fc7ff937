// Owning smart pointers for librdkafka's C handles, so that every handle has
// exactly one owner and is destroyed on every path.
#ifndef BUBBLEWATCH_KAFKA_KAFKA_HANDLES_H_
#define BUBBLEWATCH_KAFKA_KAFKA_HANDLES_H_

#include <librdkafka/rdkafka.h>

#include <memory>

namespace bubblewatch {

struct RdKafkaDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
  void operator()(rd_kafka_conf_t* conf) const { rd_kafka_conf_destroy(conf); }
  void operator()(rd_kafka_topic_t* rkt) const { rd_kafka_topic_destroy(rkt); }
  void operator()(rd_kafka_message_t* message) const {
    rd_kafka_message_destroy(message);
  }
  void operator()(rd_kafka_topic_partition_list_t* list) const {
    rd_kafka_topic_partition_list_destroy(list);
  }
  void operator()(rd_kafka_error_t* error) const {
    rd_kafka_error_destroy(error);
  }
  void operator()(const rd_kafka_metadata_t* metadata) const {
    rd_kafka_metadata_destroy(metadata);
  }
};

// A client (producer or consumer). Destroying a producer does not wait for
// undelivered messages: flush first.
using RdKafkaPtr = std::unique_ptr<rd_kafka_t, RdKafkaDeleter>;
using RdKafkaConfPtr = std::unique_ptr<rd_kafka_conf_t, RdKafkaDeleter>;
// A topic handle; must be destroyed before its client.
using RdKafkaTopicPtr = std::unique_ptr<rd_kafka_topic_t, RdKafkaDeleter>;
using RdKafkaMessagePtr = std::unique_ptr<rd_kafka_message_t, RdKafkaDeleter>;
using RdKafkaPartitionListPtr =
    std::unique_ptr<rd_kafka_topic_partition_list_t, RdKafkaDeleter>;
using RdKafkaErrorPtr = std::unique_ptr<rd_kafka_error_t, RdKafkaDeleter>;
using RdKafkaMetadataPtr =
    std::unique_ptr<const rd_kafka_metadata_t, RdKafkaDeleter>;

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_KAFKA_KAFKA_HANDLES_H_
