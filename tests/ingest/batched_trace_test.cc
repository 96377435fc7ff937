#include "ingest/batched_trace.h"

#include <set>

#include "gtest/gtest.h"
#include "schemas/event_batch_codec.h"

namespace bubblewatch {
namespace {

// Kernels at 0, 10, 20, ... and CPU calls at 5, 15, 25, ..., given out of
// order so that batching has to sort.
Trace Interleaved(int n) {
  Trace t;
  NameInterner names(&t);
  const NameId kernel = names.Intern("ampere_sgemm_128x64_tn");
  const NameId launch = names.Intern("cudaLaunchKernel");
  for (int i = n - 1; i >= 0; --i) {
    t.gpu.push_back(GpuActivity{.start_ns = 10 * i,
                                .end_ns = 10 * i + 8,
                                .correlation = static_cast<uint64_t>(i + 1),
                                .name = kernel});
    t.cpu.push_back(CpuEvent{.start_ns = 10 * i + 5,
                             .end_ns = 10 * i + 6,
                             .correlation = static_cast<uint64_t>(i + 100),
                             .thread = 1,
                             .name = launch,
                             .category = CpuEventCategory::kCudaRuntime});
  }
  return t;
}

BatchHeader Identity(const std::string& job = "job-a") {
  BatchHeader h;
  h.job = job;
  h.host = "node-1";
  h.rank = 3;
  h.world_size = 8;
  return h;
}

TEST(BatchedTrace, CutsByCountAndInterleavesByTime) {
  BatchedTrace batched(Interleaved(10), Identity(), {.max_events = 4});
  ASSERT_EQ(batched.num_batches(), 5u);  // 20 events.
  // Batch 0: kernel 0, call 5, kernel 10, call 15.
  EXPECT_EQ(batched.batch(0).events(), 4);
  EXPECT_EQ(batched.batch(0).first_start_ns, 0);
  EXPECT_EQ(batched.batch(0).last_start_ns, 15);
  EXPECT_EQ(batched.batch(0).gpu_end - batched.batch(0).gpu_begin, 2u);
  int64_t previous_last = -1;
  for (size_t i = 0; i < batched.num_batches(); ++i) {
    EXPECT_GT(batched.batch(i).first_start_ns, previous_last);
    previous_last = batched.batch(i).last_start_ns;
  }
}

TEST(BatchedTrace, SpanLimitCutsEarlier) {
  BatchedTrace batched(Interleaved(10), Identity(),
                       {.max_events = 100, .max_span_ns = 30});
  // [0, 30), [30, 60), [60, 90), [90, 100).
  ASSERT_EQ(batched.num_batches(), 4u);
  EXPECT_EQ(batched.batch(0).events(), 6);
  EXPECT_EQ(batched.batch(3).events(), 2);
}

TEST(BatchedTrace, EncodedBatchesCarryEveryEventOnceWithSequenceNumbers) {
  Trace original = Interleaved(25);
  BatchedTrace batched(original, Identity(), {.max_events = 7});
  std::set<uint64_t> correlations;
  for (size_t i = 0; i < batched.num_batches(); ++i) {
    absl::StatusOr<DecodedBatch> decoded = DecodeEventBatch(batched.Encode(i));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->header.job, "job-a");
    EXPECT_EQ(decoded->header.host, "node-1");
    EXPECT_EQ(decoded->header.rank, 3);
    EXPECT_EQ(decoded->header.world_size, 8);
    EXPECT_EQ(decoded->header.sequence, i);
    EXPECT_EQ(decoded->header.producer_id, batched.header().producer_id);
    for (const GpuActivity& a : decoded->trace.gpu) {
      EXPECT_TRUE(correlations.insert(a.correlation).second);
      EXPECT_EQ(decoded->trace.Name(a.name), "ampere_sgemm_128x64_tn");
    }
    for (const CpuEvent& e : decoded->trace.cpu) {
      EXPECT_TRUE(correlations.insert(e.correlation).second);
    }
  }
  EXPECT_EQ(correlations.size(), 50u);
}

TEST(BatchedTrace, ProducerIdIsStableAndDependsOnContentAndIdentity) {
  const uint64_t id =
      BatchedTrace(Interleaved(5), Identity(), {}).header().producer_id;
  EXPECT_NE(id, 0u);
  EXPECT_EQ(BatchedTrace(Interleaved(5), Identity(), {}).header().producer_id,
            id);
  EXPECT_NE(BatchedTrace(Interleaved(6), Identity(), {}).header().producer_id,
            id);
  EXPECT_NE(
      BatchedTrace(Interleaved(5), Identity("job-b"), {}).header().producer_id,
      id);
  EXPECT_NE(BatchedTrace(Interleaved(5), Identity(), {.max_events = 3})
                .header()
                .producer_id,
            id);
  BatchHeader fixed = Identity();
  fixed.producer_id = 42;
  EXPECT_EQ(BatchedTrace(Interleaved(5), fixed, {}).header().producer_id, 42u);
}

TEST(BatchedTrace, EmptyTraceHasNoBatches) {
  BatchedTrace batched(Trace(), Identity(), {});
  EXPECT_EQ(batched.num_batches(), 0u);
  EXPECT_EQ(batched.num_events(), 0);
}

}  // namespace
}  // namespace bubblewatch
