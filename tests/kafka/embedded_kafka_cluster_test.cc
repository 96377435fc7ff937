#include "kafka/embedded_kafka_cluster.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "kafka/kafka_config.h"
#include "tests/testing/topic_reader.h"

namespace bubblewatch {
namespace {

TEST(EmbeddedKafkaCluster, ServesProduceAndFetchOnLoopback) {
  auto cluster = EmbeddedKafkaCluster::Create(/*num_brokers=*/3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string& bootstrap = (*cluster)->bootstrap_servers();
  EXPECT_TRUE(absl::StrContains(bootstrap, "127.0.0.1:")) << bootstrap;
  ASSERT_TRUE((*cluster)->CreateTopic("t", /*partitions=*/3).ok());
  EXPECT_EQ((*cluster)->CreateTopic("t", 3).code(),
            absl::StatusCode::kAlreadyExists);

  auto producer = NewKafkaClient(RD_KAFKA_PRODUCER, KafkaConfig(bootstrap));
  ASSERT_TRUE(producer.ok()) << producer.status();
  for (int i = 0; i < 10; ++i) {
    std::string value = "v" + std::to_string(i);
    ASSERT_EQ(rd_kafka_producev(producer->get(), RD_KAFKA_V_TOPIC("t"),
                                RD_KAFKA_V_KEY("k", 1),
                                RD_KAFKA_V_VALUE(value.data(), value.size()),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                RD_KAFKA_V_END),
              RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  ASSERT_EQ(rd_kafka_flush(producer->get(), 10000), RD_KAFKA_RESP_ERR_NO_ERROR);

  auto messages = testing::ReadTopic(bootstrap, "t", 10, absl::Seconds(20));
  ASSERT_TRUE(messages.ok()) << messages.status();
  ASSERT_EQ(messages->size(), 10u);
  // One key, one partition, in order.
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ((*messages)[i].value, "v" + std::to_string(i));
    EXPECT_EQ((*messages)[i].partition, (*messages)[0].partition);
  }
}

TEST(EmbeddedKafkaCluster, BrokersGoDownAndUp) {
  auto cluster = EmbeddedKafkaCluster::Create(1);
  ASSERT_TRUE(cluster.ok());
  EXPECT_TRUE((*cluster)->SetBrokerDown(1).ok());
  EXPECT_TRUE((*cluster)->SetBrokerUp(1).ok());
  EXPECT_EQ((*cluster)->SetBrokerDown(7).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*cluster)->CreateTopic("x", 0).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace bubblewatch
