// What the windower tests of multi-rank jobs share: ranks' streams cut into
// batches as the producer cuts them and interleaved as a broker would, one
// windower over them, the oracle's cut of a window, and the TP2×DP2×PP4
// job that the split-job tests (docs/architecture.md#one-job-across-
// processors) stream once whole and once host by host.
#ifndef BUBBLEWATCH_TESTS_PROCESSOR_WINDOWER_STREAMS_H_
#define BUBBLEWATCH_TESTS_PROCESSOR_WINDOWER_STREAMS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ingest/synthetic/synthetic_parallel_job.h"
#include "processor/job_windower.h"
#include "schemas/event_batch_codec.h"
#include "schemas/trace.h"
#include "schemas/window_summary.h"

namespace bubblewatch::testing {

// One rank's (or one host's) stream.
struct StreamSource {
  Trace trace;
  std::string host;
  int32_t rank = -1;
};

// Every source cut into batches of `max_events` of job "job", decoded (and
// validated) as the processor decodes them, in the order a broker would
// interleave the streams: by each batch's first event start (ties: by
// source), neighbours swapped at random (a third of them, by `seed`).
std::vector<DecodedBatch> InterleavedBatches(
    const std::vector<StreamSource>& sources, int64_t max_events,
    uint32_t seed);

// The windows of `batches` through one windower of job "job" (no event
// late, every host active), the rest closed as the idle timeout closes
// them; expects no late collective record and no collective error.
std::vector<WindowSummary> StreamWindows(
    const std::vector<DecodedBatch>& batches, const WindowerOptions& options);

// The oracle's cut: the events of `t` that start in [start, end).
Trace CutTrace(const Trace& t, int64_t start, int64_t end);

// The sources' events that start in [start, end), one trace per source with
// any, as the windower makes them (pairs numbered over the whole stream, as
// the producer numbers them; rank ids applied); `labels` receives each
// one's label ("host/rank"), as the windower labels its sources.
std::vector<Trace> WindowTraces(const std::vector<StreamSource>& sources,
                                int64_t start, int64_t end,
                                std::vector<std::string>* labels);

// A TP2×DP2×PP4 job (16 ranks, 8 hosts) whose send/recv kernels name
// Megatron's pipeline group, 12 steps, its hosts' clocks milliseconds apart.
ParallelJobOptions PipelineJobOptions();

// The split-job tests' job: PipelineJobOptions with drifting clocks and two
// roots planted (rank 9's compute, rank 2's data loading); `host_names`:
// 8 hosts of 2 ranks, else 16 ranks that name no host.
ParallelJobOptions SplitJobOptions(bool host_names);

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_PROCESSOR_WINDOWER_STREAMS_H_
