#include "schemas/event_batch_codec.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schemas/event_batch_generated.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;

Trace SampleTrace() {
  Trace t;
  NameInterner names(&t);
  t.gpu.push_back(GpuActivity{.start_ns = 1'700'000'000'000'000'123,
                              .end_ns = 1'700'000'000'000'900'000,
                              .correlation = 42,
                              .bytes = 0,
                              .name = names.Intern("ampere_sgemm"),
                              .device = 3,
                              .stream = 7,
                              .kind = GpuActivityKind::kKernel});
  t.gpu.push_back(GpuActivity{.start_ns = 5,
                              .end_ns = 9,
                              .correlation = 43,
                              .bytes = 4096,
                              .name = names.Intern("Memcpy DtoH"),
                              .device = 3,
                              .stream = 9,
                              .kind = GpuActivityKind::kMemcpy,
                              .pageable = true});
  t.cpu.push_back(CpuEvent{.start_ns = 1,
                           .end_ns = 2,
                           .correlation = 42,
                           .thread = 0xabcdef0123,
                           .name = names.Intern("cudaLaunchKernel"),
                           .category = CpuEventCategory::kCudaRuntime});
  t.cpu.push_back(CpuEvent{.start_ns = 0,
                           .end_ns = 10,
                           .thread = 7,
                           .name = names.Intern("unused-by-batch-2"),
                           .category = CpuEventCategory::kCpuOp});
  return t;
}

BatchHeader Header() {
  return BatchHeader{.job = "job-a",
                     .host = "host-1",
                     .rank = 3,
                     .world_size = 8,
                     .producer_id = 0x1234,
                     .sequence = 17};
}

// The trace of tests/testdata/eventbatch/v1_before_collectives.bweb.
Trace PreCollectivesTrace() {
  Trace t;
  NameInterner names(&t);
  const int64_t base = 1'767'225'600'000'000'000;
  t.gpu.push_back(GpuActivity{.start_ns = base + 1'000,
                              .end_ns = base + 51'000,
                              .correlation = 11,
                              .name = names.Intern("ampere_sgemm_128x64_tn"),
                              .device = 0,
                              .stream = 7,
                              .kind = GpuActivityKind::kKernel});
  t.gpu.push_back(GpuActivity{
      .start_ns = base + 52'000,
      .end_ns = base + 90'000,
      .correlation = 12,
      .name =
          names.Intern("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, "
                       "unsigned long, ncclWork*)"),
      .device = 0,
      .stream = 23,
      .kind = GpuActivityKind::kKernel});
  t.gpu.push_back(
      GpuActivity{.start_ns = base + 91'000,
                  .end_ns = base + 99'000,
                  .correlation = 13,
                  .bytes = 1 << 20,
                  .name = names.Intern("Memcpy HtoD (Pinned -> Device)"),
                  .device = 0,
                  .stream = 9,
                  .kind = GpuActivityKind::kMemcpy});
  t.gpu.push_back(GpuActivity{.start_ns = base + 99'500,
                              .end_ns = base + 99'700,
                              .bytes = 4096,
                              .name = names.Intern("Memset (Device)"),
                              .device = 0,
                              .stream = 9,
                              .kind = GpuActivityKind::kMemset,
                              .pageable = true});
  t.cpu.push_back(CpuEvent{.start_ns = base,
                           .end_ns = base + 600,
                           .correlation = 11,
                           .thread = 4242,
                           .name = names.Intern("cudaLaunchKernel"),
                           .category = CpuEventCategory::kCudaRuntime});
  t.cpu.push_back(CpuEvent{.start_ns = base - 5'000,
                           .end_ns = base + 100'000,
                           .thread = 4242,
                           .name = names.Intern("ProfilerStep#3"),
                           .category = CpuEventCategory::kUserAnnotation});
  return t;
}

BatchHeader PreCollectivesHeader() {
  return BatchHeader{.job = "fixture-job",
                     .host = "host-a",
                     .rank = 1,
                     .world_size = 2,
                     .producer_id = 0xfeedbeef,
                     .sequence = 5};
}

// A collective record with its names resolved against its trace's table, so
// records from tables of different order compare equal.
struct ResolvedCollective {
  int64_t start_ns, end_ns;
  int32_t device, stream;
  std::string kernel_name, collective, process_group, group_ranks, dtype;
  int64_t seq, in_elements, out_elements;
  int32_t group_size;
  bool operator==(const ResolvedCollective&) const = default;
};

std::string OptionalName(const Trace& t, NameId id) {
  return id == kNoName ? "<absent>" : std::string(t.Name(id));
}

