// BrokerHealth: whether the Kafka broker can be reached, as the consumer
// sees it, and whether a refusal means the configuration is wrong.
//
// Silence while the broker cannot be reached says nothing about the jobs.
// So an outage (NoteDown: the consumer's error callback saying all brokers
// are down, or a flush not acknowledged for 2 s) lasts until a probe (a
// ListOffsets request, at most once a second) reaches the broker again;
// meanwhile the processor counts as not caught up (no job or host is idle,
// `--exit-when-idle` waits), and once the broker is back every idle period
// starts afresh (the caller restarts the windowers' idle timers), giving
// producers a whole idle timeout to reconnect and resend.
//
// Until the broker first accepted the consumer (NoteReached: an assignment,
// a message or an end of partition), a refusal is the configuration, not an
// outage (StartupRefusal): an error KafkaErrorCode maps to
// kUnauthenticated (_AUTHENTICATION, _SSL, SASL errors) at once, a
// transport error carrying librdkafka's security.protocol mismatch diagnosis
// the second time it comes (one drop may be a broker restarting
// mid-handshake). Later the same errors are an outage.
//
// Thread safety: Run's thread only (librdkafka serves the error callback
// from the consumer's poll).
#ifndef BUBBLEWATCH_PROCESSOR_BROKER_HEALTH_H_
#define BUBBLEWATCH_PROCESSOR_BROKER_HEALTH_H_

#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace bubblewatch {

class BrokerHealth {
 public:
  // A client-level error of the consumer (its error callback): logged as
  // librdkafka logs them without a callback; an unreachable broker starts
  // an outage. Returns the error Run must stop with (a fatal error, a
  // refusal at startup), else OK.
  absl::Status OnClientError(rd_kafka_t* consumer, int err, const char* reason);
  // An error the consumer returned instead of a message (not a fatal one:
  // the caller checks that first). `text` is its status message, logged
  // with a warning. Returns the startup refusal Run must stop with, else
  // OK; an unreachable broker starts an outage at `now`.
  absl::Status OnConsumeError(rd_kafka_resp_err_t err,
                              const absl::Status& status, absl::Time now);

  // The broker accepted the consumer: from now on refusals are outages.
  void NoteReached() { reached_broker_ = true; }
  // Starts an outage that began at `since` (no-op during one).
  void NoteDown(absl::Time since, absl::string_view why);
  bool down() const { return down_; }

  // During an outage, at most once a second: asks the leader of
  // `any_partition` of `topic` for its offsets (none assigned: no job to
  // protect, the outage just ends). Returns the time the broker answered
  // when this probe ended the outage, else nullopt.
  std::optional<absl::Time> Probe(absl::Time now, rd_kafka_t* consumer,
                                  const std::string& topic,
                                  std::optional<int32_t> any_partition);

 private:
  // Until reached_broker_, an error that says the broker never will accept
  // this configuration (see the top); the status Run stops with, else OK.
  absl::Status StartupRefusal(rd_kafka_resp_err_t err,
                              absl::string_view reason);

  bool reached_broker_ = false;
  int protocol_mismatches_ = 0;  // Seen before reached_broker_.
  bool down_ = false;
  absl::Time down_since_;
  absl::Time last_probe_ = absl::InfinitePast();
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_BROKER_HEALTH_H_
