// MaterializerStatus: how far the store of `bubblewatch serve --brokers` is
// behind the windows topic (and the processors' state topic) it materializes
// (serve/window_materializer.h), for /healthz and /metrics. Kept apart from
// window_materializer.h so that the HTTP server and the metrics page do not
// depend on Kafka.
#ifndef BUBBLEWATCH_SERVE_MATERIALIZER_STATUS_H_
#define BUBBLEWATCH_SERVE_MATERIALIZER_STATUS_H_

#include <cstdint>
#include <optional>
#include <string>

namespace bubblewatch {

struct MaterializerStatus {
  std::string topic;
  // Partitions followed; 0 until the topic's metadata was read (e.g. the
  // topic does not exist yet).
  int32_t partitions = 0;
  // Offsets behind, summed over the partitions: high watermark minus the
  // next offset the store holds progress for. Offsets, not records: on a
  // compacted topic some offsets behind may hold nothing. nullopt until the
  // high watermark of every partition is known.
  std::optional<int64_t> lag_messages;
  // Since start: windows written (new or replacing a version), windows
  // deleted by a tombstone, messages skipped because they are not windows
  // (a key or value that does not decode, or that disagree).
  int64_t windows_applied = 0;
  int64_t windows_deleted = 0;
  int64_t invalid_messages = 0;

  // The processors' state topic, when followed (empty: not), as above.
  std::string state_topic;
  int32_t state_partitions = 0;
  std::optional<int64_t> state_lag_messages;
  // Since start: partition snapshots applied; ignored because a snapshot
  // with a higher committed position was applied before (a fenced-out
  // owner's late write); messages skipped because they are not snapshots.
  int64_t snapshots_applied = 0;
  int64_t snapshots_superseded = 0;
  int64_t state_invalid_messages = 0;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SERVE_MATERIALIZER_STATUS_H_
