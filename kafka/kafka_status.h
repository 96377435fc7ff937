// Conversion of librdkafka errors to absl::Status: the one boundary where
// Kafka's error codes become ours.
#ifndef BUBBLEWATCH_KAFKA_KAFKA_STATUS_H_
#define BUBBLEWATCH_KAFKA_KAFKA_STATUS_H_

#include <librdkafka/rdkafka.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace bubblewatch {

// The canonical code for a librdkafka error:
//   kUnavailable       transport, broker down, leader moving, not enough
//                      replicas: worth retrying;
//   kDeadlineExceeded  local or request timeouts (message.timeout.ms expired);
//   kResourceExhausted the local queue is full;
//   kNotFound          unknown topic or partition;
//   kPermissionDenied  authorization failures;
//   kUnauthenticated   SSL/SASL authentication failures;
//   kInvalidArgument   bad configuration, message too large, invalid record;
//   kFailedPrecondition wrong state (e.g. a fenced or fatal idempotent
//   producer); kAborted           the client is being destroyed or a fatal
//   error occurred; kUnknown           anything else.
absl::StatusCode KafkaErrorCode(rd_kafka_resp_err_t err);

// Returns OK for RD_KAFKA_RESP_ERR_NO_ERROR, otherwise a status with
// KafkaErrorCode(err) and the message "<context>: <librdkafka text>
// (<error name>)". `context` says what was being done ("producing to topic
// t"); it may be empty.
absl::Status KafkaErrorToStatus(rd_kafka_resp_err_t err,
                                absl::string_view context);

// The same for a librdkafka error object (transactional and admin APIs,
// rd_kafka_fatal_error). Does not take ownership; `error` may be null (OK).
absl::Status KafkaErrorToStatus(const rd_kafka_error_t* error,
                                absl::string_view context);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_KAFKA_KAFKA_STATUS_H_
