#include "cli/timeline_export.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "cli/chrome_passthrough.h"
#include "ingest/chrome/chrome_trace_writer.h"
#include "schemas/bubble_cause.h"

namespace bubblewatch {
namespace {

// Thread ids of bubblewatch's own tracks in each rank's process: above any
// stream number and out of the way of real thread ids, which are below
// 2^22 on Linux (pid_max).
constexpr uint64_t kBubbleTid = 1'000'000'001;
// Collective and root slices go to lanes (tracks) base + 0 .. kMaxLanes-1.
constexpr uint64_t kCollectiveTid = 1'000'000'100;
constexpr uint64_t kRootTid = 1'000'000'200;
constexpr size_t kMaxLanes = 64;
// The reader folds the rank above the device in 16 bits of an int32.
constexpr int32_t kMaxExportRank = 32767;

// One process of the file.
struct ExportRank {
  int32_t rank = 0;
  size_t trace = 0;     // Index into the traces.
  int32_t device = -1;  // Only this device's GPU events; -1: all.
  bool cpu = true;      // The trace's CPU events go here.
  std::string host;
  std::string file;
  const RankCollectiveStats* clock = nullptr;  // Null: no correction.
};

void AppendMeta(ChromeTraceSink& sink, const char* name, int32_t pid,
                const uint64_t* tid, absl::string_view key,
                absl::string_view text, int64_t number) {
  std::string& out = sink.Event();
  absl::StrAppend(&out, "{\"ph\":\"M\",\"name\":\"", name, "\",\"pid\":", pid);
  if (tid != nullptr) absl::StrAppend(&out, ",\"tid\":", *tid);
  absl::StrAppend(&out, ",\"args\":{\"", key, "\":");
  if (text.data() != nullptr) {
    AppendJsonString(&out, text);
  } else {
    absl::StrAppend(&out, number);
  }
  out += "}}";
}

// An "X" slice of bubblewatch's, args left open.
std::string& OwnSlice(ChromeTraceSink& sink, const char* category,
                      absl::string_view name, int32_t pid, uint64_t tid,
                      int64_t start_ns, int64_t end_ns) {
  std::string& out = sink.Event();
  absl::StrAppend(&out, "{\"ph\":\"X\",\"cat\":\"", category, "\",\"name\":");
  AppendJsonString(&out, name);
  absl::StrAppend(&out, ",\"pid\":", pid, ",\"tid\":", tid, ",\"ts\":");
  AppendMicros(&out, start_ns - sink.time_base_ns());
  out += ",\"dur\":";
  AppendMicros(&out, end_ns - start_ns);
  out += ",\"args\":{";
  return out;
}

void AppendFlow(ChromeTraceSink& sink, bool start, uint64_t id, int32_t pid,
                uint64_t tid, int64_t ts_ns) {
  std::string& out = sink.Event();
  absl::StrAppend(&out, "{\"ph\":\"", start ? "s" : "f",
                  "\",\"cat\":\"bubblewatch_root\",\"name\":\"held up\","
                  "\"id\":",
                  id, ",\"pid\":", pid, ",\"tid\":", tid, ",\"ts\":");
  AppendMicros(&out, ts_ns - sink.time_base_ns());
  out += start ? "}" : ",\"bp\":\"e\"}";
}

void AppendUsArg(std::string& out, const char* key, int64_t ns) {
  absl::StrAppend(&out, "\"", key, "\":");
  AppendMicros(&out, ns);
}

uint64_t FlowId(size_t instance, size_t part) {
  return (static_cast<uint64_t>(instance) << 16) + part + 1;
}

// Whether a rank's original events pass through from its file: a Chrome
// trace that is this rank alone (not a device of a node's trace, not an
// export of ours). Other inputs are written from their parsed Trace.
bool PassesThrough(const ExportRank& r, const Trace& trace) {
  return trace.source_format == "chrome" && r.device < 0 && !r.file.empty() &&
         !IsTimelineExport(r.file);
}

// Top-level keys the export writes itself, never copied from an input.
bool OwnTopLevelKey(absl::string_view key) {
  return key == "schemaVersion" || key == "distributedInfo" ||
         key == "baseTimeNanoseconds" || key == "traceEvents" ||
         absl::StartsWith(key, "bubblewatch_");
}

}  // namespace

absl::StatusOr<TimelineExportStats> WriteTimelineExport(
    absl::Span<const Trace> traces, absl::Span<const std::string> files,
    const CollectiveAnalysis* collectives, const TimelineExportOptions& options,
    const std::string& path) {
  // The processes: the collective analysis's ranks, else one per trace.
  std::vector<ExportRank> ranks;
  if (collectives != nullptr) {
    const std::vector<RankInput> inputs = RanksOfTraces(traces, files);
    absl::flat_hash_map<const Trace*, int> ranks_of_trace;
    absl::flat_hash_map<const Trace*, int32_t> lowest;
    for (const RankInput& in : inputs) {
      ++ranks_of_trace[in.trace];
      auto [it, fresh] = lowest.try_emplace(in.trace, in.rank);
      if (!fresh) it->second = std::min(it->second, in.rank);
    }
    absl::flat_hash_map<int32_t, const RankCollectiveStats*> clocks;
    for (const RankCollectiveStats& s : collectives->ranks) {
      clocks[s.rank] = &s;
    }
    for (const RankInput& in : inputs) {
      ExportRank r;
      r.rank = in.rank;
      r.trace = static_cast<size_t>(in.trace - traces.data());
      r.device = ranks_of_trace[in.trace] > 1 ? in.device : -1;
      r.cpu = lowest[in.trace] == in.rank;
      r.host = in.host;
      r.file = in.file;
      auto it = clocks.find(in.rank);
      if (it != clocks.end()) r.clock = it->second;
      ranks.push_back(std::move(r));
    }
  } else {
    for (size_t i = 0; i < traces.size(); ++i) {
      ExportRank r;
      r.rank = traces[i].rank >= 0 ? traces[i].rank : static_cast<int32_t>(i);
      r.trace = i;
      r.host = traces[i].host;
      r.file = i < files.size() ? files[i] : std::string();
      ranks.push_back(std::move(r));
    }
  }
  std::sort(
      ranks.begin(), ranks.end(),
      [](const ExportRank& a, const ExportRank& b) { return a.rank < b.rank; });
  const int64_t origin_ns =
      collectives != nullptr ? collectives->clock_origin_ns : 0;
  auto clock_of = [&](const ExportRank& r) {
    ChromeEventOptions o;
    if (r.clock != nullptr && r.clock->clock_corrected) {
      o.offset_ns = r.clock->clock_offset_ns;
      o.drift_ns_per_s = r.clock->clock_drift_ns_per_s;
      o.origin_ns = origin_ns;
    }
    return o;
  };

  // The job's first event and last end on its clock: the cut's origin.
  int64_t job_start = std::numeric_limits<int64_t>::max();
  int64_t job_end = std::numeric_limits<int64_t>::min();
  for (const ExportRank& r : ranks) {
    const ChromeEventOptions c = clock_of(r);
    const Trace& t = traces[r.trace];
    auto see = [&](int64_t start, int64_t end) {
      job_start = std::min(job_start, c.ToClock(start));
      job_end = std::max(job_end, c.ToClock(end));
    };
    for (const GpuActivity& a : t.gpu) {
      if (r.device < 0 || a.device == r.device) see(a.start_ns, a.end_ns);
    }
    if (r.cpu) {
      for (const CpuEvent& e : t.cpu) see(e.start_ns, e.end_ns);
    }
  }
  if (job_start > job_end) job_start = job_end = 0;

  std::erase_if(ranks, [&](const ExportRank& r) {
    return !options.ranks.empty() && !options.ranks.contains(r.rank);
  });
  if (ranks.empty()) {
    return absl::InvalidArgumentError(
        "--ranks selects none of the job's ranks");
  }
  if (ranks.back().rank > kMaxExportRank || ranks.front().rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", ranks.back().rank, " is outside 0..",
                     kMaxExportRank, ", the ranks a timeline can hold"));
  }
  if (options.from_ns >= options.to_ns) {
    return absl::InvalidArgumentError("--from must be before --to");
  }
  if (options.from_ns > 0 && options.from_ns >= job_end - job_start) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--from is at or past the job's end (it lasts ",
        absl::FormatDuration(absl::Nanoseconds(job_end - job_start)), ")"));
  }
  const int64_t from_ns = job_start + options.from_ns;
  const int64_t to_ns = options.to_ns > job_end - job_start
                            ? std::numeric_limits<int64_t>::max()
                            : job_start + options.to_ns;

  // The first pass over each file whose events pass through: its metadata,
  // the reader's time shift, its earliest event (kept or not).
  std::vector<std::optional<ChromeFileSurvey>> surveys(ranks.size());
  int64_t earliest = job_start;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const ExportRank& r = ranks[i];
    if (!PassesThrough(r, traces[r.trace])) continue;
    absl::StatusOr<ChromeFileSurvey> survey = SurveyChromeFile(r.file);
    if (!survey.ok()) {
      return absl::Status(
          survey.status().code(),
          absl::StrCat("re-reading ", r.file, ": ", survey.status().message()));
    }
    if (survey->min_start_ns) {
      earliest = std::min(earliest, clock_of(r).ToClock(*survey->min_start_ns));
    }
    surveys[i] = *std::move(survey);
  }

  ASSIGN_OR_RETURN(std::unique_ptr<ChromeTraceSink> sink,
                   ChromeTraceSink::Open(path));
  // A failed export leaves no half file behind (a path Open could not
  // create is not touched).
  struct RemoveUnlessDone {
    std::unique_ptr<ChromeTraceSink>& sink;
    const std::string& path;
    bool done = false;
    ~RemoveUnlessDone() {
      if (done) return;
      sink.reset();  // Closed first.
      std::remove(path.c_str());
    }
  } cleanup{sink, path};
  TimelineExportStats stats;

  // The top-level keys, "bubblewatch_timeline" within the first 512 bytes
  // (IsTimelineExport) and before "traceEvents" (the reader must see it
  // before any event).
  {
    std::string& out = sink->buffer();
    out += "\"schemaVersion\":1,";
    const Trace& first = traces[ranks.front().trace];
    int32_t world_size = collectives != nullptr ? collectives->world_size : -1;
    if (world_size < 0) world_size = first.world_size;
    if (first.rank >= 0 || world_size >= 0) {
      // Kineto's key, for tools that read one rank per file. First, and
      // "rank": with a space as PyTorch writes it: HTA finds a file's rank
      // as the first match of "rank":\s+(\d+).
      absl::StrAppend(&out, "\"distributedInfo\":{\"backend\":\"nccl\",",
                      "\"rank\": ", ranks.front().rank);
      if (world_size >= 0)
        absl::StrAppend(&out, ",\"world_size\":", world_size);
      out += "},";
    }
    out += "\"bubblewatch_timeline\":{\"version\":2,";
    // Ranks that share an input trace (its devices), so that reading the
    // export back puts them into one trace again (TimelineExportGroups).
    {
      absl::flat_hash_map<size_t, std::vector<int32_t>> by_trace;
      for (const ExportRank& r : ranks) by_trace[r.trace].push_back(r.rank);
      std::vector<std::vector<int32_t>> shared;
      for (auto& [trace, group] : by_trace) {
        if (group.size() > 1) shared.push_back(std::move(group));
      }
      std::sort(shared.begin(), shared.end());
      if (!shared.empty()) {
        out += "\"traces\":[";
        for (size_t g = 0; g < shared.size(); ++g) {
          absl::StrAppend(&out, g > 0 ? ",[" : "[",
                          absl::StrJoin(shared[g], ","), "]");
        }
        out += "],";
      }
    }
    absl::StrAppend(&out, "\"clock\":\"",
                    collectives != nullptr ? "job" : "trace", "\",");
    AppendUsArg(out, "job_start_us", job_start);
    out += ",";
    AppendUsArg(out, "from_us", std::max(from_ns, job_start));
    out += ",";
    AppendUsArg(out, "to_us", std::min(to_ns, job_end));
    out += ",\"ranks\":[";
    for (size_t i = 0; i < ranks.size(); ++i) {
      const ExportRank& r = ranks[i];
      absl::StrAppend(&out, i > 0 ? "," : "", "{\"rank\":", r.rank,
                      ",\"host\":");
      AppendJsonString(&out, r.host);
      out += ",\"file\":";
      AppendJsonString(&out, r.file);
      if (r.clock != nullptr) {
        absl::StrAppend(&out, ",\"clock_offset_ns\":", r.clock->clock_offset_ns,
                        ",\"clock_drift_ns_per_s\":",
                        r.clock->clock_drift_ns_per_s, ",\"clock_connected\":",
                        r.clock->clock_connected ? "true" : "false",
                        ",\"clock_corrected\":",
                        r.clock->clock_corrected ? "true" : "false");
      }
      if (surveys[i]) {
        // The input's top-level keys, as written.
        out += ",\"metadata\":{";
        bool first_key = true;
        for (const auto& [key, value] : surveys[i]->metadata) {
          absl::StrAppend(&out, first_key ? "\"" : ",\"", key, "\":", value);
          first_key = false;
        }
        out += "}";
      }
      out += "}";
    }
    out += "]},";
    if (traces.size() == 1 && !first.host.empty()) {
      out += "\"host_name\":";
      AppendJsonString(&out, first.host);
      out += ",";
    }
    if (!first.job.empty()) {
      out += "\"bubblewatch_job\":";
      AppendJsonString(&out, first.job);
      out += ",";
    }
    // The lowest rank's top-level metadata at the top level too, as a tool
    // that reads one rank per file (HTA, TraceLens) finds it: e.g.
    // "deviceProperties", "record_shapes", "trace_id".
    if (surveys.front()) {
      const bool wrote_host = traces.size() == 1 && !first.host.empty();
      for (const auto& [key, value] : surveys.front()->metadata) {
        if (OwnTopLevelKey(key) || (wrote_host && key == "host_name")) {
          continue;
        }
        absl::StrAppend(&out, "\"", key, "\":", value, ",");
      }
    }
    // Times after the job's start, as newer Kineto writes them: a double
    // (how viewers parse "ts") holds epoch microseconds only to a quarter
    // of one, so adjacent slices would seem to overlap. Whole microseconds,
    // so that a tool rounding "ts" rounds as it does the original's; and
    // only where the reader applies it: every start before the base.
    // The earliest event passed through (a metadata event, a span of the
    // profiler's) may start before the job's first kept event: the base is
    // before both, so that no "ts" is negative.
    if (earliest > 0 && job_end - earliest < earliest) {
      sink->set_time_base_ns(earliest - earliest % 1000);
      absl::StrAppend(&out, "\"baseTimeNanoseconds\":", sink->time_base_ns(),
                      ",");
    }
    sink->BeginEvents();
  }

  // Each rank's collective parts: (instance, part) by rank.
  absl::flat_hash_map<int32_t, std::vector<std::pair<size_t, size_t>>> parts;
  absl::flat_hash_map<int32_t, const ExportRank*> selected;
  for (const ExportRank& r : ranks) selected[r.rank] = &r;
  if (collectives != nullptr) {
    for (size_t i = 0; i < collectives->instances.size(); ++i) {
      const CollectiveInstance& inst = collectives->instances[i];
      for (size_t p = 0; p < inst.parts.size(); ++p) {
        if (selected.contains(inst.parts[p].rank)) {
          parts[inst.parts[p].rank].emplace_back(i, p);
        }
      }
    }
  }
  auto in_cut = [&](int64_t start, int64_t end) {
    return start < to_ns &&
           (end > from_ns || (end == start && start >= from_ns));
  };

  for (size_t ri = 0; ri < ranks.size(); ++ri) {
    const ExportRank& r = ranks[ri];
    const Trace& trace = traces[r.trace];
    ChromeEventOptions o = clock_of(r);
    o.pid = r.rank;
    o.device = r.device;
    o.cpu = r.cpu;
    o.from_ns = from_ns;
    o.to_ns = to_ns;
    if (surveys[ri]) {
      PassThroughOptions p;
      p.rank = r.rank;
      p.shift_ns = surveys[ri]->shift_ns;
      p.clock = o;
      // Without --from, nothing is cut at the start: events of the input's
      // that end before the job's first kept event (a profiler's instants,
      // its trace span) stay.
      if (options.from_ns <= 0) {
        p.clock.from_ns = std::numeric_limits<int64_t>::min();
      }
      p.remap_flow_ids = ranks.size() > 1;
      absl::StatusOr<PassThroughStats> passed =
          PassThroughChromeEvents(r.file, p, *sink);
      if (!passed.ok()) {
        return absl::Status(passed.status().code(),
                            absl::StrCat("re-reading ", r.file, ": ",
                                         passed.status().message()));
      }
    } else {
      RETURN_IF_ERROR(AppendChromeEvents(trace, o, *sink));
    }
    // After the rank's own metadata events (an input names its processes,
    // now all this one), so that the rank's name is the one viewers keep.
    const std::string process =
        r.host.empty() ? absl::StrCat("rank ", r.rank)
                       : absl::StrCat("rank ", r.rank, " (", r.host, ")");
    AppendMeta(*sink, "process_name", r.rank, nullptr, "name", process, 0);
    AppendMeta(*sink, "process_sort_index", r.rank, nullptr, "sort_index", {},
               r.rank);
    AppendMeta(*sink, "thread_name", r.rank, &kBubbleTid, "name",
               "bubblewatch: bubbles", 0);
    AppendMeta(*sink, "thread_sort_index", r.rank, &kBubbleTid, "sort_index",
               {}, -3);

    // Every bubble of this rank's devices, by one analysis of its trace
    // that lists them all (a device has fewer gaps than activities).
    {
      AnalyzerOptions a = options.analyzer;
      a.window_ns = 0;
      a.top_bubbles =
          static_cast<int>(std::min<size_t>(trace.gpu.size() + 1, 1u << 30));
      absl::StatusOr<Analysis> analysis = AnalyzeTrace(trace, a);
      if (!analysis.ok()) return analysis.status();
      for (const BubbleReport& b : analysis->top_bubbles) {
        if (r.device >= 0 && b.device != r.device) continue;
        const int64_t start = o.ToClock(b.start_ns);
        const int64_t end = o.ToClock(b.end_ns);
        if (!in_cut(start, end)) continue;
        std::string& out =
            OwnSlice(*sink, "bubblewatch_bubble", BubbleCauseName(b.cause),
                     r.rank, kBubbleTid, start, end);
        absl::StrAppend(&out, "\"cause\":\"", BubbleCauseName(b.cause),
                        "\",\"device\":", b.device, ",\"blamed\":");
        AppendJsonString(&out, b.blamed);
        out += ",\"advice\":";
        AppendJsonString(&out, BubbleCauseAdvice(b.cause));
        if (b.before) {
          out += ",\"before\":";
          AppendJsonString(&out, b.before->name);
        }
        if (b.after) {
          out += ",\"after\":";
          AppendJsonString(&out, b.after->name);
        }
        for (BubbleCause c : kAllBubbleCauses) {
          const int64_t ns = b.attribution[static_cast<int>(c)];
          if (ns == 0) continue;
          absl::StrAppend(&out, ",\"", BubbleCauseName(c), "_us\":");
          AppendMicros(&out, ns);
        }
        out += "}}";
        ++stats.bubbles;
        RETURN_IF_ERROR(sink->Flush());
      }
    }

    // Its collectives: the wait until the last member arrived, then the
    // transfer; the roots' slices and the flows to the ranks they held up.
    if (collectives == nullptr) continue;
    // Slices on one track must nest (Perfetto and chrome://tracing drop or
    // cut slices that partly overlap), and concurrent collectives (on two
    // streams) overlap: each goes to the first lane free at its start.
    auto lane_tid = [&](std::vector<int64_t>& lanes, uint64_t base,
                        const char* name, int sort, int64_t start,
                        int64_t end) {
      size_t lane = 0;
      while (lane < lanes.size() && lanes[lane] > start) ++lane;
      if (lane == kMaxLanes) lane = kMaxLanes - 1;  // Overlaps, bounded.
      const uint64_t tid = base + lane;
      if (lane == lanes.size()) {
        lanes.push_back(end);
        AppendMeta(*sink, "thread_name", r.rank, &tid, "name",
                   lane == 0 ? std::string(name)
                             : absl::StrCat(name, " (", lane + 1, ")"),
                   0);
        AppendMeta(*sink, "thread_sort_index", r.rank, &tid, "sort_index", {},
                   sort);
      }
      lanes[lane] = std::max(lanes[lane], end);
      return tid;
    };
    struct Placed {
      int64_t start = 0;
      int64_t end = 0;
      size_t instance = 0;
      size_t part = 0;
    };
    auto by_start = [](const Placed& x, const Placed& y) {
      return std::tie(x.start, x.instance, x.part) <
             std::tie(y.start, y.instance, y.part);
    };
    std::vector<Placed> placed;
    if (auto found = parts.find(r.rank); found != parts.end()) {
      for (const auto& [i, p] : found->second) {
        const CollectiveInstance::Part& part =
            collectives->instances[i].parts[p];
        const int64_t start = o.ToClock(part.start_ns);
        const int64_t end = o.ToClock(part.end_ns);
        if (in_cut(start, end)) placed.push_back({start, end, i, p});
      }
    }
    std::sort(placed.begin(), placed.end(), by_start);
    std::vector<int64_t> lanes;
    for (const Placed& x : placed) {
      const CollectiveInstance& inst = collectives->instances[x.instance];
      const CollectiveInstance::Part& part = inst.parts[x.part];
      const int64_t start = x.start;
      const int64_t end = x.end;
      const uint64_t tid = lane_tid(lanes, kCollectiveTid,
                                    "bubblewatch: collectives", -2, start, end);
      auto args = [&](std::string& out) {
        out += "\"group\":";
        AppendJsonString(&out, inst.group);
        absl::StrAppend(&out, ",\"key\":", inst.key, ",\"type\":");
        AppendJsonString(&out, inst.type);
        absl::StrAppend(&out, ",\"late_rank\":", inst.late_rank,
                        ",\"root_rank\":", inst.root_rank, ",");
        AppendUsArg(out, "wait_us", part.wait_ns);
        out += "}}";
      };
      const bool used = inst.synchronized && inst.late_rank >= 0;
      if (!used) {
        args(OwnSlice(*sink, "bubblewatch_collective",
                      absl::StrCat(inst.type, " (not used)"), r.rank, tid,
                      start, end));
        ++stats.collective_slices;
        continue;
      }
      const int64_t arrival = std::clamp(inst.arrival_ns, start, end);
      const bool held_up = inst.root_rank >= 0 && inst.root_rank != r.rank &&
                           inst.wait_caused_ns > 0 && arrival > start &&
                           selected.contains(inst.root_rank);
      if (arrival > start) {
        args(OwnSlice(*sink, "bubblewatch_wait",
                      absl::StrCat("wait: ", inst.type), r.rank, tid, start,
                      arrival));
        ++stats.collective_slices;
        // The arrow ends at the wait's end, where the root released it.
        if (held_up) {
          AppendFlow(*sink, false, FlowId(x.instance, x.part), r.rank, tid,
                     arrival - 1);
        }
      }
      if (end > arrival) {
        args(OwnSlice(*sink, "bubblewatch_transfer",
                      absl::StrCat("transfer: ", inst.type), r.rank, tid,
                      arrival, end));
        ++stats.collective_slices;
      }
      RETURN_IF_ERROR(sink->Flush());
    }
    // The instances this rank is the root of: from the arrival to the last
    // member's end (on the job's clock), so that the arrows leave the slice
    // at the moment it released them.
    placed.clear();
    for (size_t i = 0; i < collectives->instances.size(); ++i) {
      const CollectiveInstance& inst = collectives->instances[i];
      if (inst.root_rank != r.rank || inst.wait_caused_ns <= 0 ||
          !inst.synchronized || inst.late_rank < 0) {
        continue;
      }
      int64_t last_end = inst.arrival_ns + 1;
      for (const CollectiveInstance::Part& part : inst.parts) {
        auto s = selected.find(part.rank);
        const int64_t e = s != selected.end()
                              ? clock_of(*s->second).ToClock(part.end_ns)
                              : part.end_ns;
        last_end = std::max(last_end, e);
      }
      if (in_cut(inst.arrival_ns, last_end)) {
        placed.push_back({inst.arrival_ns, last_end, i, 0});
      }
    }
    std::sort(placed.begin(), placed.end(), by_start);
    lanes.clear();
    for (const Placed& x : placed) {
      const CollectiveInstance& inst = collectives->instances[x.instance];
      const uint64_t tid =
          lane_tid(lanes, kRootTid, "bubblewatch: roots", -1, x.start, x.end);
      std::string& out = OwnSlice(*sink, "bubblewatch_root",
                                  absl::StrCat("root of wait: ", inst.type),
                                  r.rank, tid, x.start, x.end);
      out += "\"group\":";
      AppendJsonString(&out, inst.group);
      absl::StrAppend(&out, ",\"key\":", inst.key,
                      ",\"late_rank\":", inst.late_rank, ",");
      AppendUsArg(out, "wait_caused_us", inst.wait_caused_ns);
      out += "}}";
      for (size_t p = 0; p < inst.parts.size(); ++p) {
        const CollectiveInstance::Part& part = inst.parts[p];
        auto s = selected.find(part.rank);
        if (part.rank == r.rank || s == selected.end()) continue;
        const ChromeEventOptions pc = clock_of(*s->second);
        const int64_t start = pc.ToClock(part.start_ns);
        const int64_t end = pc.ToClock(part.end_ns);
        if (std::clamp(inst.arrival_ns, start, end) <= start ||
            !in_cut(start, end)) {
          continue;
        }
        AppendFlow(*sink, true, FlowId(x.instance, p), r.rank, tid,
                   inst.arrival_ns);
        ++stats.flows;
      }
      RETURN_IF_ERROR(sink->Flush());
    }
  }

  // The what-if as a counter on each straggler, over the job.
  if (collectives != nullptr) {
    for (const Straggler& s : collectives->stragglers) {
      if (s.saved_ns < 0 || !selected.contains(s.rank)) continue;
      for (int64_t ts :
           {std::max(job_start, from_ns), std::min(job_end, to_ns)}) {
        std::string& out = sink->Event();
        absl::StrAppend(&out,
                        "{\"ph\":\"C\",\"cat\":\"bubblewatch_whatif\","
                        "\"name\":\"what-if saved_us\",\"pid\":",
                        s.rank, ",\"ts\":");
        AppendMicros(&out, ts - sink->time_base_ns());
        out += ",\"args\":{";
        AppendUsArg(out, "saved_us", s.saved_ns);
        out += "}}";
      }
    }
  }
  stats.ranks = static_cast<int64_t>(ranks.size());
  stats.events = sink->events();
  stats.bytes = sink->bytes() + 4;  // The closing "\n]}\n".
  RETURN_IF_ERROR(sink->Close());
  cleanup.done = true;
  return stats;
}

