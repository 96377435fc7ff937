#include "ingest/chrome/chrome_trace_writer.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json_writer.h"

namespace bubblewatch {
namespace {

// Exact nanoseconds as decimal microseconds: the reader's inverse.
std::string Us(int64_t ns) {
  const uint64_t magnitude =
      ns < 0 ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  return absl::StrFormat("%s%d.%03d", ns < 0 ? "-" : "", magnitude / 1000,
                         magnitude % 1000);
}

const char* GpuCategory(GpuActivityKind kind) {
  switch (kind) {
    case GpuActivityKind::kKernel:
      return "kernel";
    case GpuActivityKind::kMemcpy:
      return "gpu_memcpy";
    case GpuActivityKind::kMemset:
      return "gpu_memset";
  }
  return "kernel";
}

const char* CpuCategory(CpuEventCategory category) {
  switch (category) {
    case CpuEventCategory::kCudaRuntime:
      return "cuda_runtime";
    case CpuEventCategory::kCudaDriver:
      return "cuda_driver";
    case CpuEventCategory::kCpuOp:
      return "cpu_op";
    case CpuEventCategory::kUserAnnotation:
      return "user_annotation";
    case CpuEventCategory::kPythonFunction:
      return "python_function";
    case CpuEventCategory::kOther:
      break;  // No Kineto category says "unknown".
  }
  return "cpu_op";
}

// What ties a collective record to its kernel.
using KernelKey = std::tuple<int64_t, int64_t, int32_t, int32_t, NameId>;

void Event(JsonWriter& w, const char* category, absl::string_view name,
           uint64_t pid, uint64_t tid, int64_t start_ns, int64_t end_ns) {
  w.BeginObject();
  w.Key("ph").String("X");
  w.Key("cat").String(category);
  w.Key("name").String(name);
  w.Key("pid").Uint(pid);
  w.Key("tid").Uint(tid);
  w.Key("ts").Raw(Us(start_ns));
  w.Key("dur").Raw(Us(end_ns - start_ns));
}

}  // namespace

std::string ChromeTraceJson(const Trace& trace) {
  absl::flat_hash_map<KernelKey, const CollectiveKernel*> collectives;
  for (const CollectiveKernel& c : trace.collectives) {
    collectives.try_emplace(
        KernelKey{c.start_ns, c.end_ns, c.device, c.stream, c.kernel_name}, &c);
  }
  JsonWriter w;
  w.BeginObject();
  w.Key("schemaVersion").Int(1);
  if (trace.rank >= 0 || trace.world_size >= 0) {
    w.Key("distributedInfo").BeginObject();
    w.Key("backend").String("nccl");
    if (trace.rank >= 0) w.Key("rank").Int(trace.rank);
    if (trace.world_size >= 0) w.Key("world_size").Int(trace.world_size);
    w.EndObject();
  }
  if (!trace.host.empty()) w.Key("host_name").String(trace.host);
  if (!trace.job.empty()) w.Key("bubblewatch_job").String(trace.job);
  w.Key("traceEvents").BeginArray();
  for (const CpuEvent& e : trace.cpu) {
    Event(w, CpuCategory(e.category), trace.Name(e.name), e.thread >> 32,
          e.thread & 0xFFFFFFFFu, e.start_ns, e.end_ns);
    w.Key("args").BeginObject();
    if (e.correlation != kNoCorrelation) {
      w.Key("correlation").Uint(e.correlation);
    }
    w.EndObject();
    w.EndObject();
  }
  for (const GpuActivity& a : trace.gpu) {
    Event(w, GpuCategory(a.kind), trace.Name(a.name),
          static_cast<uint32_t>(a.device), static_cast<uint32_t>(a.stream),
          a.start_ns, a.end_ns);
    w.Key("args").BeginObject();
    w.Key("device").Int(a.device);
    w.Key("stream").Int(a.stream);
    if (a.correlation != kNoCorrelation) {
      w.Key("correlation").Uint(a.correlation);
    }
    if (a.bytes != 0) w.Key("bytes").Uint(a.bytes);
    auto it = a.kind == GpuActivityKind::kKernel
                  ? collectives.find(KernelKey{a.start_ns, a.end_ns, a.device,
                                               a.stream, a.name})
                  : collectives.end();
    if (it != collectives.end()) {
      const CollectiveKernel& c = *it->second;
      auto name = [&](const char* key, NameId id) {
        if (id != kNoName) w.Key(key).String(trace.Name(id));
      };
      auto count = [&](const char* key, int64_t value) {
        if (value >= 0) w.Key(key).Int(value);
      };
      name("Collective name", c.collective);
      count("In msg nelems", c.in_elements);
      count("Out msg nelems", c.out_elements);
      count("Group size", c.group_size);
      name("dtype", c.dtype);
      name("Process Group Name", c.process_group);
      name("Process Group Ranks", c.group_ranks);
      count("Seq", c.seq);
      // PyTorch's spelling depends on the direction.
      const bool recv =
          c.collective != kNoName && trace.Name(c.collective) == "recv";
      count(recv ? "Src Rank" : "Dst Rank", c.peer);
      collectives.erase(it);  // A second identical kernel has no record.
    }
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  std::string out = std::move(w).Take();
  out += "\n";
  return out;
}

absl::Status WriteChromeTraceFile(const Trace& trace, absl::string_view path) {
  const std::string json = ChromeTraceJson(trace);
  const std::string p(path);
  if (absl::EndsWith(path, ".gz")) {
    gzFile f = gzopen(p.c_str(), "wb6");
    if (f == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
    }
    size_t done = 0;
    bool ok = true;
    while (ok && done < json.size()) {
      const unsigned chunk =
          static_cast<unsigned>(std::min<size_t>(json.size() - done, 1 << 30));
      ok = gzwrite(f, json.data() + done, chunk) == static_cast<int>(chunk);
      done += chunk;
    }
    if (gzclose(f) != Z_OK || !ok) {
      return absl::UnavailableError(absl::StrCat("cannot write ", path));
    }
    return absl::OkStatus();
  }
  FILE* f = std::fopen(p.c_str(), "wb");
  if (f == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  const bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  if (std::fclose(f) != 0 || !ok) {
    return absl::UnavailableError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace bubblewatch