ResolvedCollective Resolve(const Trace& t, const CollectiveKernel& c) {
  return ResolvedCollective{c.start_ns,
                            c.end_ns,
                            c.device,
                            c.stream,
                            std::string(t.Name(c.kernel_name)),
                            OptionalName(t, c.collective),
                            OptionalName(t, c.process_group),
                            OptionalName(t, c.group_ranks),
                            OptionalName(t, c.dtype),
                            c.seq,
                            c.in_elements,
                            c.out_elements,
                            c.group_size};
}

// SampleTrace plus a collective kernel with every field and one with none.
Trace TraceWithCollectives() {
  Trace t = SampleTrace();
  NameInterner names(&t);
  const NameId nccl = names.Intern(
      "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, "
      "ncclWork*)");
  t.gpu.push_back(GpuActivity{.start_ns = 100,
                              .end_ns = 900,
                              .correlation = 44,
                              .name = nccl,
                              .device = 3,
                              .stream = 21,
                              .kind = GpuActivityKind::kKernel});
  t.collectives.push_back(
      CollectiveKernel{.start_ns = 100,
                       .end_ns = 900,
                       .device = 3,
                       .stream = 21,
                       .kernel_name = nccl,
                       .collective = names.Intern("allreduce"),
                       .process_group = names.Intern("0"),
                       .group_ranks = names.Intern("[0, 1, 2, 3]"),
                       .dtype = names.Intern("Float"),
                       .seq = 7,
                       .in_elements = 1 << 20,
                       .out_elements = 1 << 20,
                       .group_size = 4});
  t.gpu.push_back(GpuActivity{.start_ns = 1000,
                              .end_ns = 1500,
                              .correlation = 45,
                              .name = nccl,
                              .device = 3,
                              .stream = 21,
                              .kind = GpuActivityKind::kKernel});
  // Only the kernel: every optional field absent.
  t.collectives.push_back(CollectiveKernel{.start_ns = 1000,
                                           .end_ns = 1500,
                                           .device = 3,
                                           .stream = 21,
                                           .kernel_name = nccl});
  return t;
}

std::string TestdataPath(absl::string_view name) {
  return absl::StrCat(BUBBLEWATCH_TESTDATA_DIR, "/eventbatch/", name);
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(EventBatchCodec, RoundTripsEveryField) {
  Trace t = SampleTrace();
  EventBatchEncoder encoder(&t);
  std::span<const uint8_t> bytes = encoder.Encode(Header(), 0, 2, 0, 2);
  std::vector<uint8_t> copy(bytes.begin(), bytes.end());
  absl::StatusOr<DecodedBatch> batch = DecodeEventBatch(copy);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->header.job, "job-a");
  EXPECT_EQ(batch->header.host, "host-1");
  EXPECT_EQ(batch->header.rank, 3);
  EXPECT_EQ(batch->header.world_size, 8);
  EXPECT_EQ(batch->header.producer_id, 0x1234u);
  EXPECT_EQ(batch->header.sequence, 17u);
  const Trace& d = batch->trace;
  ASSERT_EQ(d.gpu.size(), 2u);
  ASSERT_EQ(d.cpu.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(d.gpu[i].start_ns, t.gpu[i].start_ns);
    EXPECT_EQ(d.gpu[i].end_ns, t.gpu[i].end_ns);
    EXPECT_EQ(d.gpu[i].correlation, t.gpu[i].correlation);
    EXPECT_EQ(d.gpu[i].bytes, t.gpu[i].bytes);
    EXPECT_EQ(d.gpu[i].device, t.gpu[i].device);
    EXPECT_EQ(d.gpu[i].stream, t.gpu[i].stream);
    EXPECT_EQ(d.gpu[i].kind, t.gpu[i].kind);
    EXPECT_EQ(d.gpu[i].pageable, t.gpu[i].pageable);
    EXPECT_EQ(d.Name(d.gpu[i].name), t.Name(t.gpu[i].name));
    EXPECT_EQ(d.cpu[i].start_ns, t.cpu[i].start_ns);
    EXPECT_EQ(d.cpu[i].end_ns, t.cpu[i].end_ns);
    EXPECT_EQ(d.cpu[i].correlation, t.cpu[i].correlation);
    EXPECT_EQ(d.cpu[i].thread, t.cpu[i].thread);
    EXPECT_EQ(d.cpu[i].category, t.cpu[i].category);
    EXPECT_EQ(d.Name(d.cpu[i].name), t.Name(t.cpu[i].name));
  }
}

