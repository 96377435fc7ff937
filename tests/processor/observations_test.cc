// Observations (docs/semantics.md#observations): span and bubbles are
// computed within observations only, the time between two observations of a
// job is never a bubble, each window stores its observed time and why it
// closed, and live processing (the idle timeout closing the job between
// observations) stores the same bytes as a fresh run over the same batches,
// but for that reason. Bad input is counted
// or dead-lettered. The oracle is a brute force over a time grid.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "processor/batch_validator.h"
#include "processor/partition_jobs.h"
#include "processor/processor_options.h"
#include "processor/runtime_shared.h"
#include "schemas/window_summary_codec.h"
#include "storage/window_store.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/units.h"

namespace bubblewatch {
namespace {

constexpr int64_t kMs = 1'000'000;
using testing::kS;

// One observation of the test job: its interval and its kernels (device,
// [start, end)) in ms.
struct Obs {
  uint64_t id = 0;
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  struct Kernel {
    int32_t device;
    int64_t start_ms;
    int64_t end_ms;
  };
  std::vector<Kernel> kernels;
};

// The batches of `o`, `per_batch` kernels each, in start order, with the
// observation in every header (none when `legacy`), sent by `host` and
// `rank` as producer `producer` (0: the observation's id) from sequence
// `first_sequence` on.
std::vector<DecodedBatch> BatchesOf(const Obs& o, size_t per_batch,
                                    bool legacy = false,
                                    const std::string& host = "h",
                                    int32_t rank = 0, uint64_t producer = 0,
                                    uint64_t first_sequence = 0) {
  std::vector<Obs::Kernel> ks = o.kernels;
  std::stable_sort(ks.begin(), ks.end(), [](const auto& a, const auto& b) {
    return a.start_ms < b.start_ms;
  });
  std::vector<DecodedBatch> out;
  for (size_t i = 0; i < ks.size(); i += per_batch) {
    DecodedBatch b;
    b.header = BatchHeader{.job = "job",
                           .host = host,
                           .rank = rank,
                           .world_size = 1,
                           .producer_id = producer != 0 ? producer : o.id,
                           .sequence = first_sequence + out.size()};
    if (!legacy) {
      b.header.observation = ObservationInfo{
          .id = o.id, .start_ns = o.start_ms * kMs, .end_ns = o.end_ms * kMs};
    }
    b.trace.job = "job";
    b.trace.names = {"k"};
    for (size_t j = i; j < std::min(ks.size(), i + per_batch); ++j) {
      b.trace.gpu.push_back(GpuActivity{.start_ns = ks[j].start_ms * kMs,
                                        .end_ns = ks[j].end_ms * kMs,
                                        .name = 0,
                                        .device = ks[j].device,
                                        .stream = 7,
                                        .kind = GpuActivityKind::kKernel});
    }
    out.push_back(std::move(b));
  }
  return out;
}

// The end marker of `o`'s producer, after its `sequence` batches.
DecodedBatch MarkerOf(const Obs& o, uint64_t sequence) {
  DecodedBatch b;
  b.header = BatchHeader{.job = "job",
                         .host = "h",
                         .rank = 0,
                         .world_size = 1,
                         .producer_id = o.id,
                         .sequence = sequence,
                         .end_of_stream = true};
  b.header.observation = ObservationInfo{
      .id = o.id, .start_ns = o.start_ms * kMs, .end_ns = o.end_ms * kMs};
  b.trace.job = "job";
  return b;
}

// The start of the last window holding `o`'s data (1 s windows).
int64_t LastWindowStartNs(const Obs& o) {
  int64_t end_ms = INT64_MIN;
  for (const Obs::Kernel& k : o.kernels) end_ms = std::max(end_ms, k.end_ms);
  return (end_ms - 1) / 1000 * 1000 * kMs;
}

// `live` closed each observation by its idle timeout before the next one
// came (wall time); `fresh`, reading the same batches at once, closed it at
// the next observation's first batch (partition order). The bytes are the
// same but for why each observation's last windows closed: idle_timeout
// live, observation_end fresh; the last observation goes idle in both.
void ExpectSameButWhyClosed(const std::vector<WindowSummary>& live,
                            const std::vector<WindowSummary>& fresh,
                            const std::vector<Obs>& obs) {
  ASSERT_EQ(live.size(), fresh.size());
  for (size_t i = 0; i < live.size(); ++i) {
    WindowSummary want = live[i];
    if (live[i].closed_by == WindowSummary::ClosedBy::kIdleTimeout &&
        fresh[i].closed_by == WindowSummary::ClosedBy::kObservationEnd) {
      want.closed_by = WindowSummary::ClosedBy::kObservationEnd;
    }
    EXPECT_EQ(EncodeWindowSummary(want), EncodeWindowSummary(fresh[i]))
        << "window " << live[i].window.start_ns << ": "
        << ClosedByName(live[i].closed_by) << " live, "
        << ClosedByName(fresh[i].closed_by) << " fresh";
  }
  for (size_t j = 0; j < obs.size(); ++j) {
    const int64_t last = LastWindowStartNs(obs[j]);
    const auto it = std::find_if(
        fresh.begin(), fresh.end(),
        [&](const WindowSummary& w) { return w.window.start_ns == last; });
    ASSERT_NE(it, fresh.end()) << "observation " << j;
    EXPECT_EQ(it->closed_by, j + 1 < obs.size()
                                 ? WindowSummary::ClosedBy::kObservationEnd
                                 : WindowSummary::ClosedBy::kIdleTimeout)
        << "observation " << j;
    EXPECT_EQ(live[it - fresh.begin()].closed_by,
              WindowSummary::ClosedBy::kIdleTimeout)
        << "observation " << j;
  }
}

class Observations : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.windower.window_ns = kS;
    options_.windower.lateness_ns = 200 * kMs;
    Reset();
  }
  void Reset() {
    jobs_.reset();
    store_.reset();
    dir_ = std::make_unique<testing::TempDir>();
    absl::StatusOr<std::unique_ptr<WindowStore>> store =
        OpenRocksDbWindowStore(dir_->Sub("store"));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    {
      absl::MutexLock lock(&stats_.mu);
      stats_.stats = ProcessorStats();
    }
    jobs_ = std::make_unique<PartitionJobs>(options_, store_.get(), &stats_);
    offset_ = 0;
  }

