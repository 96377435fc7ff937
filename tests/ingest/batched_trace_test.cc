#include "ingest/batched_trace.h"

#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ingest/synthetic/synthetic_straggler.h"
#include "ingest/trace_reader.h"
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

// One observation per stream (docs/semantics.md#observations): every batch
// and the end marker carry it, id = the producer id, interval = the
// trace's covered time; an identity that brings its own keeps it.
TEST(BatchedTrace, EveryBatchCarriesTheStreamsObservation) {
  BatchedTrace batched(Interleaved(25), Identity(), {.max_events = 7});
  const ObservationInfo want{
      .id = batched.header().producer_id, .start_ns = 0, .end_ns = 10 * 24 + 8};
  for (size_t i = 0; i <= batched.num_batches(); ++i) {
    absl::StatusOr<DecodedBatch> decoded =
        DecodeEventBatch(i < batched.num_batches() ? batched.Encode(i)
                                                   : batched.EncodeEndMarker());
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->header.observation, want) << i;
  }
  BatchHeader given = Identity();
  given.observation = ObservationInfo{.id = 9, .start_ns = -1, .end_ns = 999};
  EXPECT_EQ(BatchedTrace(Interleaved(5), given, {}).header().observation,
            given.observation);
  EXPECT_FALSE(
      BatchedTrace(Trace(), Identity(), {}).header().observation.has_value())
      << "no events, nothing observed";
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

// A collective record with its names resolved, comparable across tables.
using Resolved = std::tuple<int64_t, int64_t, int32_t, int32_t, std::string,
                            std::string, std::string, std::string, std::string,
                            int64_t, int64_t, int64_t, int32_t>;

Resolved Resolve(const Trace& t, const CollectiveKernel& c) {
  auto name = [&](NameId id) {
    return id == kNoName ? std::string("<absent>") : std::string(t.Name(id));
  };
  return {c.start_ns,
          c.end_ns,
          c.device,
          c.stream,
          name(c.kernel_name),
          name(c.collective),
          name(c.process_group),
          name(c.group_ranks),
          name(c.dtype),
          c.seq,
          c.in_elements,
          c.out_elements,
          c.group_size};
}

std::vector<Resolved> ResolveAll(const Trace& t) {
  std::vector<Resolved> out;
  for (const CollectiveKernel& c : t.collectives) out.push_back(Resolve(t, c));
  std::sort(out.begin(), out.end());
  return out;
}

// Sends `trace` through BatchedTrace and decodes every batch. Each decoded
// record must sit in the batch of its kernel; returns all records.
std::vector<Resolved> RoundTripCollectives(const Trace& trace,
                                           int64_t max_events,
                                           size_t* batches_with_records) {
  BatchHeader identity = Identity();
  identity.rank = trace.rank;
  BatchedTrace batched(trace, identity, {.max_events = max_events});
  std::vector<Resolved> out;
  int64_t events = 0;
  *batches_with_records = 0;
  for (size_t i = 0; i < batched.num_batches(); ++i) {
    absl::StatusOr<DecodedBatch> d = DecodeEventBatch(batched.Encode(i));
    if (!d.ok()) {
      ADD_FAILURE() << "batch " << i << ": " << d.status();
      return {};
    }
    const Trace& t = d->trace;
    events += static_cast<int64_t>(t.gpu.size() + t.cpu.size());
    *batches_with_records += !t.collectives.empty();
    for (const CollectiveKernel& c : t.collectives) {
      const bool has_kernel =
          std::any_of(t.gpu.begin(), t.gpu.end(), [&](const GpuActivity& a) {
            return a.start_ns == c.start_ns && a.end_ns == c.end_ns &&
                   a.device == c.device && a.stream == c.stream &&
                   t.Name(a.name) == t.Name(c.kernel_name);
          });
      EXPECT_TRUE(has_kernel) << "batch " << i << ": a record without its "
                              << "kernel, start " << c.start_ns;
      out.push_back(Resolve(t, c));
    }
  }
  EXPECT_EQ(events, static_cast<int64_t>(trace.gpu.size() + trace.cpu.size()));
  std::sort(out.begin(), out.end());
  return out;
}