TEST(EventBatchCodec, BatchCarriesOnlyTheNamesItUses) {
  Trace t = SampleTrace();
  EventBatchEncoder encoder(&t);
  std::span<const uint8_t> bytes = encoder.Encode(Header(), 1, 2, 0, 1);
  absl::StatusOr<DecodedBatch> batch = DecodeEventBatch(bytes);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->trace.names.size(), 2u);
  // A second batch from the same encoder starts a fresh table.
  bytes = encoder.Encode(Header(), 0, 0, 1, 2);
  batch = DecodeEventBatch(bytes);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->trace.names.size(), 1u);
  EXPECT_EQ(batch->trace.names[0], "unused-by-batch-2");
}

TEST(EventBatchCodec, GarbageFailsTheVerifier) {
  std::vector<uint8_t> garbage = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  absl::StatusOr<DecodedBatch> batch = DecodeEventBatch(garbage);
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(batch.status().message(), HasSubstr("verifier"));
}

TEST(EventBatchCodec, TruncatedMessageFailsTheVerifier) {
  Trace t = SampleTrace();
  EventBatchEncoder encoder(&t);
  std::span<const uint8_t> bytes = encoder.Encode(Header(), 0, 2, 0, 2);
  for (size_t cut : {size_t{0}, size_t{8}, bytes.size() / 2}) {
    EXPECT_FALSE(DecodeEventBatch(bytes.first(cut)).ok()) << cut;
  }
  // The trailing bytes may be alignment padding nothing reads; any cut must
  // still either fail cleanly or decode without reading out of bounds.
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    (void)DecodeEventBatch(bytes.first(cut)).ok();
  }
}

TEST(EventBatchCodec, UnknownSchemaVersionIsRejected) {
  flatbuffers::FlatBufferBuilder b;
  auto job = b.CreateString("j");
  fb::EventBatchBuilder eb(b);
  eb.add_schema_version(99);
  eb.add_job(job);
  fb::FinishEventBatchBuffer(b, eb.Finish());
  absl::StatusOr<DecodedBatch> batch =
      DecodeEventBatch({b.GetBufferPointer(), b.GetSize()});
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(batch.status().message(), HasSubstr("schema_version 99"));
}

TEST(EventBatchCodec, NameIndexOutsideTheTableIsRejected) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<fb::GpuActivity> gpu = {fb::GpuActivity(
      0, 1, 0, 0, /*name=*/5, 0, 0, fb::GpuActivityKind::Kernel, false)};
  auto gpu_vec = b.CreateVectorOfStructs(gpu);
  auto job = b.CreateString("j");
  fb::EventBatchBuilder eb(b);
  eb.add_job(job);
  eb.add_gpu(gpu_vec);
  fb::FinishEventBatchBuffer(b, eb.Finish());
  absl::StatusOr<DecodedBatch> batch =
      DecodeEventBatch({b.GetBufferPointer(), b.GetSize()});
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(batch.status().message(), HasSubstr("outside the string table"));
}

// Regression, found by the event_batch fuzzer (UBSan): a hostile vector
// offset that passes the Verifier but leaves the 8-byte CpuEvent structs
// 4-byte aligned (tests/fuzz/regressions/event_batch/misaligned_struct_vector).
TEST(EventBatchCodec, MisalignedEventVectorIsRejected) {
  std::string bytes;
  ASSERT_TRUE(absl::Base64Unescape(
      "IAAAAEJXRUIYABgAAAAEAAgAAAAAAAAAAAAMABAAFAAYAAAAaAAAAFwAAABIAAAADAAAAAQ"
      "AAAABAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA/P8AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
      "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAQAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
      "EAAABrAAAAAQAAAGgAAAAFAAAAam9iLWIAAAA=",
      &bytes));
  // 8-byte aligned, as the fuzzer had it.
  std::vector<uint64_t> aligned((bytes.size() + 7) / 8);
  std::memcpy(aligned.data(), bytes.data(), bytes.size());
  absl::StatusOr<DecodedBatch> batch = DecodeEventBatch(
      {reinterpret_cast<const uint8_t*>(aligned.data()), bytes.size()});
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(batch.status().message(), HasSubstr("misaligned"));
}

