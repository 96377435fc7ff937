#include "processor/broker_health.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kafka/kafka_config.h"
#include "kafka/kafka_status.h"
#include "spdlog/spdlog.h"

namespace bubblewatch {
namespace {

// While the broker is unreachable: how often it is probed, and how long a
// probe waits.
constexpr absl::Duration kProbeInterval = absl::Seconds(1);
constexpr int kProbeTimeoutMs = 500;

// Consumer errors that mean the broker cannot be reached right now. One
// connection failing (RD_KAFKA_RESP_ERR__TRANSPORT) is not enough: brokers
// close idle connections, and with several brokers the others still serve
// (a partition whose leader died waits for the election, seconds, well
// within an idle timeout).
bool IsBrokerUnreachable(rd_kafka_resp_err_t err) {
  return err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN;
}

// Text of librdkafka 2.0's own diagnosis of a security.protocol mismatch, in
// a transport error (RD_KAFKA_RESP_ERR__TRANSPORT): a PLAINTEXT client whose
// first request a TLS listener dropped, or a TLS handshake a PLAINTEXT
// listener dropped. A broker that is merely down refuses the connection
// instead ("Connection refused").
bool IsProtocolMismatch(absl::string_view reason) {
  return absl::StrContains(reason,
                           "might be caused by incorrect security.protocol") ||
         absl::StrContains(reason, "connecting to a PLAINTEXT broker listener");
}

}  // namespace

absl::Status BrokerHealth::OnClientError(rd_kafka_t* consumer, int err,
                                         const char* reason) {
  const auto code = static_cast<rd_kafka_resp_err_t>(err);
  if (code == RD_KAFKA_RESP_ERR__FATAL) {
    char fatal[512];
    const rd_kafka_resp_err_t original =
        rd_kafka_fatal_error(consumer, fatal, sizeof(fatal));
    return KafkaErrorToStatus(
        original,
        absl::StrCat("consumer failed for good: ", RedactKafkaSecrets(fatal)));
  }
  // librdkafka's reason is free text that may quote a property's value.
  const std::string why = RedactKafkaSecrets(reason);
  if (absl::Status refused = StartupRefusal(code, why); !refused.ok()) {
    return refused;  // Run's error line says it all.
  }
  spdlog::warn("librdkafka {} ERROR: {}", rd_kafka_name(consumer), why);
  if (IsBrokerUnreachable(code)) {
    NoteDown(absl::Now(), rd_kafka_err2str(code));
  }
  return absl::OkStatus();
}

absl::Status BrokerHealth::OnConsumeError(rd_kafka_resp_err_t err,
                                          const absl::Status& status,
                                          absl::Time now) {
  if (absl::Status refused = StartupRefusal(err, status.message());
      !refused.ok()) {
    return refused;
  }
  if (IsBrokerUnreachable(err)) NoteDown(now, rd_kafka_err2str(err));
  spdlog::warn("{}", status.ToString());
  return absl::OkStatus();
}

absl::Status BrokerHealth::StartupRefusal(rd_kafka_resp_err_t err,
                                          absl::string_view reason) {
  if (reached_broker_) return absl::OkStatus();
  const bool unauthenticated =
      KafkaErrorCode(err) == absl::StatusCode::kUnauthenticated;
  if (!unauthenticated) {
    // One drop in the handshake may be a broker restarting at that moment;
    // the same drop on the reconnect (librdkafka reports it again within
    // about a second) is the configuration.
    if (err != RD_KAFKA_RESP_ERR__TRANSPORT || !IsProtocolMismatch(reason) ||
        ++protocol_mismatches_ < 2) {
      return absl::OkStatus();
    }
  }
  return absl::Status(
      unauthenticated ? absl::StatusCode::kUnauthenticated
                      : absl::StatusCode::kFailedPrecondition,
      absl::StrCat("the Kafka broker refused the connection at startup (",
                   rd_kafka_err2name(err), "): ", reason,
                   "; check -X security.protocol and the sasl.*/ssl.* "
                   "properties against the broker's listener"));
}

void BrokerHealth::NoteDown(absl::Time since, absl::string_view why) {
  if (down_) return;
  down_ = true;
  down_since_ = since;
  last_probe_ = absl::Now();
  spdlog::warn(
      "broker unreachable ({}): no job is closed for idleness until it is "
      "back",
      std::string(why));
}

std::optional<absl::Time> BrokerHealth::Probe(
    absl::Time now, rd_kafka_t* consumer, const std::string& topic,
    std::optional<int32_t> any_partition) {
  if (!down_ || now - last_probe_ < kProbeInterval) return std::nullopt;
  last_probe_ = now;
  // Any partition will do: its leader answering means the broker is back
  // (with several brokers, at least one of them is). With none assigned
  // there is no job to protect.
  if (any_partition) {
    int64_t low = 0, high = 0;
    if (rd_kafka_query_watermark_offsets(
            consumer, topic.c_str(), *any_partition, &low, &high,
            kProbeTimeoutMs) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return std::nullopt;
    }
  }
  down_ = false;
  const absl::Time back = absl::Now();
  spdlog::warn("broker reachable again after {}; idle timeouts start afresh",
               absl::FormatDuration(
                   absl::Trunc(back - down_since_, absl::Milliseconds(1))));
  return back;
}

}  // namespace bubblewatch
