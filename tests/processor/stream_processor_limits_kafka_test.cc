// The processor's stateful limits and its clock-skew report against a real
// Kafka broker (ctest label `kafka`):
//   - a hostile producer's batches (far-future timestamps, hours of spread,
//     a stream of made-up job names) go to the dead-letter topic with
//     `too_many_open_windows` / `too_many_jobs`, are counted per job and
//     producer on /metrics, and the other jobs' windows equal the oracle;
//   - the processor is SIGKILLed with those rejections inside its replay
//     range; the restarted one decides the same from the ledger in the
//     partition snapshot: no dead letter twice, no rejected event in a
//     window;
//   - one job, two hosts whose clocks are 3 minutes apart: every window
//     closes and equals the oracle, and the skew is reported (window field,
//     warning line, /metrics).
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "analysis/bubble_analyzer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "ingest/event_producer.h"
#include "schemas/event_batch_codec.h"
#include "tests/processor/processor_kafka_test_util.h"
#include "tests/testing/command_flags.h"
#include "tests/testing/files.h"
#include "tests/testing/poll.h"
#include "tests/testing/topic_reader.h"

namespace bubblewatch {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kBase = int64_t{1'767'225'600} * 1'000'000'000;
constexpr int64_t kSec = 1'000'000'000;
constexpr int64_t kMs = 1'000'000;

using testing::PollUntil;
using testing::ReadFile;

// The URL a process started with `--http 127.0.0.1:0` logged to `log`.
std::string HttpUrl(const std::string& log) {
  std::string url;
  PollUntil(
      [&] {
        const std::string text = ReadFile(log);
        const size_t at = text.find("serving HTTP on ");
        if (at == std::string::npos) return false;
        const size_t begin = at + 16;
        const size_t end = text.find_first_of(" \n", begin);
        if (end == std::string::npos) return false;
        url = text.substr(begin, end - begin);
        return true;
      },
      absl::Seconds(60), absl::Milliseconds(200));
  return url;
}

std::string Metrics(const std::string& url) {
  httplib::Client client(url);
  auto r = client.Get("/metrics");
  return r && r->status == 200 ? r->body : "";
}

// A dead letter: the reason header and the original message.
struct DeadLetter {
  std::string reason;
  std::string key;
  std::string payload;
};

// Every message of `topic` (partition 0) from the beginning to its end.
std::vector<DeadLetter> ReadDeadLetters(const std::string& topic) {
  std::vector<DeadLetter> out;
  for (TopicMessage& m : ReadTopicMessages(topic)) {
    out.push_back(DeadLetter{.reason = m.LastHeader("bubblewatch.error"),
                             .key = std::move(m.key),
                             .payload = std::move(m.payload)});
  }
  return out;
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

class Sender {
 public:
  explicit Sender(const std::string& topic) {
    KafkaConfig config(Brokers());
    EventProducerOptions options;
    options.topic = topic;
    absl::StatusOr<std::unique_ptr<EventProducer>> p =
        EventProducer::Create(config, options);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return;
    producer_ = *std::move(p);
    EXPECT_TRUE(producer_->WaitUntilReachable(absl::Seconds(30)).ok());
  }
  // Sends the events of `s` starting in [from, to) as one batch (GPU and
  // CPU events are kept in start order by AddKernels).
  void Send(JobStream& s, int64_t from, int64_t to) {
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
    std::span<const uint8_t> bytes = encoder.Encode(header, g0, g1, c0, c1);
    std::vector<uint8_t> copy(bytes.begin(), bytes.end());
    ASSERT_TRUE(producer_ != nullptr);
    ASSERT_TRUE(
        producer_->Send(s.job, copy, static_cast<int64_t>(g1 - g0 + c1 - c0))
            .ok());
  }
  void Flush() { ASSERT_TRUE(producer_->Flush(absl::Seconds(30)).ok()); }

 private:
  std::unique_ptr<EventProducer> producer_;
};

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

TEST(StreamProcessorLimitsKafka,
     HostileBatchesGoToTheDlqAndStayThereAfterAKill) {
  const std::string topic = Unique("bw-limits");
  const std::string store = ::testing::TempDir() + "/" + topic;
  const std::string log1 = store + "-1.log", log2 = store + "-2.log";

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

  int hostile = 0;
  {
    Sender sender(topic);
    for (int64_t s = 0; s < 40; s += 2) {
      const int64_t from = kBase + s * kSec, to = from + 2 * kSec;
      sender.Send(a, from, to);
      sender.Send(b, from, to);
      sender.Send(rogue, from, to);
      // Hostile batches mid-stream and in the last seconds (the kill below
      // leaves those inside the replay range: their windows are open).
      if (s == 10 || s == 36) {
        future.sequence = rogue.sequence;
        sender.Send(future, INT64_MIN, INT64_MAX);
        spread.sequence = future.sequence;
        sender.Send(spread, INT64_MIN, INT64_MAX);
        rogue.sequence = spread.sequence;
        hostile += 2;
      }
      if (s == 12 || s >= 34) {
        JobStream& fake = fakes[hostile % fakes.size()];
        sender.Send(fake, INT64_MIN, INT64_MAX);
        ++hostile;
      }
    }
    sender.Flush();
  }

  // 1. A processor that keeps its windows open (long idle timeout) until
  //    it is killed; at most 3 jobs per partition.
  std::vector<std::string> args = ProcessArgs(topic, store);
  testing::SetFlags(args, {"--lateness", "2s", "--max-jobs-per-partition", "3",
                           "-X", "group.instance.id=limits-member"});
  std::vector<std::string> first = args;
  testing::SetFlags(first, {"--idle-timeout", "120s", "--exit-when-idle", "0",
                            "--http", "127.0.0.1:0", "--log-level", "info"});
  pid_t pid = Spawn(first, log1);
  const std::string url = HttpUrl(log1);
  ASSERT_FALSE(url.empty()) << ReadFile(log1);
  std::vector<DeadLetter> before;
  EXPECT_TRUE(PollUntil(
      [&] {
        before = ReadDeadLetters(topic + ".dlq");
        return static_cast<int>(before.size()) >= hostile;
      },
      absl::Seconds(60), absl::Milliseconds(200)))
      << ReadFile(log1);
  // Counted by reason and by (job, producer).
  std::string metrics;
  EXPECT_TRUE(PollUntil(
      [&] {
        metrics = Metrics(url);
        return metrics.find("reason=\"too_many_jobs\"") != std::string::npos;
      },
      absl::Seconds(20), absl::Milliseconds(200)));
  EXPECT_THAT(metrics,
              HasSubstr("bubblewatch_processor_dlq_messages_total{reason=\"too_"
                        "many_open_windows\"} 4"));
  EXPECT_THAT(metrics, HasSubstr("bubblewatch_processor_dlq_messages_total{"
                                 "reason=\"too_many_jobs\"} 4"));
  EXPECT_THAT(metrics,
              HasSubstr("bubblewatch_processor_dlq_batches_by_source_total{job="
                        "\"rogue\",producer=\"66\"} 4"));
  EXPECT_THAT(metrics,
              HasSubstr("bubblewatch_processor_dlq_batches_by_source_total{job="
                        "\"made-up-2\",producer=\"66\"}"));
  // Everything read is committed to the store within the commit interval
  // (1 s); then the kill leaves the last commit with open windows and a
  // replay range. Committed: the store's position on every partition is the
  // topic's end.
  EXPECT_TRUE(PollUntil(
      [&] {
        absl::StatusOr<int64_t> end =
            testing::StoredMessageCount(Brokers(), topic, absl::Seconds(10));
        absl::StatusOr<std::unique_ptr<WindowStoreReader>> reader =
            OpenRocksDbWindowStoreReadOnly(store);
        if (!end.ok() || !reader.ok()) return false;
        int64_t committed = 0;
        for (int32_t p = 0; p < 16; ++p) {
          absl::StatusOr<std::optional<PartitionProgress>> progress =
              (*reader)->Progress(topic, p);
          if (progress.ok() && progress->has_value()) {
            committed += (*progress)->committed_position;
          }
        }
        return committed == *end;
      },
      absl::Seconds(30), absl::Milliseconds(200)))
      << ReadFile(log1);
  ::kill(pid, SIGKILL);
  EXPECT_EQ(Wait(pid), 128 + SIGKILL);

  ASSERT_EQ(static_cast<int>(before.size()), hostile);
  int open_windows = 0, jobs = 0;
  for (const DeadLetter& d : before) {
    if (d.reason.starts_with("too_many_open_windows: ")) {
      ++open_windows;
      EXPECT_EQ(d.key, "rogue");
    } else if (d.reason.starts_with("too_many_jobs: ")) {
      ++jobs;
      EXPECT_THAT(d.key, ::testing::StartsWith("made-up-"));
    } else {
      ADD_FAILURE() << "unexpected dead letter: " << d.reason;
    }
  }
  EXPECT_EQ(open_windows, 4);
  std::cout << "dead letters before the kill: " << before.size() << " ("
            << open_windows << " too_many_open_windows, " << jobs
            << " too_many_jobs)\n";
  EXPECT_EQ(jobs, hostile - 4);

  // 2. Restart: it replays the rejected batches' offsets and decides the
  //    same from the ledger, then closes the windows.
  std::vector<std::string> second = args;
  testing::SetFlags(second, {"--idle-timeout", "2s", "--exit-when-idle", "4s",
                             "--log-level", "info"});
  pid = Spawn(second, log2);
  ASSERT_EQ(Wait(pid), 0) << ReadFile(log2);
  const std::string restart = ReadFile(log2);
  if (size_t at = restart.find("limit rejections"); at != std::string::npos) {
    const size_t from = restart.rfind(", ", at);
    std::cout << "restart replays" << restart.substr(from + 1, at - from + 15)
              << "\n";
  }
  EXPECT_THAT(restart, HasSubstr("state from local store (3 jobs, "));
  // The replay covered rejections (else this test shows nothing).
  EXPECT_THAT(restart, ::testing::Not(HasSubstr(" 0 limit rejections")))
      << restart;
  // Nothing dead-lettered again.
  EXPECT_THAT(restart, ::testing::Not(HasSubstr(".dlq: too_many")));

  std::vector<DeadLetter> after = ReadDeadLetters(topic + ".dlq");
  EXPECT_EQ(after.size(), before.size()) << "a dead letter was sent twice";
  std::set<std::string> distinct;
  for (const DeadLetter& d : after) distinct.insert(d.payload);
  EXPECT_EQ(distinct.size(), after.size());

  // The healthy jobs' windows and the rogue's accepted ones equal the
  // oracle; no made-up job has a window.
  for (const JobStream* s : {&a, &b, &rogue}) {
    std::vector<WindowSummary> want = Oracle(*s);
    ASSERT_EQ(want.size(), 4u) << s->job;
    std::vector<WindowSummary> got = StoredWindows(store, {s->job});
    SCOPED_TRACE(s->job);
    ExpectSameAnalysis(got, want);
    for (const WindowSummary& w : got) EXPECT_EQ(w.late_events, 0);
  }
  for (const JobStream& fake : fakes) {
    EXPECT_TRUE(StoredWindows(store, {fake.job}).empty()) << fake.job;
  }
  std::filesystem::remove_all(store);
  std::filesystem::remove(log1);
  std::filesystem::remove(log2);
}

// The job table does not fill up with a fleet's turnover: a job without
// events for --job-expiry (event time) and without open windows is
// forgotten when a new job needs its place.
TEST(StreamProcessorLimitsKafka, ExpiredJobsMakeRoomForNewOnes) {
  const std::string topic = Unique("bw-expiry");
  const std::string store = ::testing::TempDir() + "/" + topic;
  const std::string log = store + ".log";
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
  Sender sender(topic);
  sender.Send(old_job, INT64_MIN, INT64_MAX);
  sender.Send(next, INT64_MIN, INT64_MAX);
  sender.Flush();

  std::vector<std::string> args = ProcessArgs(topic, store);
  testing::SetFlags(args, {"--lateness", "2s", "--max-jobs-per-partition", "2",
                           "--job-expiry", "1h", "--idle-timeout", "2s",
                           "--exit-when-idle", "10s", "--log-level", "info"});
  pid_t pid = Spawn(args, log);
  // Both jobs closed for idleness (their windows stored): "old" is 2 h
  // behind its partition and holds nothing open.
  EXPECT_TRUE(PollUntil(
      [&] {
        const std::string text = ReadFile(log);
        return text.find("job next idle for 2s") != std::string::npos &&
               text.find("job old idle for 2s") != std::string::npos;
      },
      absl::Seconds(60), absl::Milliseconds(200)))
      << ReadFile(log);
  sender.Send(newest, INT64_MIN, INT64_MAX);  // Takes old's place.
  sender.Send(extra, INT64_MIN, INT64_MAX);   // The table is full again.
  sender.Flush();
  ASSERT_EQ(Wait(pid), 0) << ReadFile(log);
  const std::string text = ReadFile(log);
  EXPECT_THAT(text, HasSubstr("job old forgotten"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("job next forgotten")));
  EXPECT_EQ(StoredWindows(store, {"newest"}).size(), 1u);
  EXPECT_TRUE(StoredWindows(store, {"extra"}).empty());
  std::vector<DeadLetter> dlq = ReadDeadLetters(topic + ".dlq");
  ASSERT_EQ(dlq.size(), 1u);
  EXPECT_EQ(dlq[0].key, "extra");
  EXPECT_THAT(dlq[0].reason, ::testing::StartsWith("too_many_jobs: "));
  // The forgotten job's windows stay in the store (retention decides).
  EXPECT_EQ(StoredWindows(store, {"old"}).size(), 1u);
  std::filesystem::remove_all(store);
  std::filesystem::remove(log);
}

TEST(StreamProcessorLimitsKafka,
     ClockSkewOfMinutesClosesEveryWindowAndIsReported) {
  const std::string topic = Unique("bw-skew");
  const std::string store = ::testing::TempDir() + "/" + topic;
  const std::string log = store + ".log";
  constexpr int64_t kSkew = 180 * kSec;  // h-ahead's clock runs 3 min ahead.
  constexpr int64_t kRun = 240 * kSec;   // Real time both hosts stream.
  JobStream behind{.job = "skewed", .host = "h-behind", .producer_id = 1};
  JobStream ahead{.job = "skewed", .host = "h-ahead", .producer_id = 2};
  AddKernels(behind.trace, kBase, kBase + kRun, 100, 60, 0);
  // Correlation ids unique within the job (the windower merges hosts).
  AddKernels(ahead.trace, kBase + kSkew, kBase + kSkew + kRun, 100, 40, 1,
             1'000'000);
  {
    Sender sender(topic);
    // Both stream at once: batch i of each covers real seconds [2i, 2i+2).
    for (int64_t t = 0; t < kRun; t += 2 * kSec) {
      sender.Send(behind, kBase + t, kBase + t + 2 * kSec);
      sender.Send(ahead, kBase + kSkew + t, kBase + kSkew + t + 2 * kSec);
    }
    sender.Flush();
  }
  JobStream both = behind;
  for (const GpuActivity& g : ahead.trace.gpu) both.trace.gpu.push_back(g);
  for (const CpuEvent& c : ahead.trace.cpu) both.trace.cpu.push_back(c);
  const std::vector<WindowSummary> want = Oracle(both);
  ASSERT_EQ(want.size(), 42u);  // [0, 420) s.

  std::vector<std::string> args = ProcessArgs(topic, store);
  testing::SetFlags(args, {"--lateness", "2s", "--idle-timeout", "8s",
                           "--exit-when-idle", "10s", "--skew-warning", "60s",
                           "--http", "127.0.0.1:0", "--log-level", "info"});
  pid_t pid = Spawn(args, log);
  const std::string url = HttpUrl(log);
  ASSERT_FALSE(url.empty()) << ReadFile(log);
  // While the job is open (until its idle timeout) /metrics shows the skew.
  std::string metrics;
  EXPECT_TRUE(PollUntil(
      [&] {
        metrics = Metrics(url);
        return metrics.find("bubblewatch_processor_job_host_skew_seconds{") !=
               std::string::npos;
      },
      absl::Seconds(60), absl::Milliseconds(200)))
      << ReadFile(log);
  EXPECT_THAT(metrics, HasSubstr("bubblewatch_processor_job_host_skew_seconds{"
                                 "job=\"skewed\",ahead=\"h-ahead\",behind="
                                 "\"h-behind\"} 17"));
  ASSERT_EQ(Wait(pid), 0) << ReadFile(log);
  const std::string text = ReadFile(log);
  EXPECT_THAT(text, HasSubstr("job skewed: host h-ahead is 2m5"))
      << "the skew warning (178 s: one batch less than 3 min)";
  EXPECT_THAT(text, HasSubstr("ahead of host h-behind in event time"));

  // Every window closed and equals the oracle; those the watermark closed
  // carry the skew measured then (3 min less at most one batch, 2 s).
  std::vector<WindowSummary> got = StoredWindows(store, {"skewed"});
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
  std::cout << got.size() << " windows, " << by_watermark
            << " closed by the watermark; host_skew_ns of the first: "
            << (got.empty() ? 0 : got.front().host_skew_ns) << "\n";
  std::filesystem::remove_all(store);
  std::filesystem::remove(log);
}

}  // namespace
}  // namespace bubblewatch