// Kafka hands payloads over at any address; a valid batch decodes from all.
TEST(EventBatchCodec, DecodesFromAnyAddress) {
  Trace t = SampleTrace();
  EventBatchEncoder encoder(&t);
  std::span<const uint8_t> bytes = encoder.Encode(Header(), 0, 2, 0, 2);
  std::vector<uint8_t> storage(bytes.size() + 8);
  for (size_t shift = 0; shift < 8; ++shift) {
    std::memcpy(storage.data() + shift, bytes.data(), bytes.size());
    absl::StatusOr<DecodedBatch> batch =
        DecodeEventBatch({storage.data() + shift, bytes.size()});
    ASSERT_TRUE(batch.ok()) << "shift " << shift << ": " << batch.status();
    ASSERT_EQ(batch->trace.gpu.size(), 2u);
    EXPECT_EQ(batch->trace.gpu[0].start_ns, t.gpu[0].start_ns);
    EXPECT_EQ(batch->trace.cpu[1].end_ns, t.cpu[1].end_ns);
  }
}

// Regression, found by the event_batch fuzzer's round trip: the builder
// leaves an empty struct vector unaligned, and the alignment check rejected
// batches with no GPU activities or no CPU events.
TEST(EventBatchCodec, BatchesWithAnEmptyEventVectorDecode) {
  Trace t = SampleTrace();
  EventBatchEncoder encoder(&t);
  for (auto [gpu_end, cpu_end] :
       {std::pair{0, 0}, std::pair{0, 2}, std::pair{2, 0}}) {
    std::span<const uint8_t> bytes =
        encoder.Encode(Header(), 0, gpu_end, 0, cpu_end);
    std::vector<uint64_t> aligned((bytes.size() + 7) / 8);
    std::memcpy(aligned.data(), bytes.data(), bytes.size());
    absl::StatusOr<DecodedBatch> batch = DecodeEventBatch(
        {reinterpret_cast<const uint8_t*>(aligned.data()), bytes.size()});
    ASSERT_TRUE(batch.ok())
        << gpu_end << "/" << cpu_end << ": " << batch.status();
    EXPECT_EQ(batch->trace.gpu.size(), static_cast<size_t>(gpu_end));
    EXPECT_EQ(batch->trace.cpu.size(), static_cast<size_t>(cpu_end));
  }
}

TEST(EventBatchCodec, StructsHaveTheDocumentedFixedSizes) {
  EXPECT_EQ(sizeof(fb::GpuActivity), 48u);
  EXPECT_EQ(sizeof(fb::CpuEvent), 40u);
  EXPECT_EQ(sizeof(fb::CollectiveKernel), 72u);
}

TEST(EventBatchCodec, CollectivesRoundTripWithAbsentFieldsAbsent) {
  Trace t = TraceWithCollectives();
  EventBatchEncoder encoder(&t);
  std::span<const uint8_t> bytes = encoder.Encode(
      Header(), 0, t.gpu.size(), 0, t.cpu.size(), 0, t.collectives.size());
  std::vector<uint8_t> copy(bytes.begin(), bytes.end());
  absl::StatusOr<DecodedBatch> batch = DecodeEventBatch(copy);
  ASSERT_TRUE(batch.ok()) << batch.status();
  const Trace& d = batch->trace;
  ASSERT_EQ(d.collectives.size(), t.collectives.size());
  for (size_t i = 0; i < t.collectives.size(); ++i) {
    EXPECT_TRUE(Resolve(d, d.collectives[i]) == Resolve(t, t.collectives[i]))
        << "collective #" << i;
  }
  // Absent names stay kNoName, not an index of some name.
  EXPECT_EQ(d.collectives[1].collective, kNoName);
  EXPECT_EQ(d.collectives[1].process_group, kNoName);
  EXPECT_EQ(d.collectives[1].seq, -1);
  EXPECT_EQ(d.collectives[1].group_size, -1);
  // The batch's table holds only the names it uses, once each: the kernel
  // name shared by both records crosses once.
  int nccl_names = 0;
  for (const std::string& n : d.names) nccl_names += n.starts_with("nccl");
  EXPECT_EQ(nccl_names, 1);
}

TEST(EventBatchCodec, CollectivesOfARangeOnly) {
  Trace t = TraceWithCollectives();
  EventBatchEncoder encoder(&t);
  std::span<const uint8_t> bytes =
      encoder.Encode(Header(), 0, t.gpu.size(), 0, 0, 1, 2);
  absl::StatusOr<DecodedBatch> batch =
      DecodeEventBatch(std::vector<uint8_t>(bytes.begin(), bytes.end()));
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->trace.collectives.size(), 1u);
  EXPECT_TRUE(Resolve(batch->trace, batch->trace.collectives[0]) ==
              Resolve(t, t.collectives[1]));
  // A name only the unsent record uses does not cross.
  for (const std::string& n : batch->trace.names) EXPECT_NE(n, "allreduce");
}

