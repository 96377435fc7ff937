// Stage 1 of a split job against a real broker (ctest label `kafka`;
// docs/architecture.md#one-job-across-processors): the rank files of a
// TP2×DP2×PP4 job sent by `bubblewatch produce --split-ranks 16` over a
// 4-partition events topic, run through `bubblewatch process`, leave window
// parts on the parts topic that merge (MergeHostWindowParts, stage 2's
// merge) into the windows `process` stores for the same files sent keyed by
// job; the split run stores no window of its own.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "analysis/window_merge.h"
#include "gtest/gtest.h"
#include "ingest/chrome/chrome_trace_writer.h"
#include "ingest/synthetic/synthetic_parallel_job.h"
#include "processor/job_windower.h"
#include "tests/processor/processor_kafka_test_util.h"
#include "tests/processor/windower_streams.h"
#include "tests/testing/command_flags.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/topic_reader.h"

namespace bubblewatch {
namespace {

// The job of SplitJobTask.PublishedPartsMergeIntoTheSingleStageWindows.
std::vector<std::string> WriteRankFiles(const std::string& dir) {
  // The first root only: the broker test's job is shorter to analyze.
  ParallelJobOptions o = testing::SplitJobOptions(/*host_names=*/true);
  o.roots.resize(1);
  std::vector<std::string> files;
  for (const Trace& t : MakeParallelJob(o).ranks) {
    files.push_back(absl::StrCat(dir, "/rank-", t.rank, ".json.gz"));
    EXPECT_TRUE(WriteChromeTraceFile(t, files.back()).ok());
  }
  return files;
}

std::vector<std::string> Produce(const std::string& topic,
                                 const std::vector<std::string>& files,
                                 int split_ranks) {
  std::vector<std::string> args = {"produce",
                                   "--brokers",
                                   Brokers(),
                                   "--topic",
                                   topic,
                                   "--job",
                                   "split-job",
                                   "--batch-events",
                                   "300",
                                   "--split-ranks",
                                   absl::StrCat(split_ranks),
                                   "--log-level",
                                   "error"};
  args.insert(args.end(), files.begin(), files.end());
  return args;
}

std::vector<std::string> Process(const std::string& topic,
                                 const std::string& store) {
  std::vector<std::string> args = ProcessArgs(topic, store);
  testing::SetFlags(args, {"--window", "40ms", "--lateness", "1s",
                           "--parts-topic", topic + ".parts"});
  return args;
}

TEST(SplitJobKafka, PartsFromProduceSplitRanksMergeIntoTheSingleStageWindows) {
  ::bubblewatch::testing::TempDir dir;
  const std::vector<std::string> files = WriteRankFiles(dir.path());
  ASSERT_EQ(files.size(), 16u);

  // The single stage: keyed by job.
  const std::string whole = Unique("bw-split-whole");
  CreateTopic(whole, 4);
  ASSERT_EQ(RunToEnd(Produce(whole, files, /*split_ranks=*/0)), 0);
  ASSERT_EQ(RunToEnd(Process(whole, dir.Sub("whole"))), 0);
  const std::vector<WindowSummary> want =
      StoredWindows(dir.Sub("whole"), {"split-job"});
  ASSERT_GE(want.size(), 5u);

  // Split: keyed by host over the 4 partitions.
  const std::string split = Unique("bw-split-hosts");
  CreateTopic(split, 4);
  ASSERT_EQ(RunToEnd(Produce(split, files, /*split_ranks=*/16)), 0);
  absl::StatusOr<std::vector<testing::ConsumedMessage>> input =
      testing::ReadTopic(Brokers(), split, 1, absl::Seconds(30));
  ASSERT_TRUE(input.ok()) << input.status();
  std::set<std::string> keys;
  std::set<int32_t> partitions;
  for (const testing::ConsumedMessage& m : *input) {
    keys.insert(m.key);
    partitions.insert(m.partition);
  }
  EXPECT_EQ(keys.size(), 8u) << "one key per host";
  EXPECT_TRUE(keys.contains("split-job@host-0"));
  EXPECT_GE(partitions.size(), 2u);
  ASSERT_EQ(RunToEnd(Process(split, dir.Sub("split"))), 0);
  EXPECT_TRUE(StoredWindows(dir.Sub("split"), {"split-job"}).empty());

  absl::StatusOr<int64_t> count = testing::StoredMessageCount(
      Brokers(), split + ".parts", absl::Seconds(10));
  ASSERT_TRUE(count.ok()) << count.status();
  ASSERT_GT(*count, 0);
  absl::StatusOr<std::vector<testing::ConsumedMessage>> parts =
      testing::ReadTopic(Brokers(), split + ".parts",
                         static_cast<size_t>(*count), absl::Seconds(30));
  ASSERT_TRUE(parts.ok()) << parts.status();
  // Stage 2 keeps one part per (host, window start).
  std::map<int64_t, std::map<std::string, HostWindowPart>> by_window;
  for (const testing::ConsumedMessage& m : *parts) {
    EXPECT_EQ(m.key, "split-job");
    absl::StatusOr<HostWindowPart> part = DecodeHostWindowPart(m.value);
    ASSERT_TRUE(part.ok()) << part.status();
    by_window[part->window.start_ns][part->host] = *std::move(part);
  }
  ASSERT_EQ(by_window.size(), want.size());
  for (const WindowSummary& w : want) {
    SCOPED_TRACE(absl::StrCat("window ", w.window.start_ns));
    ASSERT_TRUE(by_window.contains(w.window.start_ns));
    std::vector<HostWindowPart> of;
    for (auto& [host, part] : by_window[w.window.start_ns]) of.push_back(part);
    absl::StatusOr<WindowSummary> got =
        MergeHostWindowParts(of, WindowerOptions().top_bubbles_per_window);
    ASSERT_TRUE(got.ok()) << got.status();
    got->closed_by = w.closed_by;
    got->host_skew_ns = w.host_skew_ns;
    WindowSummary expected = w;
    std::string diff;
    EXPECT_TRUE(SameWindow(*got, expected, &diff)) << diff;
  }
}

}  // namespace
}  // namespace bubblewatch
