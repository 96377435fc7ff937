#include "kafka/kafka_status.h"

#include "absl/strings/str_cat.h"
#include "kafka/kafka_config.h"

namespace bubblewatch {

absl::StatusCode KafkaErrorCode(rd_kafka_resp_err_t err) {
  switch (err) {
    case RD_KAFKA_RESP_ERR_NO_ERROR:
      return absl::StatusCode::kOk;
    case RD_KAFKA_RESP_ERR__TRANSPORT:
    case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
    case RD_KAFKA_RESP_ERR__RESOLVE:
    case RD_KAFKA_RESP_ERR__NODE_UPDATE:
    case RD_KAFKA_RESP_ERR__WAIT_COORD:
    case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
    case RD_KAFKA_RESP_ERR_BROKER_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_REPLICA_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION:
    case RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS:
    case RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_NOT_COORDINATOR:
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS:
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
    case RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR:
    case RD_KAFKA_RESP_ERR_NOT_CONTROLLER:
      return absl::StatusCode::kUnavailable;
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE:
    case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
      return absl::StatusCode::kDeadlineExceeded;
    case RD_KAFKA_RESP_ERR__QUEUE_FULL:
      return absl::StatusCode::kResourceExhausted;
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
      return absl::StatusCode::kNotFound;
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
      return absl::StatusCode::kPermissionDenied;
    case RD_KAFKA_RESP_ERR__AUTHENTICATION:
    case RD_KAFKA_RESP_ERR__SSL:
    case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
    case RD_KAFKA_RESP_ERR_ILLEGAL_SASL_STATE:
    case RD_KAFKA_RESP_ERR_UNSUPPORTED_SASL_MECHANISM:
      return absl::StatusCode::kUnauthenticated;
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_INVALID_MSG:
    case RD_KAFKA_RESP_ERR_INVALID_CONFIG:
    case RD_KAFKA_RESP_ERR_INVALID_REQUIRED_ACKS:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
      return absl::StatusCode::kInvalidArgument;
    case RD_KAFKA_RESP_ERR__STATE:
    case RD_KAFKA_RESP_ERR__FENCED:
    case RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER:
    case RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID:
    case RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH:
    case RD_KAFKA_RESP_ERR_PRODUCER_FENCED:
    case RD_KAFKA_RESP_ERR__GAPLESS_GUARANTEE:
      return absl::StatusCode::kFailedPrecondition;
    case RD_KAFKA_RESP_ERR__DESTROY:
    case RD_KAFKA_RESP_ERR__FATAL:
    case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
    case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
      return absl::StatusCode::kAborted;
    default:
      return absl::StatusCode::kUnknown;
  }
}

absl::Status KafkaErrorToStatus(rd_kafka_resp_err_t err,
                                absl::string_view context) {
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return absl::OkStatus();
  return absl::Status(
      KafkaErrorCode(err),
      absl::StrCat(context, context.empty() ? "" : ": ", rd_kafka_err2str(err),
                   " (", rd_kafka_err2name(err), ")"));
}

absl::Status KafkaErrorToStatus(const rd_kafka_error_t* error,
                                absl::string_view context) {
  if (error == nullptr) return absl::OkStatus();
  const rd_kafka_resp_err_t err = rd_kafka_error_code(error);
  absl::StatusCode code = KafkaErrorCode(err);
  // A fatal error ends the client whatever its code says.
  if (rd_kafka_error_is_fatal(error)) code = absl::StatusCode::kAborted;
  // The error string is librdkafka's free text, which may quote a value.
  return absl::Status(
      code, absl::StrCat(context, context.empty() ? "" : ": ",
                         RedactKafkaSecrets(rd_kafka_error_string(error)), " (",
                         rd_kafka_error_name(error), ")"));
}

}  // namespace bubblewatch