  std::vector<WindowSummary> Feed(const DecodedBatch& b) {
    return FeedAt(b, offset_++, /*replay=*/false);
  }
  // Adds `b` at `offset` as the admission does; `replay`: a batch below
  // the committed position after a restart.
  std::vector<WindowSummary> FeedAt(const DecodedBatch& b, int64_t offset,
                                    bool replay) {
    absl::StatusOr<JobEntry*> job = jobs_->GetOrLoad("job", 0);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return {};
    EXPECT_FALSE(ValidateBatch(b).has_value());
    if (PartitionJobs::IsDuplicateBatch(**job, b.header, replay)) return {};
    return jobs_
        ->AddBatch(0, "job", **job, b, offset, replay, clock_,
                   absl::InfiniteDuration())
        .windows;
  }
  // A new instance over the same store that owns the partition from a
  // snapshot holding `job_state` (what the last commit wrote of the job).
  void Restart(const std::string& job_state) {
    jobs_ = std::make_unique<PartitionJobs>(options_, store_.get(), &stats_);
    RestoredPartition restored;
    restored.snapshot.jobs["job"] = job_state;
    ASSERT_TRUE(jobs_->AddPartition(0, std::move(restored)).ok());
  }
  // The idle timeout fires (wall time): every open window closes.
  std::vector<WindowSummary> Idle() {
    clock_ += options_.idle_timeout + absl::Seconds(1);
    std::vector<WindowSummary> out;
    jobs_->CloseIdle(clock_, out);
    return out;
  }
  // Feeds every observation's batches, then lets the job go idle. With
  // `idle_between`, the idle timeout also fires after each observation (a
  // live run whose observations are further apart in wall time than the
  // idle timeout).
  std::vector<WindowSummary> Run(const std::vector<Obs>& obs, bool idle_between,
                                 size_t per_batch = 3) {
    std::vector<WindowSummary> out;
    for (const Obs& o : obs) {
      for (const DecodedBatch& b : BatchesOf(o, per_batch)) {
        for (WindowSummary& w : Feed(b)) out.push_back(std::move(w));
      }
      if (idle_between) {
        for (WindowSummary& w : Idle()) out.push_back(std::move(w));
      }
    }
    for (WindowSummary& w : Idle()) out.push_back(std::move(w));
    return out;
  }
  ProcessorStats Stats() {
    absl::MutexLock lock(&stats_.mu);
    return stats_.stats;
  }
  // The job's state now, as a commit would store it.
  std::string JobStateBytes() {
    return jobs_->live_jobs().at("job").state.Serialize();
  }
  // Feeds `batches` uninterrupted, then lets the job go idle; `all` gets
  // every window. Then, for every cut, a run restarted after batch `cut`
  // from what a commit there stores (the job's state, replaying from its
  // resume offset) must store every later window byte for byte as the
  // uninterrupted run did, end with the same job state (its bad-input
  // counts and last observations included: none counted twice, none
  // missed) and count the same bad input process-wide. Returns the number
  // of restarts that replayed.
  int ExpectRestartsStoreTheSame(const std::vector<DecodedBatch>& batches,
                                 std::vector<WindowSummary>* all) {
    Reset();
    std::vector<std::vector<WindowSummary>> closed_at(batches.size());
    for (size_t i = 0; i < batches.size(); ++i) closed_at[i] = Feed(batches[i]);
    const std::vector<WindowSummary> idle = Idle();
    const std::string final_state = JobStateBytes();
    const ProcessorStats final_stats = Stats();
    all->clear();
    for (const std::vector<WindowSummary>& ws : closed_at) {
      all->insert(all->end(), ws.begin(), ws.end());
    }
    all->insert(all->end(), idle.begin(), idle.end());
    int restarts_with_replay = 0;
    for (size_t cut = 0; cut + 1 < batches.size(); ++cut) {
      SCOPED_TRACE(absl::StrCat("restart after batch ", cut));
      Reset();
      for (size_t i = 0; i <= cut; ++i) Feed(batches[i]);
      const JobEntry& job = jobs_->live_jobs().at("job");
      const std::string state = job.state.Serialize();
      int64_t resume = static_cast<int64_t>(cut) + 1;
      if (job.windower != nullptr && job.windower->ResumeOffset()) {
        resume = *job.windower->ResumeOffset();
      }
      Restart(state);
      for (int64_t i = resume; i <= static_cast<int64_t>(cut); ++i) {
        EXPECT_TRUE(FeedAt(batches[i], i, /*replay=*/true).empty())
            << "replayed batch " << i << " closed a window again";
      }
      if (resume <= static_cast<int64_t>(cut)) ++restarts_with_replay;
      std::vector<WindowSummary> got;
      for (size_t i = cut + 1; i < batches.size(); ++i) {
        for (WindowSummary& w :
             FeedAt(batches[i], static_cast<int64_t>(i), /*replay=*/false)) {
          got.push_back(std::move(w));
        }
      }
      for (WindowSummary& w : Idle()) got.push_back(std::move(w));
      EXPECT_EQ(JobStateBytes(), final_state);
      EXPECT_EQ(Stats().overlapping_observations,
                final_stats.overlapping_observations);
      EXPECT_EQ(Stats().observations_backwards,
                final_stats.observations_backwards);
      std::vector<WindowSummary> uninterrupted;
      for (size_t i = cut + 1; i < batches.size(); ++i) {
        uninterrupted.insert(uninterrupted.end(), closed_at[i].begin(),
                             closed_at[i].end());
      }
      uninterrupted.insert(uninterrupted.end(), idle.begin(), idle.end());
      EXPECT_EQ(got.size(), uninterrupted.size());
      if (got.size() != uninterrupted.size()) break;
      for (size_t i = 0; i < got.size(); ++i) {
        std::string diff;
        EXPECT_TRUE(SameWindow(got[i], uninterrupted[i], &diff))
            << "window " << got[i].window.start_ns << ": " << diff;
        EXPECT_EQ(EncodeWindowSummary(got[i]),
                  EncodeWindowSummary(uninterrupted[i]))
            << "window " << got[i].window.start_ns;
      }
    }
    return restarts_with_replay;
  }

