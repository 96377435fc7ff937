#include "cli/embedded_pipeline.h"

#include <utility>

#include "absl/time/time.h"
#include "ingest/trace_replay.h"
#include "kafka/kafka_config.h"

namespace bubblewatch {

absl::StatusOr<EmbeddedPipeline> StartEmbeddedPipeline(int partitions) {
  absl::StatusOr<std::unique_ptr<EmbeddedKafkaCluster>> cluster =
      EmbeddedKafkaCluster::Create();
  if (!cluster.ok()) return cluster.status();
  EmbeddedPipeline pipeline;
  pipeline.cluster = *std::move(cluster);
  for (const std::string& name :
       {pipeline.topic, StreamProcessorOptions().state_topic,
        StreamProcessorOptions().windows_topic,
        StreamProcessorOptions().parts_topic}) {
    if (absl::Status s = pipeline.cluster->CreateTopic(name, partitions);
        !s.ok()) {
      return s;
    }
  }
  return pipeline;
}

absl::StatusOr<ProducerStats> ProduceToEmbeddedPipeline(
    const EmbeddedPipeline& pipeline,
    const std::vector<std::unique_ptr<BatchedTrace>>& streams) {
  absl::StatusOr<std::unique_ptr<EventProducer>> producer =
      EventProducer::Create(KafkaConfig(pipeline.cluster->bootstrap_servers()),
                            EventProducerOptions{.topic = pipeline.topic});
  if (!producer.ok()) return producer.status();
  std::vector<BatchedTrace*> ptrs;
  for (const auto& s : streams) ptrs.push_back(s.get());
  if (absl::Status s = ReplayTraces(ptrs, producer->get(), ReplayOptions{});
      !s.ok()) {
    return s;
  }
  if (absl::Status s = (*producer)->Flush(absl::Seconds(30)); !s.ok()) {
    return s;
  }
  return (*producer)->stats();
}

StreamProcessorOptions EmbeddedProcessorOptions(
    const EmbeddedPipeline& pipeline) {
  StreamProcessorOptions options;
  options.brokers = pipeline.cluster->bootstrap_servers();
  options.topic = pipeline.topic;
  options.kafka_properties = {"fetch.wait.max.ms=10",
                              "fetch.message.max.bytes=4194304"};
  options.windows_topic_max_bytes = 1'000'000;
  return options;
}

}  // namespace bubblewatch
