// BatchAdmission's sequence rule (docs/semantics.md#what-a-producer-can-forge):
// a batch with a real producer id and a forged sequence never shadows the
// producer's real batches, whether it comes before the first real one or
// after, a producer that restarts from batch 0 is never rejected, and a
// replay decides what the first pass decided.
#include "processor/batch_admission.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "processor/partition_jobs.h"
#include "processor/processor_options.h"
#include "processor/runtime_shared.h"
#include "schemas/event_batch_codec.h"
#include "schemas/window_summary_codec.h"
#include "storage/window_store.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/units.h"

namespace bubblewatch {
namespace {

using testing::kS;
using AdmissionVerdict = Admission::Verdict;

constexpr uint64_t kRealProducer = 0x5eed;

// Batch `sequence` of `producer`: kernels every 100 ms in [from_s, to_s);
// none for an end marker.
std::vector<uint8_t> SequencedBatch(uint64_t producer, uint64_t sequence,
                                    int64_t from_s, int64_t to_s,
                                    bool end = false) {
  Trace t;
  t.job = "job";
  t.names = {"gemm"};
  for (int64_t s = from_s * kS; s < to_s * kS; s += kS / 10) {
    t.gpu.push_back(GpuActivity{.start_ns = s,
                                .end_ns = s + kS / 20,
                                .name = 0,
                                .device = 0,
                                .stream = 7,
                                .kind = GpuActivityKind::kKernel});
  }
  EventBatchEncoder encoder(&t);
  std::span<const uint8_t> bytes =
      encoder.Encode(BatchHeader{.job = "job",
                                 .host = "h",
                                 .rank = 0,
                                 .world_size = 1,
                                 .producer_id = producer,
                                 .sequence = sequence,
                                 .end_of_stream = end},
                     0, t.gpu.size(), 0, 0);
  return {bytes.begin(), bytes.end()};
}

// The real stream: 11 batches of 3 s each, then its end marker.
std::vector<std::vector<uint8_t>> RealStreamOf12() {
  std::vector<std::vector<uint8_t>> out;
  for (uint64_t i = 0; i < 11; ++i) {
    const auto from = static_cast<int64_t>(3 * i);
    out.push_back(SequencedBatch(kRealProducer, i, from, from + 3));
  }
  out.push_back(SequencedBatch(kRealProducer, 11, 0, 0, /*end=*/true));
  return out;
}

// One processor over partition 0: admits messages in offset order and adds
// the accepted ones, as PartitionTask::OnMessage does.
class AdmissionDriver {
 public:
  explicit AdmissionDriver(const std::string& store_path) {
    absl::StatusOr<std::unique_ptr<WindowStore>> store =
        OpenRocksDbWindowStore(store_path);
    EXPECT_TRUE(store.ok()) << store.status();
    if (store.ok()) store_ = *std::move(store);
    jobs_ = std::make_unique<PartitionJobs>(options_, store_.get(), &stats_);
    admission_ = std::make_unique<BatchAdmission>(options_, jobs_.get());
  }

  const PartitionState& part() { return jobs_->partitions().at(0); }

  // Decides the message at the next offset; returns its verdict.
  Admission Feed(const std::vector<uint8_t>& bytes) {
    const int64_t offset = offset_++;
    const bool replay =
        offset < jobs_->NoteMessage(0, offset).committed_position;
    absl::StatusOr<Admission> a =
        admission_->Admit(bytes, 0, offset, replay, absl::Now());
    EXPECT_TRUE(a.ok()) << a.status();
    if (!a.ok()) return Admission{};
    if (a->verdict == AdmissionVerdict::kAccept) {
      PartitionJobs::Added added =
          jobs_->AddBatch(0, a->batch.header.job, *a->job, a->batch, offset,
                          replay, absl::Now(), absl::InfiniteDuration());
      for (const WindowSummary& w : added.windows) {
        windows_.push_back(EncodeWindowSummary(w));
      }
    }
    return *std::move(a);
  }

  // What a commit at this point leaves for the next owner: the jobs' states,
  // the committed position, the ledger.
  RestoredPartition Snapshot() {
    RestoredPartition s;
    for (const auto& [name, job] : jobs_->live_jobs()) {
      s.snapshot.jobs[name] = job.state.Serialize();
    }
    s.snapshot.committed_position = offset_;
    s.snapshot.ledger = part().ledger;
    return s;
  }
  // Takes over `snapshot`, reading from its start again (as after a restart
  // whose resume offset is 0).
  void Restore(const RestoredPartition& snapshot) {
    ASSERT_TRUE(jobs_->AddPartition(0, snapshot).ok());
    offset_ = 0;
  }