// Bytes written by the encoder before collective records existed (commit
// d502c14), from PreCollectivesTrace(): they still decode, with no records,
// and today's encoder writes the very same bytes for a trace without any.
TEST(EventBatchCodec, BatchesFromBeforeCollectivesStillDecode) {
  const std::vector<uint8_t> old_bytes =
      ReadBytes(TestdataPath("v1_before_collectives.bweb"));
  ASSERT_FALSE(old_bytes.empty());
  absl::StatusOr<DecodedBatch> batch = DecodeEventBatch(old_bytes);
  ASSERT_TRUE(batch.ok()) << batch.status();
  const Trace want = PreCollectivesTrace();
  const BatchHeader header = PreCollectivesHeader();
  EXPECT_EQ(batch->header.job, header.job);
  EXPECT_EQ(batch->header.host, header.host);
  EXPECT_EQ(batch->header.rank, header.rank);
  EXPECT_EQ(batch->header.world_size, header.world_size);
  EXPECT_EQ(batch->header.producer_id, header.producer_id);
  EXPECT_EQ(batch->header.sequence, header.sequence);
  // Written before the end marker existed too: no batch of it is one.
  EXPECT_FALSE(batch->header.end_of_stream);
  const Trace& d = batch->trace;
  EXPECT_TRUE(d.collectives.empty());
  ASSERT_EQ(d.gpu.size(), want.gpu.size());
  for (size_t i = 0; i < want.gpu.size(); ++i) {
    const GpuActivity& a = d.gpu[i];
    const GpuActivity& w = want.gpu[i];
    EXPECT_EQ(a.start_ns, w.start_ns);
    EXPECT_EQ(a.end_ns, w.end_ns);
    EXPECT_EQ(a.correlation, w.correlation);
    EXPECT_EQ(a.bytes, w.bytes);
    EXPECT_EQ(d.Name(a.name), want.Name(w.name));
    EXPECT_EQ(a.device, w.device);
    EXPECT_EQ(a.stream, w.stream);
    EXPECT_EQ(a.kind, w.kind);
    EXPECT_EQ(a.pageable, w.pageable);
  }
  ASSERT_EQ(d.cpu.size(), want.cpu.size());
  for (size_t i = 0; i < want.cpu.size(); ++i) {
    const CpuEvent& e = d.cpu[i];
    const CpuEvent& w = want.cpu[i];
    EXPECT_EQ(e.start_ns, w.start_ns);
    EXPECT_EQ(e.end_ns, w.end_ns);
    EXPECT_EQ(e.correlation, w.correlation);
    EXPECT_EQ(e.thread, w.thread);
    EXPECT_EQ(d.Name(e.name), want.Name(w.name));
    EXPECT_EQ(e.category, w.category);
  }
  EventBatchEncoder encoder(&want);
  std::span<const uint8_t> now =
      encoder.Encode(header, 0, want.gpu.size(), 0, want.cpu.size());
  EXPECT_TRUE(
      std::equal(now.begin(), now.end(), old_bytes.begin(), old_bytes.end()))
      << "a batch without collectives no longer encodes as before";
}

// The end marker: a batch without events whose flag survives the round
// trip; the same header without the flag is a different, shorter message
// (the flag is written only when set).
TEST(EventBatchCodec, EndMarkerRoundTrips) {
  const Trace want = PreCollectivesTrace();
  BatchHeader header = PreCollectivesHeader();
  EventBatchEncoder encoder(&want);
  std::span<const uint8_t> plain = encoder.Encode(header, 0, 0, 0, 0);
  const std::vector<uint8_t> plain_bytes(plain.begin(), plain.end());
  header.end_of_stream = true;
  std::span<const uint8_t> marker = encoder.Encode(header, 0, 0, 0, 0);
  const std::vector<uint8_t> marker_bytes(marker.begin(), marker.end());
  EXPECT_NE(plain_bytes, marker_bytes);
  absl::StatusOr<DecodedBatch> decoded = DecodeEventBatch(marker_bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->header.end_of_stream);
  EXPECT_EQ(decoded->header.sequence, header.sequence);
  EXPECT_EQ(decoded->header.producer_id, header.producer_id);
  EXPECT_TRUE(decoded->trace.gpu.empty());
  EXPECT_TRUE(decoded->trace.cpu.empty());
  absl::StatusOr<DecodedBatch> not_marker = DecodeEventBatch(plain_bytes);
  ASSERT_TRUE(not_marker.ok()) << not_marker.status();
  EXPECT_FALSE(not_marker->header.end_of_stream);
}