  std::unique_ptr<testing::TempDir> dir_;
  std::unique_ptr<WindowStore> store_;
  StreamProcessorOptions options_;
  StatsCell stats_;
  std::unique_ptr<PartitionJobs> jobs_;
  int64_t offset_ = 0;
  absl::Time clock_ = absl::FromUnixSeconds(1'000'000);
};

// Whether observation j of `obs` is analyzed together with j - 1: it
// starts before the end of the window holding the end of j - 1's data
// (1 s windows), so it does not close the job.
bool JoinsThePrevious(const std::vector<Obs>& obs, size_t j) {
  return j > 0 && obs[j].start_ms < (obs[j - 1].end_ms / 1000 + 1) * 1000;
}

// The brute-force oracle, per ms of event time: on device d, t is busy
// when a kernel covers it, a bubble when idle, observed, and between the
// first kernel start and the last kernel end on d of the observations
// analyzed together (JoinsThePrevious); t is observed when inside an
// observation's interval.
class Oracle {
 public:
  explicit Oracle(const std::vector<Obs>& obs) {
    for (const Obs& o : obs) size_ = std::max(size_, o.end_ms + 2000);
    for (int d = 0; d < 2; ++d) state_[d].assign(size_, kOutside);
    observed_.assign(size_, false);
    for (const Obs& o : obs) {
      for (int64_t t = o.start_ms; t < o.end_ms; ++t) observed_[t] = true;
    }
    for (size_t begin = 0; begin < obs.size();) {
      size_t end = begin + 1;
      while (end < obs.size() && JoinsThePrevious(obs, end)) ++end;
      for (int32_t d = 0; d < 2; ++d) {
        int64_t first = INT64_MAX, last = INT64_MIN;
        for (size_t j = begin; j < end; ++j) {
          for (const Obs::Kernel& k : obs[j].kernels) {
            if (k.device != d) continue;
            first = std::min(first, k.start_ms);
            last = std::max(last, k.end_ms);
          }
        }
        for (int64_t t = first; t < last; ++t) {
          if (observed_[t]) state_[d][t] = kIdle;
        }
        for (size_t j = begin; j < end; ++j) {
          for (const Obs::Kernel& k : obs[j].kernels) {
            if (k.device != d) continue;
            for (int64_t t = k.start_ms; t < k.end_ms; ++t) {
              state_[d][t] = kBusy;
            }
          }
        }
      }
      begin = end;
    }
  }
  // Sums over [w0_ms, w0_ms + 1000) and both devices, in ns.
  int64_t Compute(int64_t w0_ms) const { return Count(w0_ms, kBusy); }
  int64_t Bubble(int64_t w0_ms) const { return Count(w0_ms, kIdle); }
  int64_t Observed(int64_t w0_ms) const {
    int64_t n = 0;
    for (int64_t t = w0_ms; t < w0_ms + 1000 && t < size_; ++t) {
      n += observed_[t];
    }
    return n * kMs;
  }
  int64_t end_ms() const { return size_; }

 private:
  enum State : uint8_t { kOutside, kIdle, kBusy };
  int64_t Count(int64_t w0_ms, State s) const {
    int64_t n = 0;
    for (int d = 0; d < 2; ++d) {
      for (int64_t t = w0_ms; t < w0_ms + 1000 && t < size_; ++t) {
        n += state_[d][t] == s;
      }
    }
    return n * kMs;
  }
  int64_t size_ = 0;
  std::vector<State> state_[2];
  std::vector<bool> observed_;
};

