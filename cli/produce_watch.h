// `bubblewatch produce --watch DIR`: the long-running mode of produce, which
// follows a directory and sends each finished trace file once (see
// ingest/watch/trace_watcher.h). Split from produce_command.cc, which parses
// the flags shared by all modes.
#ifndef BUBBLEWATCH_CLI_PRODUCE_WATCH_H_
#define BUBBLEWATCH_CLI_PRODUCE_WATCH_H_

#include <string>

#include "absl/time/time.h"
#include "ingest/batched_trace.h"
#include "ingest/event_producer.h"
#include "kafka/kafka_config.h"

namespace bubblewatch {

struct ProduceWatchFlags {
  std::string dir;
  std::string job;
  std::string job_from_name;  // Empty: the default pattern.
  int rank = -1;
  std::string host;
  std::string after_send = "keep";
  std::string reject_dir;
  std::string state_dir;
  absl::Duration settle = absl::Seconds(2);
  absl::Duration incomplete_timeout = absl::Minutes(5);
  absl::Duration poll_interval = absl::Seconds(1);
  bool no_inotify = false;
  // TraceWatcherOptions::max_file_bytes / max_file_events.
  int64_t max_file_bytes = int64_t{2} << 30;
  int64_t max_file_events = 5'000'000;
  BatchingOptions batching;
  int split_ranks = 0;  // TraceWatcherOptions::split_ranks.
  absl::Duration timeout = absl::Seconds(30);
  // TraceWatcherOptions::inspector_pool and inspector_pool_idle.
  absl::Duration inspector_pool_expire = absl::Seconds(30);
  absl::Duration inspector_pool_lag = absl::Seconds(2);
  absl::Duration inspector_pool_idle = absl::Seconds(15);
};

// Runs until SIGTERM/SIGINT (exit 0), a fatal configuration error (exit 2,
// before anything is sent) or a failed delivery or state write (exit 1).
// `config` holds the brokers and -X properties.
int RunProduceWatch(const ProduceWatchFlags& flags, KafkaConfig config,
                    EventProducerOptions producer_options);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_CLI_PRODUCE_WATCH_H_
