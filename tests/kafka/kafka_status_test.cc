#include "kafka/kafka_status.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;

TEST(KafkaStatus, NoErrorIsOk) {
  EXPECT_TRUE(KafkaErrorToStatus(RD_KAFKA_RESP_ERR_NO_ERROR, "x").ok());
  EXPECT_TRUE(
      KafkaErrorToStatus(static_cast<const rd_kafka_error_t*>(nullptr), "x")
          .ok());
}

TEST(KafkaStatus, MapsFamiliesToCanonicalCodes) {
  EXPECT_EQ(KafkaErrorCode(RD_KAFKA_RESP_ERR__TRANSPORT),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(KafkaErrorCode(RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(KafkaErrorCode(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(KafkaErrorCode(RD_KAFKA_RESP_ERR__QUEUE_FULL),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(KafkaErrorCode(RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(KafkaErrorCode(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(KafkaErrorCode(RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(KafkaErrorCode(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KafkaErrorCode(RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(KafkaErrorCode(RD_KAFKA_RESP_ERR__FATAL),
            absl::StatusCode::kAborted);
}

TEST(KafkaStatus, MessageHasContextTextAndName) {
  absl::Status s =
      KafkaErrorToStatus(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, "sending batch 3");
  EXPECT_THAT(s.message(), HasSubstr("sending batch 3: "));
  EXPECT_THAT(s.message(), HasSubstr("_MSG_TIMED_OUT"));
}

TEST(KafkaStatus, FatalErrorObjectsAreAborted) {
  rd_kafka_error_t* error =
      rd_kafka_error_new(RD_KAFKA_RESP_ERR__TRANSPORT, "link down");
  absl::Status s = KafkaErrorToStatus(error, "ctx");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("link down"));
  rd_kafka_error_destroy(error);
}

}  // namespace
}  // namespace bubblewatch