// Random jobs: 2-4 observations of 0.3-2.5 s with kernels on 1-2 devices,
// each starting at least one window boundary after the previous one's data
// (then 0-3 s more): the time between them is unobserved. With
// `close_chance`, an observation starts that often in the window where the
// previous one's data ends instead (analyzed together with it, the short
// time between them unobserved), and every observation has both devices.
std::vector<Obs> RandomJob(std::mt19937_64& rng, double close_chance = 0) {
  auto pick = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<Obs> obs;
  int64_t t = pick(0, 3000);
  const int n = static_cast<int>(pick(2, 4));
  for (int i = 0; i < n; ++i) {
    Obs o;
    o.id = 100 + i;
    o.start_ms = t;
    const int64_t length = pick(300, 2500);
    // A device that stops while the others go on is held idle to the
    // finalized edge (docs/semantics.md#closing-windows), which the oracle
    // leaves out: in jobs of observations analyzed together, every
    // observation has both devices.
    const int32_t devices =
        close_chance > 0 ? 2 : static_cast<int32_t>(pick(1, 2));
    for (int32_t d = 0; d < devices; ++d) {
      int64_t k = t + pick(0, 200);
      while (true) {
        const int64_t end = k + pick(1, 120);
        if (end > t + length) break;
        o.kernels.push_back({d, k, end});
        k = end + pick(0, 400);
      }
    }
    // Every device runs until the observation's end: a device that stops
    // earlier is held idle up to the finalized edge while the others go on
    // (docs/semantics.md#closing-windows), which this oracle leaves out.
    for (int32_t d = 0; d < devices; ++d) {
      o.kernels.push_back({d, t + length, t + length + 10});
    }
    o.end_ms = t + length + 10;
    obs.push_back(o);
    const int64_t boundary = (o.end_ms / 1000 + 1) * 1000;
    if (std::bernoulli_distribution(close_chance)(rng)) {
      t = pick(o.end_ms, boundary - 1);
    } else {
      t = boundary + pick(0, 3000);
    }
  }
  return obs;
}

TEST_F(Observations, BubblesStayWithinObservationsAgainstABruteForceOracle) {
  std::mt19937_64 rng(22);
  for (int round = 0; round < 30; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    const std::vector<Obs> obs = RandomJob(rng);
    Reset();
    const std::vector<WindowSummary> live = Run(obs, /*idle_between=*/true);
    Reset();
    const std::vector<WindowSummary> fresh = Run(obs, /*idle_between=*/false);
    // Byte-identical whether the idle timeout or the next observation
    // closed each observation's windows, but for saying which.
    ExpectSameButWhyClosed(live, fresh, obs);
    EXPECT_EQ(Stats().observation_closes, static_cast<int64_t>(obs.size()) - 1);
    const Oracle oracle(obs);
    int64_t bubble_total = 0;
    for (const WindowSummary& w : fresh) {
      const int64_t w0_ms = w.window.start_ns / kMs;
      EXPECT_EQ(w.window.job.compute_ns, oracle.Compute(w0_ms))
          << "window " << w0_ms;
      EXPECT_EQ(w.window.job.bubble_ns, oracle.Bubble(w0_ms))
          << "window " << w0_ms;
      EXPECT_EQ(w.window.job.span_ns,
                oracle.Compute(w0_ms) + oracle.Bubble(w0_ms));
      ASSERT_TRUE(w.observed_ns.has_value());
      EXPECT_EQ(*w.observed_ns, oracle.Observed(w0_ms)) << "window " << w0_ms;
      bubble_total += w.window.job.bubble_ns;
    }
    // No window with a bubble is missing: nothing between observations was
    // made up, nothing inside one lost.
    int64_t want_total = 0;
    for (int64_t w0 = 0; w0 < oracle.end_ms(); w0 += 1000) {
      want_total += oracle.Bubble(w0);
    }
    EXPECT_EQ(bubble_total, want_total);
  }
}

// Observations less than a window apart are analyzed together, and the
// time between them is unobserved all the same: in no span and no bubble
//. Against the oracle, and a restart after any batch stores
// the same bytes.
TEST_F(Observations, ShortGapsBetweenObservationsAreNoBubbleAgainstTheOracle) {
  std::mt19937_64 rng(2222);
  int joined = 0;
  for (int round = 0; round < 12; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    const std::vector<Obs> obs = RandomJob(rng, /*close_chance=*/0.7);
    std::vector<DecodedBatch> batches;
    for (const Obs& o : obs) {
      for (DecodedBatch& b : BatchesOf(o, 8)) batches.push_back(std::move(b));
    }
    std::vector<WindowSummary> windows;
    EXPECT_GT(ExpectRestartsStoreTheSame(batches, &windows), 0);
    for (size_t j = 1; j < obs.size(); ++j) {
      joined += JoinsThePrevious(obs, j) ? 1 : 0;
    }
    const Oracle oracle(obs);
    int64_t bubble_total = 0;
    for (const WindowSummary& w : windows) {
      const int64_t w0_ms = w.window.start_ns / kMs;
      EXPECT_EQ(w.window.job.compute_ns, oracle.Compute(w0_ms))
          << "window " << w0_ms;
      EXPECT_EQ(w.window.job.bubble_ns, oracle.Bubble(w0_ms))
          << "window " << w0_ms;
      EXPECT_EQ(w.window.job.span_ns,
                oracle.Compute(w0_ms) + oracle.Bubble(w0_ms));
      EXPECT_EQ(AttributionTotal(w.window.job.attribution),
                w.window.job.bubble_ns);
      ASSERT_TRUE(w.observed_ns.has_value());
      EXPECT_EQ(*w.observed_ns, oracle.Observed(w0_ms)) << "window " << w0_ms;
      bubble_total += w.window.job.bubble_ns;
    }
    int64_t want_total = 0;
    for (int64_t w0 = 0; w0 < oracle.end_ms(); w0 += 1000) {
      want_total += oracle.Bubble(w0);
    }
    EXPECT_EQ(bubble_total, want_total);
  }
  EXPECT_GT(joined, 10) << "the rounds must join observations";
}

