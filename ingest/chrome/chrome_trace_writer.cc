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
#include "base/status_macros.h"

namespace bubblewatch {
namespace {

// A collective kernel's Kineto args, as PyTorch names and orders them, each
// only when the record knows it: name(key, NameId) for a string,
// count(key, int64_t) for a number (both skip absent values themselves).
template <typename NameFn, typename CountFn>
void VisitCollectiveArgs(const Trace& trace, const CollectiveKernel& c,
                         NameFn&& name, CountFn&& count) {
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
}

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
      VisitCollectiveArgs(trace, c, name, count);
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

namespace bubblewatch {

void AppendJsonString(std::string* out, absl::string_view s) {
  out->push_back('"');
  size_t plain = 0;  // Start of the run not yet copied.
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out->append(s.data() + plain, i - plain);
    plain = i + 1;
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        absl::StrAppend(out, absl::StrFormat("\\u%04x", c));
    }
  }
  out->append(s.data() + plain, s.size() - plain);
  out->push_back('"');
}

void AppendMicros(std::string* out, int64_t ns) {
  const uint64_t magnitude =
      ns < 0 ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  if (ns < 0) out->push_back('-');
  const uint64_t frac = magnitude % 1000;
  char digits[3] = {static_cast<char>('0' + frac / 100),
                    static_cast<char>('0' + frac / 10 % 10),
                    static_cast<char>('0' + frac % 10)};
  absl::StrAppend(out, magnitude / 1000, ".", absl::string_view(digits, 3));
}

absl::StatusOr<std::unique_ptr<ChromeTraceSink>> ChromeTraceSink::Open(
    absl::string_view path) {
  std::unique_ptr<ChromeTraceSink> sink(new ChromeTraceSink(std::string(path)));
  if (absl::EndsWith(path, ".gz")) {
    sink->gz_ = gzopen(sink->path_.c_str(), "wb1");
    if (sink->gz_ != nullptr) {
      gzbuffer(sink->gz_, 1 << 18);
      sink->compressor_ = std::thread([s = sink.get()] { s->Compress(); });
    }
  } else {
    sink->file_ = std::fopen(sink->path_.c_str(), "wb");
  }
  if (sink->gz_ == nullptr && sink->file_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  sink->buffer_.reserve(kFlushBytes + (kFlushBytes >> 2));
  sink->buffer_.push_back('{');
  return sink;
}

ChromeTraceSink::~ChromeTraceSink() {
  StopCompressor();
  if (gz_ != nullptr) gzclose(gz_);
  if (file_ != nullptr) std::fclose(file_);
}

void ChromeTraceSink::BeginEvents() { buffer_ += "\"traceEvents\":[\n"; }

void ChromeTraceSink::Compress() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return !queue_.empty() || closing_; });
    if (queue_.empty()) return;  // Closing, all written.
    std::string chunk = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();  // Room in the queue.
    lock.unlock();
    const bool ok =
        chunk.empty() ||
        gzwrite(gz_, chunk.data(), static_cast<unsigned>(chunk.size())) ==
            static_cast<int>(chunk.size());
    chunk.clear();
    lock.lock();
    if (!ok) failed_ = true;
    if (spare_.size() < kMaxQueued) spare_.push_back(std::move(chunk));
  }
}

void ChromeTraceSink::StopCompressor() {
  if (!compressor_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    cv_.notify_all();  // Under the lock: plainer for race checkers.
  }
  compressor_.join();
}

absl::Status ChromeTraceSink::WriteOut() {
  bool ok = true;
  if (compressor_.joinable()) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.size() < kMaxQueued; });
    ok = !failed_;
    const size_t size = buffer_.size();
    queue_.push_back(std::move(buffer_));
    buffer_.clear();
    if (!spare_.empty()) {
      buffer_ = std::move(spare_.back());
      spare_.pop_back();
    }
    cv_.notify_all();
    lock.unlock();
    buffer_.reserve(kFlushBytes + (kFlushBytes >> 2));
    written_ += size;
    if (!ok) {
      return absl::UnavailableError(absl::StrCat("cannot write ", path_));
    }
    return absl::OkStatus();
  }
  if (gz_ != nullptr) {
    ok = buffer_.empty() ||
         gzwrite(gz_, buffer_.data(), static_cast<unsigned>(buffer_.size())) ==
             static_cast<int>(buffer_.size());
  } else if (file_ != nullptr) {
    ok =
        std::fwrite(buffer_.data(), 1, buffer_.size(), file_) == buffer_.size();
  }
  written_ += buffer_.size();
  buffer_.clear();
  if (!ok) return absl::UnavailableError(absl::StrCat("cannot write ", path_));
  return absl::OkStatus();
}

