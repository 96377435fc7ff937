// The fleet period query from the store's running sums (QueryFleet) against
// its reference, the full scan (QueryFleetByScan): on randomized stores —
// many jobs, windows rewritten by late events and replayed, windows closed
// out of order, windows deleted by tombstones (serve --brokers), partial
// and zero-length windows, retention applied between
// commits, period edges at arbitrary ns — every report must be identical,
// through the writer and through a read-only instance; and a store written
// before the sums existed is answered the same (the reader falls back to
// the scan; a writer builds the sums when it opens it).
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "storage/window_key.h"
#include "storage/window_queries.h"
#include "storage/window_store.h"
#include "tests/storage/query_test_windows.h"
#include "tests/testing/temp_dir.h"

namespace bubblewatch {
namespace {

using query_test::kSecond;
using query_test::kT0;

std::string Describe(const KernelRef& k) {
  return absl::StrCat(k.name, "/", k.start_ns, "/", k.end_ns, "/", k.stream);
}

std::string Describe(const PeriodStats& p) {
  return absl::StrCat("w=", p.windows, " span=", p.span_ns,
                      " compute=", p.compute_ns, " bubble=", p.bubble_ns,
                      " attr=", absl::StrJoin(p.attribution, ","));
}

std::string Describe(const FleetJobPeriod& p) {
  return absl::StrCat(
      Describe(p.stats), " partial=", p.partial_windows,
      " capacity=", p.capacity_ns, " collective=", p.collective_windows,
      " comm_wait=", p.comm_wait_ns, " straggler_wait=", p.straggler_wait_ns,
      " straggler_cost=", p.straggler_cost_ns);
}

std::string Describe(const WindowPoint& w) {
  const UtilizationStats& u = w.stats;
  return absl::StrCat(
      "[", w.start_ns, ",", w.end_ns, ") span=", u.span_ns,
      " compute=", u.compute_ns, " bubble=", u.bubble_ns,
      " attr=", absl::StrJoin(u.attribution, ","),
      " largest=", u.largest_bubble_ns, "@", u.largest_bubble_start_ns,
      " culprit=",
      u.culprit_before_bubble ? Describe(*u.culprit_before_bubble) : "-",
      " dev=", w.devices, " ev=", w.gpu_events, "/", w.cpu_events, "/",
      w.late_events, " closed=", static_cast<int>(w.closed_by),
      " skew=", w.host_skew_ns);
}

// Every field of a report, one entry a line, so a difference reads easily.
std::string Describe(const FleetReport& r) {
  std::string out =
      absl::StrCat("by=", r.by.Name(), " from=", r.from_ns, " to=", r.to_ns,
                   " jobs=", r.jobs, "\nall: ", Describe(r.all), "\n");
  for (const FleetEntry& e : r.entries) {
    absl::StrAppend(&out, e.job, " score=", e.score, " ", Describe(e.period),
                    " latest ", Describe(e.latest), "\n");
  }
  return out;
}

// A random window of `job` at [start, start + length): 1-4 devices, any
// span up to the whole window (so some are partial), stats split over
// causes, a culprit and events that vary with `version` (a rewrite).
WindowSummary RandomWindow(std::mt19937_64& rng, const std::string& job,
                           int64_t start, int64_t length, int64_t version) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  WindowSummary s;
  s.job = job;
  s.window.start_ns = start;
  s.window.end_ns = start + length;
  const int devices = static_cast<int>(uniform(1, 4));
  for (int d = 0; d < devices; ++d) {
    UtilizationStats u;
    u.span_ns = uniform(0, 3) == 0 ? uniform(0, length) : length;
    u.compute_ns = uniform(0, u.span_ns);
    u.bubble_ns = u.span_ns - u.compute_ns;
    int64_t left = u.bubble_ns;
    for (int c = 0; c < kNumBubbleCauses - 1; ++c) {
      u.attribution[c] = uniform(0, left / 2);
      left -= u.attribution[c];
    }
    u.attribution[kNumBubbleCauses - 1] = left;
    u.largest_bubble_ns = uniform(0, u.bubble_ns);
    u.largest_bubble_start_ns = start + uniform(0, length);
    u.culprit_before_bubble = KernelRef{absl::StrCat("k", version), start,
                                        u.largest_bubble_start_ns, d};
    UtilizationStats& j = s.window.job;
    j.span_ns += u.span_ns;
    j.compute_ns += u.compute_ns;
    j.bubble_ns += u.bubble_ns;
    for (int c = 0; c < kNumBubbleCauses; ++c) {
      j.attribution[c] += u.attribution[c];
    }
    if (u.largest_bubble_ns >= j.largest_bubble_ns) {
      j.largest_bubble_ns = u.largest_bubble_ns;
      j.largest_bubble_start_ns = u.largest_bubble_start_ns;
      j.culprit_before_bubble = u.culprit_before_bubble;
    }
    s.window.devices.push_back(
        DeviceWindow{.device = d, .stats = u, .kernels = uniform(1, 100)});
  }
  s.gpu_events = uniform(1, 1000);
  s.cpu_events = uniform(1, 1000);
  s.late_events = version;
  // A multi-rank window now and then: ranks that waited in collectives and
  // stragglers that made them wait (what comm_wait and straggler_wait sum).
  if (uniform(0, 2) == 0) {
    WindowCollectives c;
    c.kernels = uniform(2, 50);
    const int ranks = static_cast<int>(uniform(2, 4));
    for (int r = 0; r < ranks; ++r) {
      c.ranks.push_back(RankWindow{.rank = r,
                                   .host = absl::StrCat("h", r % 2),
                                   .span_ns = length,
                                   .comm_wait_ns = uniform(0, length / 4),
                                   .wait_caused_ns = 0});
    }
    for (int r = 0; r < ranks; ++r) {
      if (uniform(0, 1) == 0) continue;
      c.stragglers.push_back(
          StragglerWindow{.rank = r,
                          .wait_caused_ns = uniform(0, length / 2),
                          .arrived_last = uniform(1, 9)});
    }
    // A what-if now and then (what straggler_cost sums).
    if (uniform(0, 1) == 0) {
      c.job_ns = length;
      c.job_ns_without_stragglers = length - uniform(0, length / 4);
    }
    s.collectives = std::move(c);
  }
  s.closed_by = kAllClosedBy[uniform(
      0, static_cast<int64_t>(std::size(kAllClosedBy)) - 1)];
  return s;
}

// The store's windows, as the test wrote them: what a fleet has.
struct Job {
  std::string name;
  int64_t length = 0;            // Window length, ns.
  int64_t next = 0;              // Index of the next new window.
  std::vector<int64_t> skipped;  // Indexes left out, to close later.
};

int64_t StartOf(const Job& j, int64_t index) { return kT0 + index * j.length; }

void ExpectSameFleet(const WindowStoreReader& store, std::mt19937_64& rng,
                     int64_t lo, int64_t hi, int jobs) {
  auto uniform = [&](int64_t a, int64_t b) {
    return std::uniform_int_distribution<int64_t>(a, b)(rng);
  };
  const std::vector<std::string> orders = {
      "bubble_time", "bubble_ratio",   "cause:host_sync", "cause:data_loading",
      "comm_wait",   "straggler_wait", "straggler_cost"};
  for (int q = 0; q < 12; ++q) {
    JobPeriod period;
    if (q % 3 == 0) {
      period = JobPeriod::Last(absl::Nanoseconds(uniform(1, hi - lo + 1)));
    } else {
      // Edges at arbitrary ns, inside, around and outside the data.
      const int64_t from = uniform(lo - 100 * kSecond, hi);
      const int64_t to =
          from + uniform(1, std::min<int64_t>(
                                hi - from + 200 * kSecond,
                                absl::ToInt64Nanoseconds(kMaxQueryRange)));
      period = JobPeriod::Between(from, to);
    }
    const FleetOrder by = *ParseFleetOrder(orders[static_cast<size_t>(
        uniform(0, static_cast<int64_t>(orders.size()) - 1))]);
    const int top = static_cast<int>(uniform(1, jobs + 3));
    absl::StatusOr<FleetReport> fast = QueryFleet(store, period, by, top);
    absl::StatusOr<FleetReport> scan = QueryFleetByScan(store, period, by, top);
    ASSERT_TRUE(fast.ok()) << fast.status();
    ASSERT_TRUE(scan.ok()) << scan.status();
    EXPECT_EQ(Describe(*fast), Describe(*scan))
        << "period last=" << period.last << " from=" << period.from_ns
        << " to=" << period.to_ns << " by " << by.Name() << " top " << top;
  }
}

// Whether the store's sums answer: a store with them must never fall back.
bool HasSums(const WindowStoreReader& store) {
  auto sums =
      store.PeriodSumsOfEveryJob(absl::InfinitePast(), absl::InfiniteFuture());
  EXPECT_TRUE(sums.ok()) << sums.status();
  return sums.ok() && sums->has_value();
}

class FleetSumsOracleTest : public ::testing::TestWithParam<int> {};

TEST_P(FleetSumsOracleTest, RunningSumsAnswerAsTheFullScan) {
  std::mt19937_64 rng(static_cast<uint64_t>(GetParam()));
  auto uniform = [&](int64_t a, int64_t b) {
    return std::uniform_int_distribution<int64_t>(a, b)(rng);
  };
  testing::TempDir dir;
  auto opened = OpenRocksDbWindowStore(dir.path());
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<WindowStore> store = *std::move(opened);
  auto reader = OpenRocksDbWindowStoreReadOnly(dir.path());
  ASSERT_TRUE(reader.ok()) << reader.status();

  const int kJobs = 30;
  std::vector<Job> jobs;
  for (int j = 0; j < kJobs; ++j) {
    // Window lengths that do not divide each other: edges fall anywhere.
    const int64_t lengths[] = {10 * kSecond, 7 * kSecond + 3, 60 * kSecond,
                               1'234'567'891};
    jobs.push_back(Job{.name = absl::StrCat("job-", j),
                       .length = lengths[uniform(0, 3)],
                       .skipped = {}});
  }
  int64_t version = 0;
  int64_t hi = kT0;
  for (int round = 0; round < 12; ++round) {
    StoreBatch batch;
    for (Job& j : jobs) {
      if (uniform(0, 4) == 0) continue;  // Idle this round.
      const int64_t n = uniform(1, 25);
      for (int64_t k = 0; k < n; ++k) {
        const int64_t i = j.next++;
        if (uniform(0, 9) == 0) {
          j.skipped.push_back(i);  // Closed later, out of order.
          continue;
        }
        const int64_t length = uniform(0, 30) == 0 ? 0 : j.length;
        batch.windows.push_back(
            RandomWindow(rng, j.name, StartOf(j, i), length, version));
        hi = std::max(hi, StartOf(j, i) + j.length);
      }
      // Late events: an earlier window rewritten, sometimes twice in a batch.
      if (j.next > 0 && uniform(0, 2) == 0) {
        const int64_t i =
            uniform(std::max<int64_t>(0, j.next - 40), j.next - 1);
        batch.windows.push_back(
            RandomWindow(rng, j.name, StartOf(j, i), j.length, ++version));
        if (uniform(0, 3) == 0) {
          batch.windows.push_back(
              RandomWindow(rng, j.name, StartOf(j, i), j.length, ++version));
        }
      }
      // A window closed out of order.
      if (!j.skipped.empty() && uniform(0, 2) == 0) {
        const int64_t i = j.skipped.back();
        j.skipped.pop_back();
        batch.windows.push_back(
            RandomWindow(rng, j.name, StartOf(j, i), j.length, ++version));
      }
      batch.jobs.push_back(JobUpdate{.job = j.name});
    }
    // A replay: the batch written twice, identical the second time.
    ASSERT_TRUE(store->Commit(batch).ok());
    if (uniform(0, 3) == 0) {
      ASSERT_TRUE(store->Commit(batch).ok());
    }
    // Tombstones (serve --brokers applies the windows topic's): a few
    // windows of some jobs deleted, newest, oldest or in between, some
    // never stored.
    if (uniform(0, 1) == 0) {
      StoreBatch deletes;
      for (const Job& j : jobs) {
        if (j.next == 0 || uniform(0, 3) != 0) continue;
        for (int64_t k = uniform(1, 3); k > 0; --k) {
          deletes.window_deletes.push_back(WindowDelete{
              .job = j.name, .start_ns = StartOf(j, uniform(0, j.next))});
        }
      }
      ASSERT_TRUE(store->Commit(deletes).ok());
    }
    if (round % 4 == 3) {
      auto trimmed = store->ApplyRetention(absl::Seconds(uniform(30, 2000)));
      ASSERT_TRUE(trimmed.ok()) << trimmed.status();
    }
    ASSERT_TRUE(HasSums(*store));
    ExpectSameFleet(*store, rng, kT0, hi, kJobs);
    if (::testing::Test::HasFailure()) return;
  }
  ASSERT_TRUE((*reader)->Refresh().ok());
  ASSERT_TRUE(HasSums(**reader));
  ExpectSameFleet(**reader, rng, kT0, hi, kJobs);
  // The collective orders compared above ranked real figures: jobs with
  // waits, highest first.
  for (const char* order : {"comm_wait", "straggler_wait", "straggler_cost"}) {
    absl::StatusOr<FleetReport> r =
        QueryFleet(*store, JobPeriod::Last(kMaxQueryRange),
                   *ParseFleetOrder(order), kJobs);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_FALSE(r->entries.empty());
    EXPECT_GT(r->entries.front().score, 0) << order;
    EXPECT_GT(r->all.collective_windows, 0);
    for (size_t i = 1; i < r->entries.size(); ++i) {
      EXPECT_GE(r->entries[i - 1].score, r->entries[i].score) << order;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, FleetSumsOracleTest, ::testing::Range(1, 7));

// Removes the running sums of `jobs_to_strip` (all when empty) and the
// marker, as a store written before the sums existed (or a build cut short)
// has them.
void StripSums(const std::string& path,
               const std::vector<std::string>& jobs_to_strip) {
  std::vector<std::string> names;
  ASSERT_TRUE(
      rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), path, &names).ok());
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  for (const std::string& n : names) {
    families.emplace_back(n, rocksdb::ColumnFamilyOptions());
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(
      rocksdb::DB::Open(rocksdb::DBOptions(), path, families, &handles, &raw)
          .ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteBatch wb;
  if (jobs_to_strip.empty()) {
    ASSERT_TRUE(wb.DeleteRange(db->DefaultColumnFamily(),
                               std::string("window_sums\0", 12),
                               std::string("window_sums\1", 12))
                    .ok());
  }
  for (const std::string& job : jobs_to_strip) {
    ASSERT_TRUE(wb.DeleteRange(db->DefaultColumnFamily(), SumsKeyPrefix(job),
                               SumsKeyLimit(job))
                    .ok());
  }
  ASSERT_TRUE(wb.Delete(db->DefaultColumnFamily(), SumsCompleteKey()).ok());
  ASSERT_TRUE(db->Write(rocksdb::WriteOptions(), &wb).ok());
  for (rocksdb::ColumnFamilyHandle* h : handles) {
    ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
  }
  ASSERT_TRUE(db->Close().ok());
}

// Turns the store's running sums into format 1 (before the collective
// fields: 1 + 2 x 14 i64s, here all 0) with its marker "1", as a store
// written by an earlier version has them.
void MakeSumsFormatOne(const std::string& path) {
  std::vector<std::string> names;
  ASSERT_TRUE(
      rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), path, &names).ok());
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  for (const std::string& n : names) {
    families.emplace_back(n, rocksdb::ColumnFamilyOptions());
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(
      rocksdb::DB::Open(rocksdb::DBOptions(), path, families, &handles, &raw)
          .ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  const std::string old_record =
      std::string(1, '\x01') + std::string(2 * 14 * 8, '\0');
  rocksdb::WriteBatch wb;
  int records = 0;
  std::unique_ptr<rocksdb::Iterator> it(
      db->NewIterator(rocksdb::ReadOptions(), db->DefaultColumnFamily()));
  for (it->Seek("window_sums"); it->Valid(); it->Next()) {
    const std::string key = it->key().ToString();
    if (key.rfind("window_sums", 0) != 0) break;
    const bool newest = key.rfind(SumsLastKeyPrefix(), 0) == 0;
    ASSERT_TRUE(wb.Put(db->DefaultColumnFamily(), key,
                       newest ? it->value().ToString().substr(0, 8) + old_record
                              : old_record)
                    .ok());
    ++records;
  }
  ASSERT_TRUE(it->status().ok());
  it.reset();
  ASSERT_GT(records, 0);
  ASSERT_TRUE(wb.Put(db->DefaultColumnFamily(), SumsCompleteKey(), "1").ok());
  ASSERT_TRUE(db->Write(rocksdb::WriteOptions(), &wb).ok());
  for (rocksdb::ColumnFamilyHandle* h : handles) {
    ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
  }
  ASSERT_TRUE(db->Close().ok());
}

// Writes a small random fleet and closes the store.
void WriteFleet(const std::string& path, std::mt19937_64& rng) {
  auto store = OpenRocksDbWindowStore(path);
  ASSERT_TRUE(store.ok()) << store.status();
  StoreBatch batch;
  for (int j = 0; j < 12; ++j) {
    for (int64_t i = 0; i < 50; ++i) {
      batch.windows.push_back(RandomWindow(rng, absl::StrCat("job-", j),
                                           kT0 + i * 10 * kSecond, 10 * kSecond,
                                           0));
    }
  }
  ASSERT_TRUE((*store)->Commit(batch).ok());
  ASSERT_TRUE((*store)->ApplyRetention(absl::Seconds(300)).ok());
}

TEST(FleetSums, StoreWithoutCurrentSumsFallsBackReadOnlyAndIsRebuilt) {
  for (const int variant : {0, 1, 2}) {
    const bool partial = variant == 1;
    SCOPED_TRACE(variant == 0   ? "a store from before sums"
                 : variant == 1 ? "a build cut short"
                                : "sums of format 1, before collectives");
    std::mt19937_64 rng(static_cast<uint64_t>(12 - variant));
    testing::TempDir dir;
    WriteFleet(dir.path(), rng);
    if (::testing::Test::HasFatalFailure()) return;
    if (variant == 2) {
      MakeSumsFormatOne(dir.path());
    } else {
      StripSums(dir.path(), partial ? std::vector<std::string>{"job-3", "job-7"}
                                    : std::vector<std::string>{});
    }
    if (::testing::Test::HasFatalFailure()) return;
    const int64_t hi = kT0 + 50 * 10 * kSecond;
    {
      auto reader = OpenRocksDbWindowStoreReadOnly(dir.path());
      ASSERT_TRUE(reader.ok()) << reader.status();
      EXPECT_FALSE(HasSums(**reader));  // The scan answers instead.
      ExpectSameFleet(**reader, rng, kT0, hi, 12);
    }
    auto store = OpenRocksDbWindowStore(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_TRUE(HasSums(**store));
    ExpectSameFleet(**store, rng, kT0, hi, 12);
    // And kept from then on.
    StoreBatch more;
    more.windows.push_back(
        RandomWindow(rng, "job-3", kT0 + 25 * 10 * kSecond, 10 * kSecond, 9));
    more.windows.push_back(
        RandomWindow(rng, "job-3", kT0 + 50 * 10 * kSecond, 10 * kSecond, 9));
    ASSERT_TRUE((*store)->Commit(more).ok());
    ExpectSameFleet(**store, rng, kT0, hi + 10 * kSecond, 12);
  }
}

}  // namespace
}  // namespace bubblewatch