// The example of docs/semantics.md#observations in the stream, with 1 s
// windows: observations [0, 200) and [500, 700) ms of one rank, kernels of
// 10 ms every 20 ms over [0, 150) and [520, 690). The gap [150, 520) is
// cut to its observed pieces [150, 200) and [500, 520): 70 ms of bubble,
// not 370; observed_ns is 400 ms.
TEST_F(Observations, AShortGapBetweenTwoObservationsInOneWindowIsNoBubble) {
  Obs a{.id = 1, .start_ms = 0, .end_ms = 200};
  Obs b{.id = 2, .start_ms = 500, .end_ms = 700};
  for (int64_t t = 0; t < 150; t += 20) a.kernels.push_back({0, t, t + 10});
  for (int64_t t = 520; t < 690; t += 20) b.kernels.push_back({0, t, t + 10});
  const std::vector<WindowSummary> windows = Run({a, b}, false);
  ASSERT_EQ(windows.size(), 1u);
  const WindowSummary& w = windows[0];
  EXPECT_EQ(w.window.job.compute_ns, 170 * kMs);
  // 7 + 8 gaps of 10 ms inside the observations, and 50 + 20 ms of the gap
  // between them.
  EXPECT_EQ(w.window.job.bubble_ns, 220 * kMs);
  EXPECT_EQ(w.window.job.span_ns, 390 * kMs);
  EXPECT_EQ(w.observed_ns, std::optional<int64_t>(400 * kMs));
  EXPECT_EQ(AttributionTotal(w.window.job.attribution), 220 * kMs);
  EXPECT_EQ(w.window.job.largest_bubble_ns, 50 * kMs);
  EXPECT_EQ(w.window.job.largest_bubble_start_ns, 150 * kMs);
  ASSERT_EQ(w.window.devices.size(), 1u);
  EXPECT_EQ(w.window.devices[0].stats.span_ns, 390 * kMs);
  EXPECT_EQ(Stats().observation_closes, 0);
  EXPECT_EQ(Stats().overlapping_observations, 0);
}

// A gap across an observation's end whose next kernel comes in the next
// observation: only its part up to the end is a bubble, and the restart
// after any batch stores the same bytes.
TEST_F(Observations, AGapAcrossAnObservationsEndCountsItsObservedPart) {
  Obs a{.id = 1, .start_ms = 100, .end_ms = 400};
  Obs b{.id = 2, .start_ms = 700, .end_ms = 2600};
  for (int64_t t = 100; t < 300; t += 50) a.kernels.push_back({0, t, t + 25});
  a.kernels.push_back({1, 100, 400});  // Device 1 runs to a's end.
  for (int64_t t = 800; t < 2600; t += 50) b.kernels.push_back({0, t, t + 25});
  b.kernels.push_back({1, 700, 2600});
  std::vector<DecodedBatch> batches = BatchesOf(a, 2);
  for (DecodedBatch& x : BatchesOf(b, 5)) batches.push_back(std::move(x));
  std::vector<WindowSummary> windows;
  ExpectRestartsStoreTheSame(batches, &windows);
  ASSERT_EQ(windows.size(), 3u);
  const WindowSummary& w = windows[0];
  // Device 0: 4 kernels of 25 ms in a (3 gaps of 25 ms), the gap
  // [275, 800) of which [275, 400) and [700, 800) are observed, then 4
  // gaps of 25 ms up to 1 s. Device 1's gap [400, 700) is all unobserved.
  const Oracle oracle({a, b});
  EXPECT_EQ(w.window.job.bubble_ns, oracle.Bubble(0));
  EXPECT_EQ(w.window.job.compute_ns, oracle.Compute(0));
  ASSERT_EQ(w.window.devices.size(), 2u);
  EXPECT_EQ(w.window.devices[0].stats.bubble_ns,
            (3 * 25 + 125 + 100 + 4 * 25) * kMs);
  EXPECT_EQ(w.window.devices[1].stats.bubble_ns, 0);
  EXPECT_EQ(w.observed_ns, std::optional<int64_t>(600 * kMs));
}

TEST_F(Observations, TwoRunsTwentySecondsApartMakeNoBubbleBetweenThem) {
  Obs a{.id = 1, .start_ms = 0, .end_ms = 3000, .kernels = {}};
  Obs b{.id = 2, .start_ms = 23000, .end_ms = 26000, .kernels = {}};
  for (int64_t t = 0; t < 3000; t += 100) a.kernels.push_back({0, t, t + 50});
  for (int64_t t = 23000; t < 26000; t += 100) {
    b.kernels.push_back({0, t, t + 50});
  }
  const std::vector<WindowSummary> windows = Run({a, b}, false);
  ASSERT_EQ(windows.size(), 6u) << "3 windows per run, none in between";
  // Kernels of 50 ms every 100 ms: 50 ms gaps, the last window of a run
  // ends at its last kernel (9 gaps).
  const int64_t want_bubble_ms[] = {500, 500, 450, 500, 500, 450};
  for (size_t i = 0; i < windows.size(); ++i) {
    const WindowSummary& w = windows[i];
    EXPECT_EQ(w.window.job.bubble_ns, want_bubble_ms[i] * kMs) << i;
    EXPECT_EQ(w.window.job.compute_ns, 500 * kMs) << i;
    EXPECT_EQ(w.observed_ns, std::optional<int64_t>(kS)) << i;
  }
  const WindowSummary::ClosedBy want_closed_by[] = {
      WindowSummary::ClosedBy::kWatermark, WindowSummary::ClosedBy::kWatermark,
      // At the next observation's first batch, as at an end marker.
      WindowSummary::ClosedBy::kObservationEnd,
      WindowSummary::ClosedBy::kWatermark, WindowSummary::ClosedBy::kWatermark,
      WindowSummary::ClosedBy::kIdleTimeout};
  for (size_t i = 0; i < windows.size(); ++i) {
    EXPECT_EQ(windows[i].closed_by, want_closed_by[i]) << i;
  }
  EXPECT_EQ(windows[2].window.end_ns, 3 * kS);
  EXPECT_EQ(windows[3].window.start_ns, 23 * kS);
}

