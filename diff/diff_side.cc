#include "diff/diff_side.h"

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "analysis/bubble_analyzer.h"

namespace bubblewatch {

absl::StatusOr<DiffSide> LoadDiffSide(absl::string_view path,
                                      TraceFormat format, int top_bubbles,
                                      int top_kernels) {
  TraceReadOptions read_options;
  read_options.format = format;
  absl::StatusOr<Trace> trace = ReadTraceFile(path, read_options);
  if (!trace.ok()) return trace.status();
  AnalyzerOptions analyzer_options;
  analyzer_options.top_bubbles = top_bubbles;
  // Several ranks in one trace: the collective analysis analyzes it too.
  absl::flat_hash_set<int32_t> collective_devices;
  for (const CollectiveKernel& c : trace->collectives) {
    collective_devices.insert(c.device);
  }
  std::optional<CollectiveAnalysis> collectives;
  absl::StatusOr<Analysis> analysis;
  if (collective_devices.size() > 1) {
    const std::string file(path);
    std::vector<RankInput> ranks = RanksOfTraces(
        absl::MakeConstSpan(&*trace, 1), absl::MakeConstSpan(&file, 1));
    absl::StatusOr<CollectiveAnalysis> c =
        AnalyzeCollectives(ranks, CollectiveOptions{}, analyzer_options);
    if (!c.ok()) return c.status();
    analysis = std::move(c->analyses[0]);
    c->analyses.clear();
    c->traces.clear();
    collectives = *std::move(c);
  } else {
    analysis = AnalyzeTrace(*trace, analyzer_options);
  }
  if (!analysis.ok()) return analysis.status();
  DiagnosisOptions diagnosis_options;
  diagnosis_options.top_kernels = top_kernels;
  absl::StatusOr<Diagnosis> diagnosis =
      DiagnoseTrace(*trace, *analysis, diagnosis_options);
  if (!diagnosis.ok()) return diagnosis.status();

  DiffSide side;
  side.path = std::string(path);
  side.format = format == TraceFormat::kAuto
                    ? trace->source_format
                    : std::string(TraceFormatName(format));
  side.analysis = *std::move(analysis);
  side.collectives = std::move(collectives);
  side.diagnosis = *std::move(diagnosis);
  side.wall_span_ns =
      side.analysis.last_kernel_end_ns - side.analysis.first_kernel_start_ns;
  absl::flat_hash_map<NameId, int64_t> by_name;
  for (const GpuActivity& a : trace->gpu) {
    if (a.kind == GpuActivityKind::kKernel && a.end_ns > a.start_ns) {
      by_name[a.name] += a.end_ns - a.start_ns;
    }
  }
  side.kernel_time.reserve(by_name.size());
  for (const auto& [name, ns] : by_name) {
    side.kernel_time.emplace_back(std::string(trace->Name(name)), ns);
  }
  return side;
}

}  // namespace bubblewatch