// An end marker as the encoder of the commit that added it wrote it
// (tests/testdata/eventbatch/v1_end_marker.bweb: PreCollectivesHeader with
// sequence 6, no events): it decodes as a marker, and today's encoder
// writes the very same bytes, so a processor of any later version reads
// the markers producers already sent.
TEST(EventBatchCodec, EndMarkerFixtureDecodesAndEncodesAsWritten) {
  const std::vector<uint8_t> old_bytes =
      ReadBytes(TestdataPath("v1_end_marker.bweb"));
  ASSERT_FALSE(old_bytes.empty());
  absl::StatusOr<DecodedBatch> batch = DecodeEventBatch(old_bytes);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_TRUE(batch->header.end_of_stream);
  EXPECT_EQ(batch->header.job, "fixture-job");
  EXPECT_EQ(batch->header.producer_id, 0xfeedbeefu);
  EXPECT_EQ(batch->header.sequence, 6u);
  EXPECT_TRUE(batch->trace.gpu.empty());
  EXPECT_TRUE(batch->trace.cpu.empty());
  const Trace trace = PreCollectivesTrace();
  BatchHeader header = PreCollectivesHeader();
  header.end_of_stream = true;
  header.sequence = 6;
  EventBatchEncoder encoder(&trace);
  std::span<const uint8_t> now = encoder.Encode(header, 0, 0, 0, 0);
  EXPECT_TRUE(
      std::equal(now.begin(), now.end(), old_bytes.begin(), old_bytes.end()))
      << "the end marker no longer encodes as it did";
}

// The observation (docs/semantics.md#observations) survives the round
// trip; a header without one still encodes as before it existed (the
// fixtures above pin those bytes) and decodes without one.
TEST(EventBatchCodec, ObservationRoundTripsAndIsAbsentWhenNotGiven) {
  const Trace want = PreCollectivesTrace();
  BatchHeader header = PreCollectivesHeader();
  EventBatchEncoder encoder(&want);
  std::span<const uint8_t> plain =
      encoder.Encode(header, 0, want.gpu.size(), 0, want.cpu.size());
  const std::vector<uint8_t> plain_bytes(plain.begin(), plain.end());
  header.observation =
      ObservationInfo{.id = 0xabcdef, .start_ns = -5, .end_ns = 1'000'000};
  std::span<const uint8_t> with =
      encoder.Encode(header, 0, want.gpu.size(), 0, want.cpu.size());
  const std::vector<uint8_t> with_bytes(with.begin(), with.end());
  EXPECT_NE(plain_bytes, with_bytes);
  absl::StatusOr<DecodedBatch> decoded = DecodeEventBatch(with_bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->header.observation, header.observation);
  EXPECT_EQ(decoded->trace.gpu.size(), want.gpu.size());
  absl::StatusOr<DecodedBatch> old = DecodeEventBatch(plain_bytes);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_FALSE(old->header.observation.has_value());
}

// A hand-built batch of one kernel, its collective record `coll` and, when
// given, per-record peers and pair indices of any count.
std::vector<uint8_t> OneCollectiveBatch(
    const fb::CollectiveKernel& coll,
    const std::vector<int32_t>* peers = nullptr,
    const std::vector<int64_t>* pair_indices = nullptr) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<fb::GpuActivity> gpu = {fb::GpuActivity(
      0, 1, 0, 0, /*name=*/0, 0, 0, fb::GpuActivityKind::Kernel, false)};
  auto strings = b.CreateVectorOfStrings({"ncclKernel"});
  auto gpu_vec = b.CreateVectorOfStructs(gpu);
  auto coll_vec = b.CreateVectorOfStructs(&coll, 1);
  flatbuffers::Offset<flatbuffers::Vector<int32_t>> peers_vec;
  if (peers != nullptr) peers_vec = b.CreateVector(*peers);
  flatbuffers::Offset<flatbuffers::Vector<int64_t>> indices_vec;
  if (pair_indices != nullptr) indices_vec = b.CreateVector(*pair_indices);
  auto job = b.CreateString("j");
  fb::EventBatchBuilder eb(b);
  eb.add_job(job);
  eb.add_strings(strings);
  eb.add_gpu(gpu_vec);
  eb.add_collectives(coll_vec);
  if (peers != nullptr) eb.add_collective_peers(peers_vec);
  if (pair_indices != nullptr) eb.add_collective_pair_indices(indices_vec);
  fb::FinishEventBatchBuffer(b, eb.Finish());
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