// Each window stores why it closed: the watermark, the end marker that
// ended the job, a new observation past the job's data, or the idle
// timeout. All but the last are decided in partition order, so an instance
// restarted after any batch, replaying from the resume offset the last
// commit stored, stores every later window as the uninterrupted run did,
// closed_by included.
TEST_F(Observations, EachWindowStoresWhyItClosedAndARestartStoresTheSame) {
  // Run a ends with its producer's marker (the job ends); run b has none
  // and is closed by run c, which starts 2.5 s after it; then c goes idle.
  Obs a{.id = 1, .start_ms = 0, .end_ms = 2500};
  Obs b{.id = 2, .start_ms = 5000, .end_ms = 7500};
  Obs c{.id = 3, .start_ms = 10000, .end_ms = 12500};
  for (Obs* o : {&a, &b, &c}) {
    for (int64_t t = o->start_ms; t + 30 <= o->end_ms; t += 70) {
      o->kernels.push_back({0, t, t + 30});
    }
  }
  std::vector<DecodedBatch> batches = BatchesOf(a, 4);
  batches.push_back(MarkerOf(a, batches.size()));
  for (const Obs* o : {&b, &c}) {
    for (DecodedBatch& batch : BatchesOf(*o, 4)) {
      batches.push_back(std::move(batch));
    }
  }

  std::vector<WindowSummary> all;
  const int restarts_with_replay = ExpectRestartsStoreTheSame(batches, &all);
  using C = WindowSummary::ClosedBy;
  const std::vector<std::pair<int64_t, C>> want = {
      {0, C::kWatermark},  {1, C::kWatermark},  {2, C::kEndMarker},
      {5, C::kWatermark},  {6, C::kWatermark},  {7, C::kObservationEnd},
      {10, C::kWatermark}, {11, C::kWatermark}, {12, C::kIdleTimeout}};
  ASSERT_EQ(all.size(), want.size());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].window.start_ns, want[i].first * kS) << i;
    EXPECT_EQ(all[i].closed_by, want[i].second)
        << "window " << want[i].first
        << " s: " << ClosedByName(all[i].closed_by);
  }
  EXPECT_GT(restarts_with_replay, 5);
}

