// The processor's protocol logic without a broker: the partition task
// (processor/partition_task.h) driven over the in-memory Kafka and a real
// RocksDB store (task_driver.h). Each test here was a broker test
// (ctest label kafka) with the same assertions; only what Kafka itself
// does (rebalances, broker outages, SASL, topics created later) stayed
// there (docs/architecture.md#testing-the-partition-task).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/bubble_analyzer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ingest/batched_trace.h"
#include "ingest/synthetic/synthetic_fleet.h"
#include "ingest/trace_reader.h"
#include "ingest/trace_replay.h"
#include "processor/dead_letter.h"
#include "schemas/event_batch_codec.h"
#include "schemas/window_summary_codec.h"
#include "serve/prometheus_metrics.h"
#include "tests/processor/task_driver.h"
#include "tests/processor/window_oracle.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;
using testing::LogCapture;
using testing::MemoryRecord;
using testing::ProcessOptions;
using testing::TaskDriver;

constexpr int64_t kBase = int64_t{1'767'225'600} * 1'000'000'000;
constexpr int64_t kSec = 1'000'000'000;
constexpr int64_t kMs = 1'000'000;

// The value of the last header named `name` of `r` ("" if none).
std::string LastHeader(const MemoryRecord& r, const std::string& name) {
  std::string value;
  for (const auto& [n, v] : r.headers) {
    if (n == name) value = v;
  }
  return value;
}

// One job's events, sent in batches by one producer id.
struct JobStream {
  std::string job;
  std::string host;
  uint64_t producer_id = 0;
  Trace trace;  // Also the oracle's input.
  uint64_t sequence = 0;
};

// Kernels of `duration_ms` every `period_ms` on `device`, with a launch
// call (correlated) just before each, in [from, to).
// Correlation ids count from `first_correlation`.
void AddKernels(Trace& t, int64_t from, int64_t to, int64_t period_ms,
                int64_t duration_ms, int32_t device,
                CorrelationId first_correlation = 1) {
  NameInterner names(&t);
  const NameId kernel = names.Intern("gemm");
  const NameId launch = names.Intern("cudaLaunchKernel");
  for (int64_t s = from; s < to; s += period_ms * kMs) {
    const CorrelationId c =
        first_correlation + static_cast<CorrelationId>(t.gpu.size());
    t.cpu.push_back(CpuEvent{.start_ns = s - 2 * kMs,
                             .end_ns = s - 1 * kMs,
                             .correlation = c,
                             .thread = static_cast<uint64_t>(100 + device),
                             .name = launch,
                             .category = CpuEventCategory::kCudaRuntime});
    t.gpu.push_back(GpuActivity{.start_ns = s,
                                .end_ns = s + duration_ms * kMs,
                                .correlation = c,
                                .name = kernel,
                                .device = device});
  }
}

// Sends the events of `s` starting in [from, to) to `driver` as one batch
// keyed by its job (GPU and CPU events are kept in start order by
// AddKernels).
void SendBatch(TaskDriver& driver, JobStream& s, int64_t from, int64_t to) {
  size_t g0 = 0, g1 = 0, c0 = 0, c1 = 0;
  while (g0 < s.trace.gpu.size() && s.trace.gpu[g0].start_ns < from) ++g0;
  g1 = g0;
  while (g1 < s.trace.gpu.size() && s.trace.gpu[g1].start_ns < to) ++g1;
  while (c0 < s.trace.cpu.size() && s.trace.cpu[c0].start_ns < from) ++c0;
  c1 = c0;
  while (c1 < s.trace.cpu.size() && s.trace.cpu[c1].start_ns < to) ++c1;
  EventBatchEncoder encoder(&s.trace);
  BatchHeader header{.job = s.job,
                     .host = s.host,
                     .producer_id = s.producer_id,
                     .sequence = s.sequence++};
  driver.Send(s.job, encoder.Encode(header, g0, g1, c0, c1));
}

std::vector<WindowSummary> Oracle(const JobStream& s) {
  AnalyzerOptions options;
  options.window_ns = kWindowNs;
  options.top_bubbles = 0;
  options.top_bubbles_per_window = 3;
  Trace t = s.trace;
  t.job = s.job;
  absl::StatusOr<Analysis> a = AnalyzeTrace(t, options);
  EXPECT_TRUE(a.ok()) << a.status();
  std::vector<WindowSummary> out;
  if (!a.ok()) return out;
  for (WindowAnalysis& w : a->windows) {
    WindowSummary summary;
    summary.job = s.job;
    summary.window = std::move(w);
    out.push_back(std::move(summary));
  }
  return out;
}

// The /metrics page `process --http` would serve now.
std::string Metrics(TaskDriver& driver, WindowStoreReader& store) {
  const ProcessorStats stats = driver.stats();
  absl::StatusOr<std::string> page =
      RenderPrometheusMetrics(store, kDefaultMetricsTopJobs, &stats);
  EXPECT_TRUE(page.ok()) << page.status();
  return page.ok() ? *page : "";
}

// Was StreamProcessorKafka.StoredWindowsEqualTheOracleAndThePlantedTruth.
TEST(PartitionTask, StoredWindowsEqualTheOracleAndThePlantedTruth) {
  ::bubblewatch::testing::TempDir dir;
  TaskDriver driver(ProcessOptions(), dir.Sub("store"));
  ASSERT_TRUE(driver.SendFleet(Fleet()).ok());
  ASSERT_TRUE(driver.RunUntilIdle().ok());
  std::vector<WindowSummary> want = OracleWindows();
  std::vector<WindowSummary> got = driver.Stored(JobsOf(want));
  ASSERT_FALSE(want.empty());
  ExpectSameAnalysis(got, want);
  for (const WindowSummary& w : got) EXPECT_EQ(w.late_events, 0);

  // Accuracy against the planted ground truth: per job, device and window,
  // the time attributed to each cause is within 5 % of the window's bubble
  // time of what the generator planted.
  absl::StatusOr<std::vector<SyntheticJob>> fleet =
      GenerateSyntheticFleet(Fleet());
  ASSERT_TRUE(fleet.ok());
  int checked = 0;
  for (const SyntheticJob& job : *fleet) {
    for (const TruthWindow& truth : job.truth) {
      const DeviceWindow* stored = nullptr;
      for (const WindowSummary& w : got) {
        if (w.job != job.job || w.window.start_ns != truth.window_start_ns)
          continue;
        for (const DeviceWindow& d : w.window.devices) {
          if (d.device == truth.device) stored = &d;
        }
      }
      ASSERT_NE(stored, nullptr) << job.job << " device " << truth.device
                                 << " window " << truth.window_start_ns;
      const double tolerance = 0.05 * static_cast<double>(truth.bubble_ns);
      EXPECT_EQ(stored->stats.compute_ns, truth.compute_ns);
      for (int c = 0; c < kNumBubbleCauses; ++c) {
        EXPECT_LE(std::abs(static_cast<double>(stored->stats.attribution[c] -
                                               truth.cause_ns[c])),
                  tolerance)
            << job.job << " (" << SyntheticScenarioName(job.scenario)
            << ") device " << truth.device << " window "
            << truth.window_start_ns << " cause "
            << BubbleCauseName(static_cast<BubbleCause>(c));
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
}

// Was StreamProcessorKafka.LateEventsUpdateOpenWindowsAndAreCountedOnceFinal.
// Event time, per docs/semantics.md#watermark and #late-events: an event
// behind its host's newest one by less than the lateness still lands in its
// window, which is not final yet; an event for a window that is already final
// is counted as late in that window (stored and published again with the
// count), never dropped silently and never added to the finished analysis.
TEST(PartitionTask, LateEventsUpdateOpenWindowsAndAreCountedOnceFinal) {
  constexpr int64_t kKernel = 100'000'000;  // 100 ms each.
  Trace t;
  NameInterner names(&t);
  NameId k = names.Intern("gemm");
  // Send order, one batch each: on time for [0, 10 s); 11 s holds the
  // watermark at 9 s (lateness 2 s); 9.5 s arrives out of order but within
  // the lateness; 13 s moves the watermark to 11 s and closes [0, 10 s);
  // 5 s is then behind a final window: late; 25 s closes [10 s, 20 s).
  std::vector<int64_t> starts_s10 = {10, 20,  30, 40,  50, 60, 70,
                                     80, 110, 95, 130, 50, 250};
  for (int64_t s10 : starts_s10) {
    const int64_t start = kBase + s10 * kSec / 10;
    t.gpu.push_back(
        GpuActivity{.start_ns = start, .end_ns = start + kKernel, .name = k});
  }
  ::bubblewatch::testing::TempDir dir;
  StreamProcessorOptions options = ProcessOptions();
  options.windower.lateness_ns = 2 * kSec;  // --lateness 2s
  TaskDriver driver(options, dir.Sub("store"));
  EventBatchEncoder encoder(&t);
  BatchHeader header{.job = "job-late", .host = "h", .producer_id = 9};
  for (size_t i = 0; i < t.gpu.size(); ++i) {
    driver.Send("job-late", encoder.Encode(header, i, i + 1, 0, 0));
    ++header.sequence;
  }
  ASSERT_TRUE(driver.RunUntilIdle().ok());
  std::vector<WindowSummary> windows = driver.Stored({"job-late"});
  ASSERT_EQ(windows.size(), 3u);  // [0, 10), [10, 20), [20, 30) s.
  // [0, 10 s): the eight on-time kernels and the one within the lateness;
  // the late one is counted, not analyzed.
  EXPECT_EQ(windows[0].window.start_ns, kBase);
  EXPECT_EQ(windows[0].window.job.compute_ns, 9 * kKernel);
  EXPECT_EQ(windows[0].gpu_events, 9);
  EXPECT_EQ(windows[0].late_events, 1);
  EXPECT_EQ(windows[1].window.job.compute_ns, 2 * kKernel);
  EXPECT_EQ(windows[1].late_events, 0);
  EXPECT_EQ(windows[2].window.job.compute_ns, 1 * kKernel);
  EXPECT_EQ(windows[2].late_events, 0);
  // The windows topic carries the update too: the newest version of the
  // first window has the late count.
  int64_t published_late = -1;
  for (const WindowSummary& w : driver.Published()) {
    if (w.window.start_ns == kBase) published_late = w.late_events;
  }
  EXPECT_EQ(published_late, 1);
}

// Was StreamProcessorKafka.MalformedMessagesGoToTheDeadLetterTopicWithReasons.
TEST(PartitionTask, MalformedMessagesGoToTheDeadLetterTopicWithReasons) {
  ::bubblewatch::testing::TempDir dir;
  TaskDriver driver(ProcessOptions(), dir.Sub("store"));
  // 1. Not a FlatBuffer at all.
  driver.Send("job-bad", "this is not an EventBatch");
  // 2. An event that ends before it starts; 3. events decades apart; 4. a
  // good batch of the same job, which must still be processed.
  Trace t;
  NameInterner names(&t);
  t.gpu.push_back(GpuActivity{.start_ns = 2'000'000'000,
                              .end_ns = 1'000'000'000,
                              .name = names.Intern("backwards")});
  t.gpu.push_back(GpuActivity{
      .start_ns = 1'000, .end_ns = 2'000, .name = names.Intern("early")});
  t.gpu.push_back(
      GpuActivity{.start_ns = int64_t{40} * 365 * 86400 * 1'000'000'000,
                  .end_ns = int64_t{40} * 365 * 86400 * 1'000'000'000 + 1,
                  .name = names.Intern("decades_later")});
  t.gpu.push_back(GpuActivity{.start_ns = 5'000'000'000,
                              .end_ns = 5'000'100'000,
                              .name = names.Intern("good")});
  EventBatchEncoder encoder(&t);
  BatchHeader header{.job = "job-bad", .host = "h", .producer_id = 7};
  for (auto [begin, end] :
       {std::pair{0, 1}, std::pair{1, 3}, std::pair{3, 4}}) {
    driver.Send("job-bad", encoder.Encode(header, begin, end, 0, 0));
    ++header.sequence;
  }
  ASSERT_TRUE(driver.RunUntilIdle().ok());
  std::vector<std::string> reasons;
  for (const MemoryRecord& r : driver.DeadLetters()) {
    reasons.push_back(LastHeader(r, kDeadLetterErrorHeader));
  }
  ASSERT_EQ(reasons.size(), 3u);
  EXPECT_THAT(reasons[0], ::testing::StartsWith("undecodable: "));
  EXPECT_THAT(reasons[1], ::testing::StartsWith("end_before_start: "));
  EXPECT_THAT(reasons[2], ::testing::StartsWith("timestamps_out_of_range: "));
  // The good batch made it: one window of job-bad.
  std::vector<WindowSummary> windows = driver.Stored({"job-bad"});
  ASSERT_EQ(windows.size(), 1u);
  EXPECT_EQ(windows[0].window.job.compute_ns, 100'000);
}

// Was
// StreamProcessorLimitsKafka.HostileBatchesGoToTheDlqAndStayThereAfterAKill:
//   - a hostile producer's batches (far-future timestamps, hours of spread,
//     a stream of made-up job names) go to the dead-letter topic with
//     `too_many_open_windows` / `too_many_jobs`, are counted per job and
//     producer on /metrics, and the other jobs' windows equal the oracle;
//   - the processor is killed with those rejections inside its replay
//     range; the restarted one decides the same from the ledger in the
//     partition snapshot: no dead letter twice, no rejected event in a
//     window.
TEST(PartitionTask, HostileBatchesGoToTheDlqAndStayThereAfterAKill) {
  // Two healthy jobs and the rogue producer's job, 40 s of events each.
  JobStream a{.job = "good-a", .host = "ha", .producer_id = 1};
  JobStream b{.job = "good-b", .host = "hb", .producer_id = 2};
  JobStream rogue{.job = "rogue", .host = "hr", .producer_id = 66};
  AddKernels(a.trace, kBase, kBase + 40 * kSec, 100, 50, 0);
  AddKernels(b.trace, kBase, kBase + 40 * kSec, 150, 80, 0);
  AddKernels(rogue.trace, kBase, kBase + 40 * kSec, 200, 20, 0);
  // The rogue's hostile batches use events outside its trace (the oracle
  // must not see them): a day ahead, and three hours of spread.
  JobStream future = rogue, spread = rogue;
  future.trace = Trace{};
  spread.trace = Trace{};
  AddKernels(future.trace, kBase + 86'400 * kSec, kBase + 86'401 * kSec, 100,
             50, 0);
  AddKernels(spread.trace, kBase, kBase + 3 * 3600 * kSec + kSec, 5'400'000, 50,
             0);
  std::vector<JobStream> fakes;
  for (int i = 0; i < 5; ++i) {
    fakes.push_back(JobStream{.job = "made-up-" + std::to_string(i),
                              .host = "hr",
                              .producer_id = 66});
    AddKernels(fakes.back().trace, kBase, kBase + 2 * kSec, 100, 50, 0);
  }

  ::bubblewatch::testing::TempDir dir;
  // 1. A processor that keeps its windows open (long idle timeout) until
  //    it is killed; at most 3 jobs per partition.
  StreamProcessorOptions options = ProcessOptions();
  options.windower.lateness_ns = 2 * kSec;
  options.state_limits.max_jobs_per_partition = 3;
  options.idle_timeout = absl::Seconds(120);
  options.exit_when_idle = absl::ZeroDuration();
  TaskDriver driver(options, dir.Sub("store"));
  int hostile = 0;
  for (int64_t s = 0; s < 40; s += 2) {
    const int64_t from = kBase + s * kSec, to = from + 2 * kSec;
    SendBatch(driver, a, from, to);
    SendBatch(driver, b, from, to);
    SendBatch(driver, rogue, from, to);
    // Hostile batches mid-stream and in the last seconds (the kill below
    // leaves those inside the replay range: their windows are open).
    if (s == 10 || s == 36) {
      future.sequence = rogue.sequence;
      SendBatch(driver, future, INT64_MIN, INT64_MAX);
      spread.sequence = future.sequence;
      SendBatch(driver, spread, INT64_MIN, INT64_MAX);
      rogue.sequence = spread.sequence;
      hostile += 2;
    }
    if (s == 12 || s >= 34) {
      JobStream& fake = fakes[hostile % fakes.size()];
      SendBatch(driver, fake, INT64_MIN, INT64_MAX);
      ++hostile;
    }
  }
  LogCapture first_life;
  ASSERT_TRUE(driver.Poll().ok());
  // Everything read is committed to the store within the commit interval
  // (1 s); then the kill leaves the last commit with open windows and a
  // replay range.
  ASSERT_TRUE(driver.Advance(absl::Seconds(2)).ok());
  std::vector<MemoryRecord> before = driver.DeadLetters();
  // Counted by reason and by (job, producer).
  {
    const std::string metrics = Metrics(driver, *driver.store());
    EXPECT_THAT(metrics, HasSubstr("bubblewatch_processor_dlq_messages_total{"
                                   "reason=\"too_many_open_windows\"} 4"));
    EXPECT_THAT(metrics, HasSubstr("bubblewatch_processor_dlq_messages_total{"
                                   "reason=\"too_many_jobs\"} 4"));
    EXPECT_THAT(metrics, HasSubstr("bubblewatch_processor_dlq_batches_by_"
                                   "source_total{job=\"rogue\",producer="
                                   "\"66\"} 4"));
    EXPECT_THAT(metrics, HasSubstr("bubblewatch_processor_dlq_batches_by_"
                                   "source_total{job=\"made-up-2\","
                                   "producer=\"66\"}"));
  }
  // Committed: the store's position is the topic's end.
  {
    absl::StatusOr<std::optional<PartitionProgress>> progress =
        driver.store()->Progress(options.topic, 0);
    ASSERT_TRUE(progress.ok() && progress->has_value());
    EXPECT_EQ(
        (*progress)->committed_position,
        static_cast<int64_t>(driver.topics().topics[options.topic][0].size()));
  }
  driver.Kill();

  ASSERT_EQ(static_cast<int>(before.size()), hostile);
  int open_windows = 0, jobs = 0;
  for (const MemoryRecord& d : before) {
    const std::string reason = LastHeader(d, kDeadLetterErrorHeader);
    if (reason.starts_with("too_many_open_windows: ")) {
      ++open_windows;
      EXPECT_EQ(d.key, "rogue");
    } else if (reason.starts_with("too_many_jobs: ")) {
      ++jobs;
      EXPECT_THAT(d.key, ::testing::StartsWith("made-up-"));
    } else {
      ADD_FAILURE() << "unexpected dead letter: " << reason;
    }
  }
  EXPECT_EQ(open_windows, 4);
  EXPECT_EQ(jobs, hostile - 4);

  // 2. Restart: it replays the rejected batches' offsets and decides the
  //    same from the ledger, then closes the windows.
  driver.mutable_options().idle_timeout = absl::Seconds(2);
  driver.mutable_options().exit_when_idle = absl::Seconds(4);
  LogCapture second_life;
  ASSERT_TRUE(driver.RunUntilIdle().ok());
  const std::string restart = second_life.text();
  EXPECT_THAT(restart, HasSubstr("state from local store (3 jobs, "));
  // The replay covered rejections (else this test shows nothing).
  EXPECT_THAT(restart, ::testing::Not(HasSubstr(" 0 limit rejections")))
      << restart;
  // Nothing dead-lettered again.
  EXPECT_THAT(restart, ::testing::Not(HasSubstr(".dlq: too_many")));

  std::vector<MemoryRecord> after = driver.DeadLetters();
  EXPECT_EQ(after.size(), before.size()) << "a dead letter was sent twice";
  std::set<std::string> distinct;
  for (const MemoryRecord& d : after) distinct.insert(d.value);
  EXPECT_EQ(distinct.size(), after.size());

  // The healthy jobs' windows and the rogue's accepted ones equal the
  // oracle; no made-up job has a window.
  for (const JobStream* s : {&a, &b, &rogue}) {
    std::vector<WindowSummary> want = Oracle(*s);
    ASSERT_EQ(want.size(), 4u) << s->job;
    std::vector<WindowSummary> got = driver.Stored({s->job});
    SCOPED_TRACE(s->job);
    ExpectSameAnalysis(got, want);
    for (const WindowSummary& w : got) EXPECT_EQ(w.late_events, 0);
  }
  for (const JobStream& fake : fakes) {
    EXPECT_TRUE(driver.Stored({fake.job}).empty()) << fake.job;
  }
}

// Was StreamProcessorLimitsKafka.ExpiredJobsMakeRoomForNewOnes.
// The job table does not fill up with a fleet's turnover: a job without
// events for --job-expiry (event time) and without open windows is
// forgotten when a new job needs its place.
TEST(PartitionTask, ExpiredJobsMakeRoomForNewOnes) {
  constexpr int64_t kHour = 3600 * kSec;
  JobStream old_job{.job = "old", .host = "h1", .producer_id = 1};
  JobStream next{.job = "next", .host = "h2", .producer_id = 2};
  JobStream newest{.job = "newest", .host = "h3", .producer_id = 3};
  JobStream extra{.job = "extra", .host = "h4", .producer_id = 4};
  AddKernels(old_job.trace, kBase, kBase + 4 * kSec, 100, 50, 0);
  AddKernels(next.trace, kBase + 2 * kHour, kBase + 2 * kHour + 4 * kSec, 100,
             50, 0);
  AddKernels(newest.trace, kBase + 2 * kHour, kBase + 2 * kHour + 4 * kSec, 100,
             60, 0);
  AddKernels(extra.trace, kBase + 2 * kHour, kBase + 2 * kHour + 4 * kSec, 100,
             70, 0);
  ::bubblewatch::testing::TempDir dir;
  StreamProcessorOptions options = ProcessOptions();
  options.windower.lateness_ns = 2 * kSec;
  options.state_limits.max_jobs_per_partition = 2;
  options.job_expiry = absl::Hours(1);
  options.idle_timeout = absl::Seconds(2);
  options.exit_when_idle = absl::Seconds(10);
  TaskDriver driver(options, dir.Sub("store"));
  LogCapture log;
  SendBatch(driver, old_job, INT64_MIN, INT64_MAX);
  SendBatch(driver, next, INT64_MIN, INT64_MAX);
  ASSERT_TRUE(driver.Poll().ok());
  // Both jobs closed for idleness (their windows stored): "old" is 2 h
  // behind its partition and holds nothing open.
  for (int i = 0; i < 600; ++i) {
    const std::string text = log.text();
    if (text.find("job next idle for 2s") != std::string::npos &&
        text.find("job old idle for 2s") != std::string::npos) {
      break;
    }
    ASSERT_TRUE(driver.Advance(absl::Milliseconds(100)).ok());
  }
  EXPECT_THAT(log.text(), HasSubstr("job next idle for 2s"));
  EXPECT_THAT(log.text(), HasSubstr("job old idle for 2s"));
  SendBatch(driver, newest, INT64_MIN, INT64_MAX);  // Takes old's place.
  SendBatch(driver, extra, INT64_MIN, INT64_MAX);   // The table is full again.
  ASSERT_TRUE(driver.RunUntilIdle().ok());
  const std::string text = log.text();
  EXPECT_THAT(text, HasSubstr("job old forgotten"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("job next forgotten")));
  EXPECT_EQ(driver.Stored({"newest"}).size(), 1u);
  EXPECT_TRUE(driver.Stored({"extra"}).empty());
  std::vector<MemoryRecord> dlq = driver.DeadLetters();
  ASSERT_EQ(dlq.size(), 1u);
  EXPECT_EQ(dlq[0].key, "extra");
  EXPECT_THAT(LastHeader(dlq[0], kDeadLetterErrorHeader),
              ::testing::StartsWith("too_many_jobs: "));
  // The forgotten job's windows stay in the store (retention decides).
  EXPECT_EQ(driver.Stored({"old"}).size(), 1u);
}

// Was
// StreamProcessorLimitsKafka.ClockSkewOfMinutesClosesEveryWindowAndIsReported.
// One job, two hosts whose clocks are 3 minutes apart: every window closes
// and equals the oracle, and the skew is reported (window field, warning
// line, /metrics).
TEST(PartitionTask, ClockSkewOfMinutesClosesEveryWindowAndIsReported) {
  constexpr int64_t kSkew = 180 * kSec;  // h-ahead's clock runs 3 min ahead.
  constexpr int64_t kRun = 240 * kSec;   // Real time both hosts stream.
  JobStream behind{.job = "skewed", .host = "h-behind", .producer_id = 1};
  JobStream ahead{.job = "skewed", .host = "h-ahead", .producer_id = 2};
  AddKernels(behind.trace, kBase, kBase + kRun, 100, 60, 0);
  // Correlation ids unique within the job (the windower merges hosts).
  AddKernels(ahead.trace, kBase + kSkew, kBase + kSkew + kRun, 100, 40, 1,
             1'000'000);
  ::bubblewatch::testing::TempDir dir;
  StreamProcessorOptions options = ProcessOptions();
  options.windower.lateness_ns = 2 * kSec;
  options.idle_timeout = absl::Seconds(8);
  options.exit_when_idle = absl::Seconds(10);
  options.skew_warning = absl::Seconds(60);
  TaskDriver driver(options, dir.Sub("store"));
  // Both stream at once: batch i of each covers real seconds [2i, 2i+2).
  for (int64_t t = 0; t < kRun; t += 2 * kSec) {
    SendBatch(driver, behind, kBase + t, kBase + t + 2 * kSec);
    SendBatch(driver, ahead, kBase + kSkew + t, kBase + kSkew + t + 2 * kSec);
  }
  JobStream both = behind;
  for (const GpuActivity& g : ahead.trace.gpu) both.trace.gpu.push_back(g);
  for (const CpuEvent& c : ahead.trace.cpu) both.trace.cpu.push_back(c);
  const std::vector<WindowSummary> want = Oracle(both);
  ASSERT_EQ(want.size(), 42u);  // [0, 420) s.

  LogCapture log;
  ASSERT_TRUE(driver.Poll().ok());
  // While the job is open (until its idle timeout) /metrics shows the skew.
  EXPECT_THAT(Metrics(driver, *driver.store()),
              HasSubstr("bubblewatch_processor_job_host_skew_seconds{"
                        "job=\"skewed\",ahead=\"h-ahead\",behind="
                        "\"h-behind\"} 17"));
  ASSERT_TRUE(driver.RunUntilIdle().ok());
  const std::string text = log.text();
  EXPECT_THAT(text, HasSubstr("job skewed: host h-ahead is 2m5"))
      << "the skew warning (178 s: one batch less than 3 min)";
  EXPECT_THAT(text, HasSubstr("ahead of host h-behind in event time"));

  // Every window closed and equals the oracle; those the watermark closed
  // carry the skew measured then (3 min less at most one batch, 2 s).
  std::vector<WindowSummary> got = driver.Stored({"skewed"});
  ExpectSameAnalysis(got, want);
  int by_watermark = 0;
  for (const WindowSummary& w : got) {
    EXPECT_EQ(w.late_events, 0);
    EXPECT_GE(w.host_skew_ns, kSkew - 3 * kSec) << w.window.start_ns;
    EXPECT_LE(w.host_skew_ns, kSkew + 3 * kSec) << w.window.start_ns;
    if (w.closed_by == WindowSummary::ClosedBy::kWatermark) ++by_watermark;
  }
  // The behind host's watermark closed [0, 230 s); the rest closed when
  // the job went quiet.
  EXPECT_GE(by_watermark, 22);
}

// Was ForgedSequenceKafka.AForgedFirstBatchShadowsNoRealBatch
// (docs/semantics.md#what-a-producer-can-forge). Producer ids are a hash of
// the file and the batching options, so they can be known in advance: a
// batch with the real producer id and sequence 2^64 - 1, sent before the
// real batch 0, used to make every real batch of the file a "duplicate"
// (measured: 11 of 11 dropped, one window holding only the forged event,
// against 4 windows and 40 events). Now every real batch counts, the forged
// one is in the dead-letter topic with its reason, and the stored windows
// are byte for byte those of the clean run.
TEST(PartitionTask, AForgedFirstBatchShadowsNoRealBatch) {
  ::bubblewatch::testing::TempDir dir;
  // 40 kernels of 50 ms, one every 900 ms from 0.1 s: 4 windows of 10 s.
  std::string gpu;
  for (int64_t i = 0; i < 40; ++i) {
    const int64_t us = 100'000 + i * 900'000;
    absl::StrAppend(&gpu, gpu.empty() ? "" : ",\n",
                    "{\"name\": \"step\", \"start_us\": ", us,
                    ", \"end_us\": ", us + 50'000, ", \"stream\": 7}");
  }
  const std::string file = dir.Sub("rank0.json");
  ::bubblewatch::testing::WriteFile(
      file,
      absl::StrCat("{\"gpu_kernels\": [", gpu, "],\n\"cpu_events\": []}\n"));
  // As `produce --job forged --batch-events 4 FILE` sends it: 10 batches
  // and the marker.
  absl::StatusOr<Trace> trace = ReadTraceFile(file);
  ASSERT_TRUE(trace.ok()) << trace.status();
  BatchHeader identity{.job = "forged", .host = "h"};
  BatchedTrace stream(*std::move(trace), identity,
                      BatchingOptions{.max_events = 4});
  std::vector<std::pair<std::string, std::string>> real;
  ASSERT_TRUE(
      ReplayTraces({&stream}, [&](absl::string_view key,
                                  std::span<const uint8_t> bytes, int64_t) {
        real.emplace_back(
            std::string(key),
            std::string(reinterpret_cast<const char*>(bytes.data()),
                        bytes.size()));
        return absl::OkStatus();
      }).ok());
  ASSERT_EQ(real.size(), 11u) << "10 batches of 4 events and the marker";
  absl::StatusOr<DecodedBatch> first =
      DecodeEventBatch({reinterpret_cast<const uint8_t*>(real[0].second.data()),
                        real[0].second.size()});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->header.sequence, 0u);
  ASSERT_NE(first->header.producer_id, 0u);

  // The clean run.
  TaskDriver clean_run(ProcessOptions(), dir.Sub("clean"));
  for (const auto& [key, value] : real) clean_run.Send(key, value);
  ASSERT_TRUE(clean_run.RunUntilIdle().ok());
  const std::vector<WindowSummary> clean = clean_run.Stored({"forged"});
  ASSERT_EQ(clean.size(), 4u);
  int64_t compute_ns = 0;
  for (const WindowSummary& w : clean) compute_ns += w.window.job.compute_ns;
  EXPECT_EQ(compute_ns, 40 * 50 * kMs);

  // The forged batch first, then the same file produced again: the real
  // identity (producer id, job, host, rank) with sequence 2^64 - 1 and one
  // kernel of its own at 12.3 s.
  Trace t;
  t.names = {"forged"};
  t.gpu.push_back(GpuActivity{.start_ns = 12'300 * kMs,
                              .end_ns = 12'350 * kMs,
                              .name = 0,
                              .device = 0,
                              .stream = 7,
                              .kind = GpuActivityKind::kKernel});
  BatchHeader header = first->header;
  header.sequence = UINT64_MAX;
  header.end_of_stream = false;
  header.observation.reset();
  EventBatchEncoder encoder(&t);
  TaskDriver forged_run(ProcessOptions(), dir.Sub("forged"));
  forged_run.Send(real[0].first, encoder.Encode(header, 0, 1, 0, 0));
  for (const auto& [key, value] : real) forged_run.Send(key, value);
  ASSERT_TRUE(forged_run.RunUntilIdle().ok());

  auto encoded = [](const std::vector<WindowSummary>& windows) {
    std::vector<std::string> out;
    for (const WindowSummary& w : windows) {
      out.push_back(EncodeWindowSummary(w));
    }
    return out;
  };
  EXPECT_EQ(encoded(forged_run.Stored({"forged"})), encoded(clean))
      << "every real batch counted, the forged one not";
  std::vector<MemoryRecord> letters = forged_run.DeadLetters();
  ASSERT_EQ(letters.size(), 1u);
  EXPECT_EQ(LastHeader(letters[0], "bubblewatch.reason"), "sequence_gap");
  EXPECT_EQ(LastHeader(letters[0], "bubblewatch.source.offset"), "0");
  EXPECT_NE(LastHeader(letters[0], kDeadLetterErrorHeader)
                .find("starts at batch 18446744073709551615"),
            std::string::npos)
      << LastHeader(letters[0], kDeadLetterErrorHeader);
  EXPECT_TRUE(clean_run.DeadLetters().empty());
}

// The dead-letter sink over the seam (dead_letter_sink.h): a dead letter
// the topic refuses for good goes again in its minimal form (no key, no
// payload, the reason kept); refused again, it is counted as lost and the
// processor goes on; a delivery that fails because the broker is away is
// fatal, so no offset moves past it.
TEST(PartitionTask, ARefusedDeadLetterGoesMinimalThenCountsAsLost) {
  const std::string garbage = "this is not an EventBatch";
  {
    ::bubblewatch::testing::TempDir dir;
    TaskDriver driver(ProcessOptions(), dir.Sub("store"));
    ASSERT_TRUE(driver.Advance(absl::ZeroDuration()).ok());  // Started.
    driver.kafka().RefuseDeadLetters(1);
    driver.Send("job-bad", garbage);
    ASSERT_TRUE(driver.RunUntilIdle().ok());
    std::vector<MemoryRecord> letters = driver.DeadLetters();
    ASSERT_EQ(letters.size(), 1u);
    EXPECT_EQ(letters[0].key, "");
    EXPECT_EQ(letters[0].value, "");
    EXPECT_THAT(LastHeader(letters[0], kDeadLetterErrorHeader),
                ::testing::StartsWith("undecodable: "));
    EXPECT_THAT(LastHeader(letters[0], kDeadLetterTruncatedHeader),
                HasSubstr("payload"));
    EXPECT_EQ(driver.stats().dead_letters_lost, 0);
  }
  {
    ::bubblewatch::testing::TempDir dir;
    TaskDriver driver(ProcessOptions(), dir.Sub("store"));
    ASSERT_TRUE(driver.Advance(absl::ZeroDuration()).ok());
    driver.kafka().RefuseDeadLetters(2);
    driver.Send("job-bad", garbage);
    ASSERT_TRUE(driver.RunUntilIdle().ok());
    EXPECT_TRUE(driver.DeadLetters().empty());
    EXPECT_EQ(driver.stats().dead_letters_lost, 1);
    EXPECT_EQ(driver.stats().dlq_by_reason.at("undecodable"), 1);
  }
  {
    ::bubblewatch::testing::TempDir dir;
    TaskDriver driver(ProcessOptions(), dir.Sub("store"));
    ASSERT_TRUE(driver.Advance(absl::ZeroDuration()).ok());
    driver.kafka().FailDeliveries(absl::DeadlineExceededError("timed out"));
    driver.Send("job-bad", garbage);
    absl::Status s = driver.RunUntilIdle();
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_TRUE(driver.DeadLetters().empty());
    EXPECT_FALSE(
        driver.topics().group_offsets.contains({driver.options().topic, 0}))
        << "an offset moved past an undelivered dead letter";
  }
}

// Was ProduceWatchKafka.ResentFilesCountOnceThroughProcessorKills.
// The processor's side of a resend: a topic holding every file twice (a
// producer that resent after a crash, same producer ids and sequences),
// consumed by a processor killed again and again, stores the same windows
// as a single send: the duplicates must not count on replay either. The
// files are real traces, lone ranks of larger jobs (hence --rank-grace 0:
// they close by the idle timeout, not after ranks that never come).
TEST(PartitionTask, ResentFilesCountOnceThroughProcessorKills) {
  const std::string real = std::string(BUBBLEWATCH_TESTDATA_DIR) + "/real/";
  struct File {
    std::string path, job;
    int rank;
  };
  const std::vector<File> files = {
      {"hta/sampled_rank-0.json.gz", "sampled", 0},
      {"hta/sampled_rank-1.json.gz", "sampled", 1},
      {"hta/benchmark_result_2869224_1695835535_trace.json.gz", "bench", 0},
      {"nsys/healthy_1pct.sqlite", "nsys-healthy", 0},
      {"hta/nccl_data.json.gz", "nccl", 0},
      {"hta/rank0.json.gz", "big", 0},  // 67k events.
  };
  const std::vector<std::string> jobs = {"sampled", "bench", "nsys-healthy",
                                         "nccl", "big"};
  // `produce --job JOB --rank RANK --batch-events 200 FILE`, each file.
  auto produce = [&](TaskDriver& driver, int copies) {
    for (const File& f : files) {
      absl::StatusOr<std::vector<MemoryRecord>> records =
          testing::ProduceRecords(
              {real + f.path},
              {.job = f.job, .rank = f.rank, .batch_events = 200});
      ASSERT_TRUE(records.ok()) << f.path << ": " << records.status();
      for (int copy = 0; copy < copies; ++copy) driver.Send(*records);
    }
  };
  auto options = [] {
    StreamProcessorOptions o = ProcessOptions();
    o.windows_topic = "";
    o.rank_grace = absl::ZeroDuration();
    return o;
  };
  ::bubblewatch::testing::TempDir dir;
  TaskDriver reference(options(), dir.Sub("reference"));
  ASSERT_NO_FATAL_FAILURE(produce(reference, 1));
  ASSERT_TRUE(reference.RunUntilIdle().ok());
  const std::vector<WindowSummary> want = reference.Stored(jobs);

  TaskDriver driver(options(), dir.Sub("store"));
  ASSERT_NO_FATAL_FAILURE(produce(driver, 2));
  const int64_t total = static_cast<int64_t>(driver.Input().size());
  for (int kill = 0; kill < 4; ++kill) {
    // Each life reads a different share of the stream before its kill.
    ASSERT_TRUE(driver.Poll(total * (2 + kill) / 20).ok());
    driver.Kill();
  }
  ASSERT_TRUE(driver.RunUntilIdle().ok());
  const std::vector<WindowSummary> got = driver.Stored(jobs);
  ASSERT_FALSE(want.empty());
  for (const std::string& job : jobs) {
    EXPECT_TRUE(
        std::any_of(want.begin(), want.end(),
                    [&](const WindowSummary& w) { return w.job == job; }))
        << "no windows of job " << job;
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    std::string diff;
    EXPECT_TRUE(SameWindow(got[i], want[i], &diff))
        << got[i].job << " window " << got[i].window.start_ns << ": " << diff;
  }
}

// The consumer may hand the task offsets it handled already in the same
// assignment (librdkafka 2.0 pauses a kept partition's fetcher during a
// rebalance and resumes it from its own idea of the position: the likely
// way, not pinned down). Below the
// committed position they looked like a replay (which a restore does, with
// a windower rebuilt from the snapshot), were added to the open windows a
// second time: the rebalance storm once stored a window with a quarter
// more kernels (docs/semantics.md#effectively-once). They are skipped.
TEST(PartitionTask, MessagesSentAgainInOneAssignmentCountOnce) {
  ::bubblewatch::testing::TempDir dir;
  TaskDriver driver(ProcessOptions(), dir.Sub("store"));
  ASSERT_TRUE(driver.SendFleet(Fleet()).ok());
  const int64_t sent = static_cast<int64_t>(driver.Input().size());
  // A third in, every job's first window still open; a commit moves the
  // committed position to where reading stands.
  const int64_t read = sent / 3;
  ASSERT_TRUE(driver.Poll(read).ok());
  ASSERT_TRUE(driver.Advance(absl::Seconds(2)).ok());
  driver.Rewind(0, 0);
  ASSERT_TRUE(driver.RunUntilIdle().ok());

  std::vector<WindowSummary> want = OracleWindows();
  ASSERT_FALSE(want.empty());
  ExpectSameAnalysis(driver.Stored(JobsOf(want)), want);
  const ProcessorStats stats = driver.stats();
  EXPECT_EQ(stats.redelivered_messages, read);
  EXPECT_EQ(stats.messages, sent);
  EXPECT_EQ(stats.replayed_messages, 0);
}

}  // namespace
}  // namespace bubblewatch