  const std::vector<std::string>& windows() const { return windows_; }
  const JobState& state() { return jobs_->live_jobs().at("job").state; }
  // The live job, to change as the processor would (GetOrLoad: the entry
  // AddBatch is given).
  JobEntry& job() {
    absl::StatusOr<JobEntry*> job = jobs_->GetOrLoad("job", 0);
    EXPECT_TRUE(job.ok()) << job.status();
    return **job;
  }
  std::optional<int64_t> last_event_ns() const {
    return jobs_->live_jobs().at("job").last_event_ns;
  }
  bool tracks_job() const { return jobs_->live_jobs().contains("job"); }

 private:
  std::unique_ptr<WindowStore> store_;
  StreamProcessorOptions options_;
  StatsCell stats_;
  std::unique_ptr<PartitionJobs> jobs_;
  std::unique_ptr<BatchAdmission> admission_;
  std::vector<std::string> windows_;
  int64_t offset_ = 0;
};

class BatchAdmissionSequence : public ::testing::Test {
 protected:
  // The windows of the real stream alone.
  std::vector<std::string> CleanWindows() {
    AdmissionDriver clean(dir_.Sub("clean"));
    for (const auto& b : RealStreamOf12()) {
      EXPECT_EQ(clean.Feed(b).verdict, AdmissionVerdict::kAccept);
    }
    EXPECT_FALSE(clean.windows().empty());
    return clean.windows();
  }

