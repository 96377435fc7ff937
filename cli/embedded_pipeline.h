// The embedded pipeline that `bubblewatch demo` runs on, and tools that
// need a real store without a broker (tests/cli/make_straggler_store.cc):
// librdkafka's mock cluster with the events topic and the processor's
// state and windows topics (the mock has no CreateTopics API, so they are
// made here, as an operator would), the producer sending batched streams
// to it, and the processor options its slow fetches need.
#ifndef BUBBLEWATCH_CLI_EMBEDDED_PIPELINE_H_
#define BUBBLEWATCH_CLI_EMBEDDED_PIPELINE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ingest/batched_trace.h"
#include "ingest/event_producer.h"
#include "kafka/embedded_kafka_cluster.h"
#include "processor/stream_processor.h"

namespace bubblewatch {

struct EmbeddedPipeline {
  std::unique_ptr<EmbeddedKafkaCluster> cluster;
  std::string topic = "bubblewatch.events";
};

// Starts the mock cluster and creates the three topics with `partitions`
// partitions each.
absl::StatusOr<EmbeddedPipeline> StartEmbeddedPipeline(int partitions);

// Sends every stream (ReplayTraces, interleaved by event time) to the
// pipeline's events topic and waits up to 30 s for their acknowledgements;
// the producer's counters after.
absl::StatusOr<ProducerStats> ProduceToEmbeddedPipeline(
    const EmbeddedPipeline& pipeline,
    const std::vector<std::unique_ptr<BatchedTrace>>& streams);

// Processor options for the pipeline: its brokers and topic, fetches that
// do not wait on the mock's slow, uneven partitions, and the windows
// topic's limit (the mock has no topic configs to read). Idle timeouts and
// the rest are the caller's.
StreamProcessorOptions EmbeddedProcessorOptions(
    const EmbeddedPipeline& pipeline);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_CLI_EMBEDDED_PIPELINE_H_