TEST(EventBatchCodec, CollectiveNameIndexOutsideTheTableIsRejected) {
  for (int bad_field = 0; bad_field < 2; ++bad_field) {
    // bad_field 0: the kernel name; 1: the process group. The collective
    // type is absent (0xFFFFFFFF), which is allowed.
    const std::vector<uint8_t> bytes = OneCollectiveBatch(fb::CollectiveKernel(
        0, 1, -1, -1, -1, /*kernel_name=*/bad_field == 0 ? 1 : 0,
        /*collective=*/kNoName, /*process_group=*/bad_field == 1 ? 7 : kNoName,
        kNoName, kNoName, 0, 0, -1));
    absl::StatusOr<DecodedBatch> batch = DecodeEventBatch(bytes);
    ASSERT_FALSE(batch.ok()) << "field " << bad_field;
    EXPECT_THAT(batch.status().message(),
                HasSubstr("outside the string table"));
  }
}

// A send's or recv's peer crosses as EventBatch.collective_peers, one per
// record; a batch whose records have none leaves the field out (the bytes
// of a batch without peers are those of BatchesFromBeforeCollectivesStill-
// Decode's encoder).
TEST(EventBatchCodec, CollectivePeersRoundTripAndAreAbsentWithoutAny) {
  Trace t = TraceWithCollectives();
  ASSERT_GE(t.collectives.size(), 2u);
  EventBatchEncoder plain(&t);
  std::span<const uint8_t> bytes = plain.Encode(
      Header(), 0, t.gpu.size(), 0, t.cpu.size(), 0, t.collectives.size());
  EXPECT_EQ(fb::GetEventBatch(bytes.data())->collective_peers(), nullptr);
  t.collectives[1].peer = 5;
  EventBatchEncoder encoder(&t);
  bytes = encoder.Encode(Header(), 0, t.gpu.size(), 0, t.cpu.size(), 0,
                         t.collectives.size());
  absl::StatusOr<DecodedBatch> batch =
      DecodeEventBatch(std::vector<uint8_t>(bytes.begin(), bytes.end()));
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->trace.collectives.size(), t.collectives.size());
  EXPECT_EQ(batch->trace.collectives[0].peer, -1);
  EXPECT_EQ(batch->trace.collectives[1].peer, 5);
  // A range without the record that has a peer sends none.
  bytes = encoder.Encode(Header(), 0, t.gpu.size(), 0, 0, 0, 1);
  EXPECT_EQ(fb::GetEventBatch(bytes.data())->collective_peers(), nullptr);
}

TEST(EventBatchCodec, PeersOrPairIndicesOfAnotherCountAreRejected) {
  const fb::CollectiveKernel coll(0, 1, -1, -1, -1, /*kernel_name=*/0, kNoName,
                                  kNoName, kNoName, kNoName, 0, 0, -1);
  const std::vector<int32_t> two_peers = {1, 2};
  absl::StatusOr<DecodedBatch> batch =
      DecodeEventBatch(OneCollectiveBatch(coll, &two_peers));
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(batch.status().message(),
              HasSubstr("2 collective peers for 1 collective records"));
  const std::vector<int64_t> no_indices;
  batch = DecodeEventBatch(OneCollectiveBatch(coll, nullptr, &no_indices));
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(batch.status().message(),
              HasSubstr("0 collective pair indices for 1 collective records"));
  const std::vector<int32_t> one_peer = {3};
  const std::vector<int64_t> one_index = {4};
  batch = DecodeEventBatch(OneCollectiveBatch(coll, &one_peer, &one_index));
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->trace.collectives[0].peer, 3);
  EXPECT_EQ(batch->trace.collectives[0].pair_index, 4);
}

