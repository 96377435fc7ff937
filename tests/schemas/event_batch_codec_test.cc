#include "schemas/event_batch_codec.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
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
}

}  // namespace
}  // namespace bubblewatch