  testing::TempDir dir_;
};

TEST_F(BatchAdmissionSequence, AForgedFirstBatchShadowsNoRealBatch) {
  const std::vector<std::string> clean = CleanWindows();
  AdmissionDriver p(dir_.Sub("forged"));
  Admission forged = p.Feed(SequencedBatch(kRealProducer, UINT64_MAX, 40, 41));
  ASSERT_EQ(forged.verdict, AdmissionVerdict::kDeadLetter);
  EXPECT_EQ(forged.rejection.reason, "sequence_gap");
  EXPECT_NE(forged.rejection.detail.find("not tracked by its job and starts "
                                         "at batch 18446744073709551615"),
            std::string::npos)
      << forged.rejection.detail;
  ASSERT_TRUE(forged.source.has_value());
  EXPECT_FALSE(p.tracks_job()) << "a rejected first batch leaves no job";
  EXPECT_TRUE(p.part().ledger.WasRejected(0));
  for (const auto& b : RealStreamOf12()) {
    EXPECT_EQ(p.Feed(b).verdict, AdmissionVerdict::kAccept);
  }
  EXPECT_EQ(p.windows(), clean) << "every real batch counted, the forged not";
}

TEST_F(BatchAdmissionSequence, AFirstBatchMayStartOnlyWithinTheStep) {
  const uint64_t step = ProcessorLimits().max_sequence_step;
  ASSERT_EQ(step, 1024u);
  AdmissionDriver p(dir_.Sub("store"));
  Admission far = p.Feed(SequencedBatch(kRealProducer, step, 0, 1));
  EXPECT_EQ(far.verdict, AdmissionVerdict::kDeadLetter);
  EXPECT_EQ(far.rejection.reason, "sequence_gap");
  // The forger's best: batch 1023 is adopted and real batches 0..1023, 1024
  // of them, look like duplicates, no more.
  EXPECT_EQ(p.Feed(SequencedBatch(kRealProducer, step - 1, 0, 1)).verdict,
            AdmissionVerdict::kAccept);
  EXPECT_EQ(p.Feed(SequencedBatch(kRealProducer, step - 1, 1, 2)).verdict,
            AdmissionVerdict::kDuplicate);
  EXPECT_EQ(p.Feed(SequencedBatch(kRealProducer, step, 1, 2)).verdict,
            AdmissionVerdict::kAccept);
}

TEST_F(BatchAdmissionSequence, AForgedBatchAfterTheFirstShadowsNoRealBatch) {
  const std::vector<std::string> clean = CleanWindows();
  AdmissionDriver p(dir_.Sub("forged"));
  const std::vector<std::vector<uint8_t>> real = RealStreamOf12();
  for (size_t i = 0; i < real.size(); ++i) {
    if (i == 2) {
      Admission forged =
          p.Feed(SequencedBatch(kRealProducer, UINT64_MAX, 40, 41));
      ASSERT_EQ(forged.verdict, AdmissionVerdict::kDeadLetter);
      EXPECT_EQ(forged.rejection.reason, "sequence_gap");
      EXPECT_EQ(p.Feed(SequencedBatch(kRealProducer, 1 + 1025, 40, 41)).verdict,
                AdmissionVerdict::kDeadLetter)
          << "one past the step from the highest counted, batch 1";
    }
    EXPECT_EQ(p.Feed(real[i]).verdict, AdmissionVerdict::kAccept)
        << "batch " << i;
  }
  EXPECT_EQ(p.windows(), clean);
}

// A producer that restarts (a watcher resending the file it was in the
// middle of) starts again at batch 0 with the same id: what was counted is a
// duplicate, the rest counts. One the job forgot after --producer-expiry
// starts afresh at 0 and is tracked again.
TEST_F(BatchAdmissionSequence, AProducerRestartingFromZeroIsNeverRejected) {
  const std::vector<std::string> clean = CleanWindows();
  AdmissionDriver p(dir_.Sub("restart"));
  const std::vector<std::vector<uint8_t>> real = RealStreamOf12();
  for (size_t i = 0; i < 6; ++i) {
    ASSERT_EQ(p.Feed(real[i]).verdict, AdmissionVerdict::kAccept);
  }
  for (size_t i = 0; i < real.size(); ++i) {
    EXPECT_EQ(p.Feed(real[i]).verdict,
              i < 6 ? AdmissionVerdict::kDuplicate : AdmissionVerdict::kAccept)
        << "batch " << i;
  }
  EXPECT_EQ(p.windows(), clean);

  // Forgotten (as --producer-expiry does): its resend from 0 is a new start.
  p.job().state.ForgetProducersBefore(INT64_MAX);
  ASSERT_FALSE(p.state().producer_sequences.contains(kRealProducer));
  EXPECT_EQ(p.Feed(real[0]).verdict, AdmissionVerdict::kAccept);
  EXPECT_EQ(p.Feed(real[1]).verdict, AdmissionVerdict::kAccept);
  EXPECT_EQ(p.Feed(real[1]).verdict, AdmissionVerdict::kDuplicate);
}

// A processor that restarts replays the partition from its resume offset:
// the forged batch is skipped by the ledger (no second dead letter), the
// real ones rebuild the windows, and the next live batch goes on.
TEST_F(BatchAdmissionSequence, AReplayDecidesAsTheFirstPass) {
  const std::vector<std::vector<uint8_t>> real = RealStreamOf12();
  AdmissionDriver first(dir_.Sub("first"));
  ASSERT_EQ(
      first.Feed(SequencedBatch(kRealProducer, UINT64_MAX, 40, 41)).verdict,
      AdmissionVerdict::kDeadLetter);
  for (size_t i = 0; i < 6; ++i) {
    ASSERT_EQ(first.Feed(real[i]).verdict, AdmissionVerdict::kAccept);
  }
  const RestoredPartition snapshot = first.Snapshot();

  AdmissionDriver second(dir_.Sub("second"));
  second.Restore(snapshot);
  EXPECT_EQ(
      second.Feed(SequencedBatch(kRealProducer, UINT64_MAX, 40, 41)).verdict,
      AdmissionVerdict::kSkip);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(second.Feed(real[i]).verdict, AdmissionVerdict::kAccept)
        << "replayed batch " << i;
  }
  for (size_t i = 6; i < real.size(); ++i) {
    EXPECT_EQ(second.Feed(real[i]).verdict, AdmissionVerdict::kAccept)
        << "live batch " << i;
  }
  EXPECT_EQ(second.state().producer_sequences.at(kRealProducer), 11u);
}

// Event times before the epoch are valid: a job's newest event there is
// kept as it is, not shown as the 0 that once stood for "none" (none is
// std::nullopt now; the store and `query jobs` are tested in their folders).
TEST(BatchAdmissionTimes, ANewestEventBeforeTheEpochIsKept) {
  testing::TempDir dir;
  AdmissionDriver p(dir.Sub("store"));
  constexpr int64_t kLongAgoS = -4'600'000'000;  // -4.6e18 ns.
  ASSERT_EQ(p.Feed(SequencedBatch(kRealProducer, 0, kLongAgoS, kLongAgoS + 1))
                .verdict,
            AdmissionVerdict::kAccept);
  EXPECT_EQ(p.last_event_ns(), kLongAgoS * kS + 950 * testing::kMs);
}

}  // namespace
}  // namespace bubblewatch