// NumberPointToPointPairs counts each device's send/recv kernels per pair
// (process group and its two-rank list, else the peer) in start order, and
// the indices cross in the batch.
TEST(EventBatchCodec, PairIndicesAreNumberedPerPairAndRoundTrip) {
  Trace t;
  NameInterner names(&t);
  const NameId kernel = names.Intern("ncclDevKernel_SendRecv(ncclDevComm*)");
  const NameId send = names.Intern("send");
  const NameId recv = names.Intern("recv");
  const NameId allreduce = names.Intern("allreduce");
  const NameId pp = names.Intern("7");
  const NameId pair_list = names.Intern("[2, 3]");
  const NameId stage_list = names.Intern("[1, 3, 5, 7]");
  auto add = [&](int64_t start, int32_t device, NameId collective, NameId list,
                 int32_t peer) {
    t.collectives.push_back(CollectiveKernel{.start_ns = start,
                                             .end_ns = start + 10,
                                             .device = device,
                                             .kernel_name = kernel,
                                             .collective = collective,
                                             .process_group = pp,
                                             .group_ranks = list,
                                             .peer = peer});
  };
  add(500, 0, recv, stage_list, 5);   // 0: peer 5, second with it.
  add(100, 0, send, stage_list, 5);   // 1: peer 5, first.
  add(300, 0, send, stage_list, 1);   // 2: peer 1, first.
  add(200, 1, send, stage_list, 5);   // 3: another device counts apart.
  add(400, 0, send, pair_list, -1);   // 4: the two-rank list tells the pair.
  add(600, 0, recv, pair_list, -1);   // 5: its second.
  add(700, 0, send, stage_list, -1);  // 6: no peer: not numbered.
  add(800, 0, allreduce, stage_list, -1);  // 7: no send/recv.
  NumberPointToPointPairs(t);
  std::vector<int64_t> got;
  for (const CollectiveKernel& c : t.collectives) got.push_back(c.pair_index);
  EXPECT_THAT(got, ::testing::ElementsAre(1, 0, 0, 0, 0, 1, -1, -1));
  // Numbered already: left as it is.
  t.collectives[0].pair_index = 9;
  NumberPointToPointPairs(t);
  EXPECT_EQ(t.collectives[0].pair_index, 9);
  EventBatchEncoder encoder(&t);
  std::span<const uint8_t> bytes =
      encoder.Encode(Header(), 0, 0, 0, 0, 0, t.collectives.size());
  absl::StatusOr<DecodedBatch> batch =
      DecodeEventBatch(std::vector<uint8_t>(bytes.begin(), bytes.end()));
  ASSERT_TRUE(batch.ok()) << batch.status();
  std::vector<int64_t> decoded;
  for (const CollectiveKernel& c : batch->trace.collectives) {
    decoded.push_back(c.pair_index);
  }
  EXPECT_THAT(decoded, ::testing::ElementsAre(9, 0, 0, 0, 0, 1, -1, -1));
  // A batch with no numbered record leaves the field out.
  bytes = encoder.Encode(Header(), 0, 0, 0, 0, 6, 8);
  EXPECT_EQ(fb::GetEventBatch(bytes.data())->collective_pair_indices(),
            nullptr);
}

// The producing process's pid (Inspector logs name it): it survives the
// round trip; a header without one writes the bytes of a batch from before
// the field (the v1 fixture, whose decode says unknown), and a negative pid
// some writer put there reads as unknown.
TEST(EventBatchCodec, PidRoundTripsAndOldBytesReadUnknown) {
  const std::vector<uint8_t> old_bytes =
      ReadBytes(TestdataPath("v1_before_collectives.bweb"));
  ASSERT_FALSE(old_bytes.empty());
  absl::StatusOr<DecodedBatch> old = DecodeEventBatch(old_bytes);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->header.pid, -1);
  EXPECT_EQ(old->trace.pid, -1);

  const Trace want = PreCollectivesTrace();
  BatchHeader header = PreCollectivesHeader();
  ASSERT_EQ(header.pid, -1);
  EventBatchEncoder encoder(&want);
  std::span<const uint8_t> plain =
      encoder.Encode(header, 0, want.gpu.size(), 0, want.cpu.size());
  EXPECT_TRUE(std::equal(plain.begin(), plain.end(), old_bytes.begin(),
                         old_bytes.end()))
      << "a batch without a pid no longer encodes as before the field";

  for (int64_t pid : {int64_t{0}, int64_t{4117}, int64_t{1} << 40}) {
    header.pid = pid;
    std::span<const uint8_t> with =
        encoder.Encode(header, 0, want.gpu.size(), 0, want.cpu.size());
    const std::vector<uint8_t> with_bytes(with.begin(), with.end());
    EXPECT_NE(with_bytes, old_bytes);
    absl::StatusOr<DecodedBatch> decoded = DecodeEventBatch(with_bytes);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->header.pid, pid);
    EXPECT_EQ(decoded->trace.pid, pid);
    EXPECT_EQ(decoded->header.host, header.host);
    EXPECT_EQ(decoded->header.rank, header.rank);
    EXPECT_EQ(decoded->trace.gpu.size(), want.gpu.size());
  }

  flatbuffers::FlatBufferBuilder b;
  auto job = b.CreateString("j");
  fb::EventBatchBuilder eb(b);
  eb.add_job(job);
  eb.add_pid(-7);
  fb::FinishEventBatchBuffer(b, eb.Finish());
  absl::StatusOr<DecodedBatch> negative = DecodeEventBatch(
      {b.GetBufferPointer(), static_cast<size_t>(b.GetSize())});
  ASSERT_TRUE(negative.ok()) << negative.status();
  EXPECT_EQ(negative->header.pid, -1);
}

}  // namespace
}  // namespace bubblewatch