bool IsTimelineExport(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // Reads plain files as they are.
  if (f == nullptr) return false;
  char head[512];
  const int n = gzread(f, head, sizeof(head));
  gzclose(f);
  return n > 0 && absl::StrContains(absl::string_view(head, n),
                                    "\"bubblewatch_timeline\"");
}

std::vector<std::vector<int32_t>> TimelineExportGroups(
    const std::string& path) {
  std::vector<std::vector<int32_t>> groups;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return groups;
  // The header precedes "traceEvents"; "traces" precedes the rank table.
  std::string head(size_t{1} << 20, '\0');
  const int n = gzread(f, head.data(), static_cast<unsigned>(head.size()));
  gzclose(f);
  head.resize(n > 0 ? static_cast<size_t>(n) : 0);
  // "traces" is the key after "version" (an input's metadata, further on,
  // may hold any key).
  constexpr absl::string_view kVersion =
      "\"bubblewatch_timeline\":{\"version\":";
  size_t at = head.find(kVersion.data(), 0, kVersion.size());
  if (at == std::string::npos) return groups;
  at += kVersion.size();
  while (at < head.size() && head[at] >= '0' && head[at] <= '9') ++at;
  if (head.compare(at, 11, ",\"traces\":[") != 0) return groups;
  ++at;
  // [[0,1],[2,3]]: integers in brackets, nothing else.
  int depth = 0;
  int64_t value = -1;
  for (size_t i = at + 9; i < head.size(); ++i) {
    const char c = head[i];
    if (c >= '0' && c <= '9') {
      value = (value < 0 ? 0 : value * 10) + (c - '0');
      if (value > kMaxExportRank) return {};
      continue;
    }
    if (value >= 0 && depth == 2) {
      groups.back().push_back(static_cast<int32_t>(value));
    }
    value = -1;
    if (c == '[') {
      if (++depth == 2) groups.emplace_back();
      if (depth > 2) return {};
    } else if (c == ']') {
      if (--depth == 0) return groups;
    } else if (c != ',') {
      return {};
    }
  }
  return {};  // Cut short: as if each rank had its own trace.
}