absl::Status ChromeTraceSink::Close() {
  buffer_ += "\n]}\n";
  absl::Status s = WriteOut();
  StopCompressor();
  bool ok = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ok = !failed_;
  }
  if (gz_ != nullptr) ok = gzclose(gz_) == Z_OK && ok;
  if (file_ != nullptr) ok = std::fclose(file_) == 0 && ok;
  gz_ = nullptr;
  file_ = nullptr;
  if (s.ok() && !ok) {
    return absl::UnavailableError(absl::StrCat("cannot write ", path_));
  }
  return s;
}

namespace {

// The start of an "X" event, up to the open "args" object.
void BeginSlice(std::string& out, const char* category, absl::string_view name,
                uint64_t pid, uint64_t tid, int64_t start_ns, int64_t end_ns,
                int64_t base_ns) {
  absl::StrAppend(&out, "{\"ph\":\"X\",\"cat\":\"", category, "\",\"name\":");
  AppendJsonString(&out, name);
  absl::StrAppend(&out, ",\"pid\":", pid, ",\"tid\":", tid, ",\"ts\":");
  AppendMicros(&out, start_ns - base_ns);
  out += ",\"dur\":";
  AppendMicros(&out, end_ns - start_ns);
  out += ",\"args\":{";
}

}  // namespace

absl::Status AppendChromeEvents(const Trace& trace,
                                const ChromeEventOptions& options,
                                ChromeTraceSink& sink) {
  auto keep = [&](int64_t start, int64_t end) {
    return start < options.to_ns &&
           (end > options.from_ns ||
            (end == start && start >= options.from_ns));
  };
  if (options.cpu) {
    for (const CpuEvent& e : trace.cpu) {
      const int64_t start = options.ToClock(e.start_ns);
      const int64_t end = options.ToClock(e.end_ns);
      if (!keep(start, end)) continue;
      std::string& out = sink.Event();
      BeginSlice(out, CpuCategory(e.category), trace.Name(e.name),
                 options.pid >= 0 ? static_cast<uint64_t>(options.pid)
                                  : e.thread >> 32,
                 e.thread & 0xFFFFFFFFu, start, end, sink.time_base_ns());
      if (e.correlation != kNoCorrelation) {
        absl::StrAppend(&out, "\"correlation\":", e.correlation);
      }
      out += "}}";
      RETURN_IF_ERROR(sink.Flush());
    }
  }
  absl::flat_hash_map<KernelKey, const CollectiveKernel*> collectives;
  for (const CollectiveKernel& c : trace.collectives) {
    if (options.device >= 0 && c.device != options.device) continue;
    collectives.try_emplace(
        KernelKey{c.start_ns, c.end_ns, c.device, c.stream, c.kernel_name}, &c);
  }
  for (const GpuActivity& a : trace.gpu) {
    if (options.device >= 0 && a.device != options.device) continue;
    const int64_t start = options.ToClock(a.start_ns);
    const int64_t end = options.ToClock(a.end_ns);
    if (!keep(start, end)) continue;
    std::string& out = sink.Event();
    BeginSlice(out, GpuCategory(a.kind), trace.Name(a.name),
               options.pid >= 0 ? static_cast<uint64_t>(options.pid)
                                : static_cast<uint32_t>(a.device),
               static_cast<uint32_t>(a.stream), start, end,
               sink.time_base_ns());
    absl::StrAppend(&out, "\"device\":", a.device, ",\"stream\":", a.stream);
    if (a.correlation != kNoCorrelation) {
      absl::StrAppend(&out, ",\"correlation\":", a.correlation);
    }
    if (a.bytes != 0) absl::StrAppend(&out, ",\"bytes\":", a.bytes);
    auto it = a.kind == GpuActivityKind::kKernel && !collectives.empty()
                  ? collectives.find(KernelKey{a.start_ns, a.end_ns, a.device,
                                               a.stream, a.name})
                  : collectives.end();
    if (it != collectives.end()) {
      const CollectiveKernel& c = *it->second;
      auto name = [&](const char* key, NameId id) {
        if (id == kNoName) return;
        absl::StrAppend(&out, ",\"", key, "\":");
        AppendJsonString(&out, trace.Name(id));
      };
      auto count = [&](const char* key, int64_t value) {
        if (value >= 0) absl::StrAppend(&out, ",\"", key, "\":", value);
      };
      VisitCollectiveArgs(trace, c, name, count);
      collectives.erase(it);
    }
    out += "}}";
    RETURN_IF_ERROR(sink.Flush());
  }
  return absl::OkStatus();
}

}  // namespace bubblewatch
