// StreamProcessorOptions: everything `bubblewatch process` configures in
// the streaming runtime (docs/process.md has the flags). Apart from
// stream_processor.h so that the runtime's units (processor/README.md) read
// their settings without depending on the Kafka loop that wires them.
#ifndef BUBBLEWATCH_PROCESSOR_PROCESSOR_OPTIONS_H_
#define BUBBLEWATCH_PROCESSOR_PROCESSOR_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "processor/batch_validator.h"
#include "processor/commit_observer.h"
#include "processor/job_windower.h"
#include "processor/partition_limits.h"

namespace bubblewatch {

struct StreamProcessorOptions {
  std::string brokers;
  std::string topic = "bubblewatch.events";
  std::string group = "bubblewatch";
  std::string windows_topic = "bubblewatch.windows";  // "" = don't publish.
  // The windows topic's max.message.bytes when known beforehand; 0: read
  // it from the broker at start (docs/semantics.md#windows-that-do-not-fit).
  // The demo sets it: librdkafka's mock cluster never answers
  // DescribeConfigs, which would cost a timeout and a warning.
  int64_t windows_topic_max_bytes = 0;
  // Where split units publish their window parts (stage 1 of a job split
  // across processors: docs/architecture.md#one-job-across-processors),
  // key = the job, value = EncodeHostWindowPart; deleted after retention,
  // not compacted (keys are jobs). Must not be empty.
  std::string parts_topic = "bubblewatch.window-parts";
  std::string dlq_topic = "bubblewatch.events.dlq";
  // Compacted changelog of per-partition state ("" = none: a partition then
  // moves to another instance with its offset only, as in a single-instance
  // deployment).
  std::string state_topic = "bubblewatch.processor.state";
  // librdkafka properties (-X key=value), for both consumer and producer.
  std::vector<std::string> kafka_properties;
  WindowerOptions windower;
  BatchLimits limits;
  // Open windows per job, jobs per input partition (partition_limits.h).
  ProcessorLimits state_limits;
  // A job whose newest event lies this far (event time) behind the newest
  // event of its partition, and that has no open window, is forgotten: it
  // no longer counts towards state_limits.max_jobs_per_partition. A batch
  // it sends later starts it afresh (with the local store's record of its
  // finalized edge, when there is one).
  absl::Duration job_expiry = absl::Hours(6);
  // A job whose hosts' newest events lie this far apart (clock skew or
  // delivery delay; JobWindower::HostSkewNs) is logged with a warning and
  // gets a series on /metrics. 0 = never.
  absl::Duration skew_warning = absl::Seconds(30);
  // A multi-rank job whose producers all sent their end markers but fewer
  // of its ranks than its world size waits for the others this long, on
  // its partition's event-time clock from the last marker, before it ends
  // (docs/semantics.md#job-lifecycle, "Multi-rank jobs").
  absl::Duration rank_grace = absl::Minutes(10);
  // A job (and a host within it) silent this long, in wall time, is closed.
  absl::Duration idle_timeout = absl::Seconds(30);
  // A producer (id) whose newest event lies this far behind its job's
  // finalized edge (event time) is forgotten; a batch it resends later only
  // counts as late events. Bounds the job state when producers come and go
  // (the watcher uses one producer id per trace file).
  absl::Duration producer_expiry = absl::Hours(1);
  // Windows older than this (event time, per job) are deleted.
  absl::Duration retention = absl::Hours(6);
  // How often progress is committed when no window closes.
  absl::Duration commit_interval = absl::Seconds(1);
  // How often a progress line is logged.
  absl::Duration log_interval = absl::Seconds(10);
  // If > 0: Run returns once no message arrived for this long and every job
  // has been closed (for tests, batch jobs and the demo).
  absl::Duration exit_when_idle = absl::ZeroDuration();
  // Optional; must outlive the processor. Sees every batch before it is
  // committed and may add to it (alerts: processor/commit_observer.h).
  CommitObserver* observer = nullptr;

  // kInvalidArgument listing every problem (a missing broker list or topic,
  // a window, limit, expiry or interval out of range, nested ones named
  // "windower.window_ns" etc.); Create calls it.
  absl::Status Validate() const;
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_PROCESSOR_PROCESSOR_OPTIONS_H_