// The real trace: 21 collectives of process group "0" without Seq, cut into
// many batches; every record arrives, with its kernel, as read.
TEST(BatchedTrace, CollectivesOfARealTraceRoundTrip) {
  absl::StatusOr<Trace> trace = ReadTraceFile(
      absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/real/hta/nccl_data.json.gz"));
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->collectives.size(), 21u);
  size_t batches_with_records = 0;
  EXPECT_EQ(RoundTripCollectives(*trace, 256, &batches_with_records),
            ResolveAll(*trace));
  EXPECT_GT(batches_with_records, 1u);
}

// The synthetic straggler job sets every field (Seq included) on every rank.
TEST(BatchedTrace, CollectivesOfSyntheticRanksRoundTrip) {
  StragglerJob job = MakeStragglerJob(
      {.ranks = 4, .ranks_per_host = 2, .steps = 30, .late_rank = 2});
  for (const Trace& rank : job.ranks) {
    ASSERT_EQ(rank.collectives.size(), 30u);
    size_t batches_with_records = 0;
    EXPECT_EQ(RoundTripCollectives(rank, 100, &batches_with_records),
              ResolveAll(rank))
        << "rank " << rank.rank;
    EXPECT_GT(batches_with_records, 5u);
  }
}

TEST(BatchedTrace, RecordsGoWithTheirKernelEvenAmongEqualStarts) {
  // Kernels at 0, 10, ... on stream 0, each with a collective twin of the
  // same start on stream 2, cut one event per batch: a record must follow
  // its twin, not the first kernel of its start.
  Trace t = Interleaved(6);
  NameInterner names(&t);
  const NameId nccl = names.Intern("ncclDevKernel_AllGather_RING_LL");
  for (int i = 0; i < 6; ++i) {
    t.gpu.push_back(GpuActivity{
        .start_ns = 10 * i, .end_ns = 10 * i + 8, .name = nccl, .stream = 2});
    t.collectives.push_back(CollectiveKernel{.start_ns = 10 * i,
                                             .end_ns = 10 * i + 8,
                                             .stream = 2,
                                             .kernel_name = nccl,
                                             .seq = i});
  }
  std::reverse(t.collectives.begin(), t.collectives.end());
  size_t batches_with_records = 0;
  EXPECT_EQ(RoundTripCollectives(t, 1, &batches_with_records), ResolveAll(t));
  EXPECT_EQ(batches_with_records, 6u);
}

TEST(BatchedTrace, ARecordWithoutItsKernelStillTravels) {
  Trace t = Interleaved(10);
  NameInterner names(&t);
  t.collectives.push_back(CollectiveKernel{
      .start_ns = 42, .end_ns = 43, .kernel_name = names.Intern("ncclX")});
  BatchedTrace batched(t, Identity(), {.max_events = 4});
  int found = 0;
  for (size_t i = 0; i < batched.num_batches(); ++i) {
    absl::StatusOr<DecodedBatch> d = DecodeEventBatch(batched.Encode(i));
    ASSERT_TRUE(d.ok()) << d.status();
    if (d->trace.collectives.empty()) continue;
    ++found;
    // The batch whose time range holds its start: [40, 60).
    EXPECT_LE(batched.batch(i).first_start_ns, 42);
    EXPECT_GE(batched.batch(i).last_start_ns, 42);
  }
  EXPECT_EQ(found, 1);
}

TEST(BatchedTrace, ProducerIdDependsOnCollectiveRecords) {
  StragglerJob job = MakeStragglerJob({.ranks = 2, .steps = 5, .late_rank = 1});
  Trace with = job.ranks[0];
  const uint64_t id = BatchedTrace(with, Identity(), {}).header().producer_id;
  Trace other_seq = with;
  other_seq.collectives[3].seq += 100;
  EXPECT_NE(BatchedTrace(other_seq, Identity(), {}).header().producer_id, id);
  Trace without = with;
  without.collectives.clear();
  EXPECT_NE(BatchedTrace(without, Identity(), {}).header().producer_id, id);
}

TEST(BatchedTrace, EmptyTraceHasNoBatches) {
  BatchedTrace batched(Trace(), Identity(), {});
  EXPECT_EQ(batched.num_batches(), 0u);
  EXPECT_EQ(batched.num_events(), 0);
}

}  // namespace
}  // namespace bubblewatch