// A duty cycle: a 2 s snapshot every 60 s, each its own observation. The
// windows are the snapshots' own, live and fresh alike; the 58 s between
// snapshots is in no window.
TEST_F(Observations, DutyCycleSnapshotsAreAnalyzedOnTheirOwn) {
  std::vector<Obs> obs;
  for (int i = 0; i < 5; ++i) {
    Obs o{.id = 50u + i, .start_ms = 60'000 * i, .end_ms = 60'000 * i + 2000};
    for (int64_t t = o.start_ms; t < o.end_ms; t += 40) {
      o.kernels.push_back({0, t, t + 25});
    }
    obs.push_back(o);
  }
  const std::vector<WindowSummary> live = Run(obs, /*idle_between=*/true);
  Reset();
  const std::vector<WindowSummary> fresh = Run(obs, /*idle_between=*/false);
  ASSERT_EQ(fresh.size(), 10u) << "two 1 s windows per snapshot";
  ExpectSameButWhyClosed(live, fresh, obs);
  for (size_t i = 0; i < fresh.size(); ++i) {
    const WindowSummary& w = fresh[i];
    EXPECT_EQ(w.window.start_ns, (60'000 * (i / 2) + 1000 * (i % 2)) * kMs);
    EXPECT_EQ(w.window.job.compute_ns, 25 * 25 * kMs);
    // 25 kernels per window, 15 ms gaps; the snapshot's last kernel ends
    // its span.
    EXPECT_EQ(w.window.job.bubble_ns, (i % 2 == 0 ? 25 : 24) * 15 * kMs);
    EXPECT_EQ(w.observed_ns, std::optional<int64_t>(kS));
  }
  EXPECT_EQ(Stats().observation_closes, 4);
}

// A producer restarted mid-file resends the file's batches from the
// start: the resent ones are duplicates, and the windows are those of one
// uninterrupted send.
TEST_F(Observations, AProducerRestartedMidFileChangesNothing) {
  Obs o{.id = 7, .start_ms = 0, .end_ms = 4000};
  for (int64_t t = 0; t + 30 <= 4000; t += 70) {
    o.kernels.push_back({0, t, t + 30});
  }
  const std::vector<DecodedBatch> batches = BatchesOf(o, 4);
  std::vector<WindowSummary> once;
  for (const DecodedBatch& b : batches) {
    for (WindowSummary& w : Feed(b)) once.push_back(std::move(w));
  }
  for (WindowSummary& w : Idle()) once.push_back(std::move(w));
  Reset();
  std::vector<WindowSummary> restarted;
  for (size_t i = 0; i < batches.size() / 2; ++i) {
    for (WindowSummary& w : Feed(batches[i])) restarted.push_back(std::move(w));
  }
  for (const DecodedBatch& b : batches) {
    for (WindowSummary& w : Feed(b)) restarted.push_back(std::move(w));
  }
  for (WindowSummary& w : Idle()) restarted.push_back(std::move(w));
  ASSERT_EQ(once.size(), 4u);
  ASSERT_EQ(restarted.size(), once.size());
  for (size_t i = 0; i < once.size(); ++i) {
    EXPECT_EQ(EncodeWindowSummary(restarted[i]), EncodeWindowSummary(once[i]));
  }
  EXPECT_EQ(Stats().observation_closes, 0);
  EXPECT_EQ(Stats().overlapping_observations, 0);
}

TEST_F(Observations, LegacyBatchesKeepTodaysResult) {
  // Without observations the gap between two producers is analyzed as
  // before: windows in between exist, with the gap as a bubble, and no
  // observed time is stored.
  Obs a{.id = 1,
        .start_ms = 0,
        .end_ms = 1050,
        .kernels = {{0, 0, 50}, {0, 1000, 1050}}};
  Obs b{
      .id = 2, .start_ms = 2500, .end_ms = 2550, .kernels = {{0, 2500, 2550}}};
  std::vector<WindowSummary> out;
  for (const Obs& o : {a, b}) {
    for (const DecodedBatch& batch : BatchesOf(o, 10, /*legacy=*/true)) {
      for (WindowSummary& w : Feed(batch)) out.push_back(std::move(w));
    }
  }
  for (WindowSummary& w : Idle()) out.push_back(std::move(w));
  ASSERT_EQ(out.size(), 3u);
  int64_t bubble = 0;
  for (const WindowSummary& w : out) {
    EXPECT_FALSE(w.observed_ns.has_value());
    bubble += w.window.job.bubble_ns;
  }
  EXPECT_EQ(bubble, (950 + 1450) * kMs);
  EXPECT_EQ(Stats().observation_closes, 0);
}

TEST_F(Observations, OverlappingAndBackwardsObservationsAreCounted) {
  Obs a{
      .id = 1, .start_ms = 5000, .end_ms = 6000, .kernels = {{0, 5000, 6000}}};
  Obs overlap{
      .id = 2, .start_ms = 5500, .end_ms = 6500, .kernels = {{0, 5500, 6500}}};
  Obs back{
      .id = 3, .start_ms = 1000, .end_ms = 1200, .kernels = {{0, 1000, 1200}}};
  for (const Obs& o : {a, overlap, back}) {
    for (const DecodedBatch& b : BatchesOf(o, 10)) Feed(b);
  }
  EXPECT_EQ(Stats().overlapping_observations, 1);
  EXPECT_EQ(Stats().observations_backwards, 1);
  EXPECT_EQ(Stats().observation_closes, 0)
      << "neither starts after the job's data";
  // Another host's observation over the same time is a multi-rank job, not
  // bad input.
  Obs other = a;
  other.id = 4;
  for (const DecodedBatch& b : BatchesOf(other, 10, false, "other")) Feed(b);
  EXPECT_EQ(Stats().overlapping_observations, 1);
}

// the bad input about observations is counted per job too, in its
// persisted state, and a restart after any batch (restoring that state,
// replaying from the resume offset) counts each bad observation once: the
// replayed batches not again, and the first live one against the last
// observation the commit stored, so none is missed either.
TEST_F(Observations, BadObservationsAreCountedPerJobOnceAcrossRestarts) {
  Obs a{.id = 1, .start_ms = 5000, .end_ms = 6000};
  Obs overlap{.id = 2, .start_ms = 5500, .end_ms = 6500};
  Obs back{.id = 3, .start_ms = 1000, .end_ms = 1200};
  Obs back_overlap{.id = 4, .start_ms = 1100, .end_ms = 1300};
  for (Obs* o : {&a, &overlap, &back, &back_overlap}) {
    for (int64_t t = o->start_ms; t + 30 <= o->end_ms; t += 70) {
      o->kernels.push_back({0, t, t + 30});
    }
  }
  std::vector<DecodedBatch> batches;
  for (const Obs* o : {&a, &overlap, &back, &back_overlap}) {
    for (DecodedBatch& b : BatchesOf(*o, 6)) batches.push_back(std::move(b));
  }
  // Another host over the same time: a multi-rank job, not bad input.
  Obs other = a;
  other.id = 5;
  for (DecodedBatch& b : BatchesOf(other, 6, false, "other")) {
    batches.push_back(std::move(b));
  }

  std::vector<WindowSummary> all;
  EXPECT_GT(ExpectRestartsStoreTheSame(batches, &all), 5);
  // The uninterrupted run (each restarted one ended in the same state).
  Reset();
  for (const DecodedBatch& b : batches) Feed(b);
  const JobState& state = jobs_->live_jobs().at("job").state;
  EXPECT_EQ(state.lifecycle.overlapping_observations, 2);
  EXPECT_EQ(state.lifecycle.observations_backwards, 1);
  EXPECT_EQ(Stats().overlapping_observations, 2);
  EXPECT_EQ(Stats().observations_backwards, 1);
  EXPECT_EQ(state.last_observations.size(), 2u);
  EXPECT_EQ(state.last_observations.at({"h", 0, 0}).id, 4u);
  EXPECT_EQ(state.last_observations.at({"other", 0, 0}).id, 5u);

  // Spelled out: a restart right before the overlapping observation. The
  // state the last commit stored names a's observation, so the first live
  // batch is compared with it (a processor that kept it in memory only
  // would compare it with nothing and miss the overlap)...
  Reset();
  const size_t first_overlap = BatchesOf(a, 6).size();
  for (size_t i = 0; i < first_overlap; ++i) Feed(batches[i]);
  Restart(JobStateBytes());
  for (size_t i = 0; i < first_overlap; ++i) {
    FeedAt(batches[i], static_cast<int64_t>(i), /*replay=*/true);
  }
  EXPECT_EQ(
      jobs_->live_jobs().at("job").state.last_observations.at({"h", 0, 0}).id,
      1u);
  for (size_t i = first_overlap; i < batches.size(); ++i) {
    FeedAt(batches[i], static_cast<int64_t>(i), /*replay=*/false);
  }
  const JobLifecycle counted = jobs_->live_jobs().at("job").state.lifecycle;
  EXPECT_EQ(counted.overlapping_observations, 2);
  EXPECT_EQ(counted.observations_backwards, 1);
  // ... and one restarted after it replays the bad observations' batches
  // without counting them again.
  Restart(JobStateBytes());
  for (size_t i = 0; i < batches.size(); ++i) {
    FeedAt(batches[i], static_cast<int64_t>(i), /*replay=*/true);
  }
  EXPECT_EQ(jobs_->live_jobs().at("job").state.lifecycle, counted);
  EXPECT_EQ(
      jobs_->live_jobs().at("job").state.last_observations.at({"h", 0, 0}).id,
      4u);
  EXPECT_EQ(Stats().overlapping_observations, 2);
  EXPECT_EQ(Stats().observations_backwards, 1);
}

// Two observations that overlap in [300, 600) ms: a on device 0 over
// [0, 600) ms, b on device 1 over [300, 900) ms, a 25 ms kernel every 50 ms.
std::pair<Obs, Obs> TwoOverlappingObservations() {
  Obs a{.id = 1, .start_ms = 0, .end_ms = 600};
  Obs b{.id = 2, .start_ms = 300, .end_ms = 900};
  for (int64_t t = 0; t < 600; t += 50) a.kernels.push_back({0, t, t + 25});
  for (int64_t t = 300; t < 900; t += 50) b.kernels.push_back({1, t, t + 25});
  return {a, b};
}

// Several processes of one host that send their traces without a rank
// (rank -1), each its own producer and observation, overlap legitimately:
// no bad input. Their observed time is the union of the observations,
// the overlap counted once.
TEST_F(Observations, OverlappingTracesOfOneHostWithoutRanksAreNotBadInput) {
  const auto [a, b] = TwoOverlappingObservations();
  std::vector<WindowSummary> out;
  for (const Obs& o : {a, b}) {
    for (const DecodedBatch& batch : BatchesOf(o, 4, false, "h", -1)) {
      for (WindowSummary& w : Feed(batch)) out.push_back(std::move(w));
    }
  }
  for (WindowSummary& w : Idle()) out.push_back(std::move(w));
  EXPECT_EQ(Stats().overlapping_observations, 0);
  EXPECT_EQ(Stats().observations_backwards, 0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].observed_ns, std::optional<int64_t>(900 * kMs));
  // Each device's gaps lie within the union: 11 gaps of 25 ms each.
  EXPECT_EQ(out[0].window.job.bubble_ns, 2 * 11 * 25 * kMs);
  // Two ranks of one host are two processes too.
  Reset();
  for (int32_t rank : {0, 1}) {
    for (const DecodedBatch& batch :
         BatchesOf(rank == 0 ? a : b, 4, false, "h", rank)) {
      Feed(batch);
    }
  }
  EXPECT_EQ(Stats().overlapping_observations, 0);
}

// A true overlap: one stream sends a second observation over time its
// previous one held. Without a rank, one producer's two observations;
// with a rank, two producers of one (host, rank). Counted once each, the
// overlap still observed once.
TEST_F(Observations, ATrueOverlapOfOneStreamIsCounted) {
  const auto [a, b] = TwoOverlappingObservations();
  // One producer (id 9, its sequence going on) without a rank.
  std::vector<WindowSummary> out;
  std::vector<DecodedBatch> batches = BatchesOf(a, 4, false, "h", -1, 9);
  for (DecodedBatch& x : BatchesOf(b, 4, false, "h", -1, 9, batches.size())) {
    batches.push_back(std::move(x));
  }
  for (const DecodedBatch& batch : batches) {
    for (WindowSummary& w : Feed(batch)) out.push_back(std::move(w));
  }
  for (WindowSummary& w : Idle()) out.push_back(std::move(w));
  EXPECT_EQ(Stats().overlapping_observations, 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].observed_ns, std::optional<int64_t>(900 * kMs));
  // Rank 3 of host h, sent by two producers.
  Reset();
  for (const Obs& o : {a, b}) {
    for (const DecodedBatch& batch : BatchesOf(o, 4, false, "h", 3)) {
      Feed(batch);
    }
  }
  EXPECT_EQ(Stats().overlapping_observations, 1);
  // A batch without a producer id and without a rank names no stream.
  Reset();
  for (const Obs& o : {a, b}) {
    for (DecodedBatch batch : BatchesOf(o, 4, false, "h", -1)) {
      batch.header.producer_id = 0;
      Feed(batch);
    }
  }
  EXPECT_EQ(Stats().overlapping_observations, 0);
}

TEST_F(Observations, BadIntervalsAreDeadLettered) {
  Obs a{.id = 1, .start_ms = 0, .end_ms = 100, .kernels = {{0, 10, 20}}};
  DecodedBatch b = BatchesOf(a, 10)[0];
  EXPECT_FALSE(ValidateBatch(b).has_value());
  DecodedBatch backwards = b;
  backwards.header.observation->end_ns = -1;
  ASSERT_TRUE(ValidateBatch(backwards).has_value());
  EXPECT_EQ(ValidateBatch(backwards)->reason, "bad_observation");
  DecodedBatch zero = b;
  zero.header.observation->id = 0;
  EXPECT_EQ(ValidateBatch(zero)->reason, "bad_observation");
  DecodedBatch outside = b;
  outside.header.observation->end_ns = 15 * kMs;
  ASSERT_TRUE(ValidateBatch(outside).has_value());
  EXPECT_EQ(ValidateBatch(outside)->reason, "event_outside_observation");
  DecodedBatch legacy = b;
  legacy.header.observation.reset();
  EXPECT_FALSE(ValidateBatch(legacy).has_value());
}

}  // namespace
}  // namespace bubblewatch