std::vector<Trace> SplitTimelineExport(
    Trace&& trace, absl::Span<const std::vector<int32_t>> groups) {
  // Ranks of one input trace go back into one, under their lowest rank.
  absl::flat_hash_map<int32_t, int32_t> leader;
  absl::flat_hash_set<int32_t> grouped;
  for (const std::vector<int32_t>& g : groups) {
    if (g.empty()) continue;
    const int32_t low = *std::min_element(g.begin(), g.end());
    for (int32_t r : g) leader[r] = low;
    if (g.size() > 1) grouped.insert(low);
  }
  absl::flat_hash_map<int32_t, size_t> slot_of;
  std::vector<std::pair<int32_t, Trace>> out;
  auto slot = [&](int32_t rank) -> Trace& {
    auto l = leader.find(rank);
    if (l != leader.end()) rank = l->second;
    auto [it, fresh] = slot_of.try_emplace(rank, out.size());
    if (fresh) {
      Trace& t = out.emplace_back(rank, Trace()).second;
      t.names = trace.names;
      // Several ranks in one trace are its devices, as the input's were.
      t.rank = grouped.contains(rank) ? -1 : rank;
      t.world_size = trace.world_size;
      t.job = trace.job;
      t.source_format = trace.source_format;
    }
    return out[it->second].second;
  };
  for (GpuActivity a : trace.gpu) {
    const int32_t rank = a.device >> 16;
    a.device &= 0xFFFF;
    slot(rank).gpu.push_back(a);
  }
  for (CollectiveKernel c : trace.collectives) {
    const int32_t rank = c.device >> 16;
    c.device &= 0xFFFF;
    slot(rank).collectives.push_back(c);
  }
  for (const CpuEvent& e : trace.cpu) {
    slot(static_cast<int32_t>(e.thread >> 32)).cpu.push_back(e);
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Trace> traces;
  for (auto& [rank, t] : out) traces.push_back(std::move(t));
  if (traces.empty()) {
    traces.push_back(std::move(trace));
  } else {
    traces[0].skipped = std::move(trace.skipped);
  }
  return traces;
}

}  // namespace bubblewatch
