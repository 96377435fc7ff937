// TraceBuilder: hand-made timelines for analyzer tests, in microseconds.
#ifndef BUBBLEWATCH_TESTS_ANALYSIS_TRACE_BUILDER_H_
#define BUBBLEWATCH_TESTS_ANALYSIS_TRACE_BUILDER_H_

#include <string>

#include "schemas/trace.h"

namespace bubblewatch::testing {

class TraceBuilder {
 public:
  TraceBuilder() : names_(&trace_) {}

  TraceBuilder& Kernel(const std::string& name, double start_us, double end_us,
                       int stream = 7, int device = 0, uint64_t corr = 0) {
    return Gpu(GpuActivityKind::kKernel, name, start_us, end_us, stream, device,
               corr, false);
  }
  TraceBuilder& Memcpy(const std::string& name, double start_us, double end_us,
                       int device = 0, uint64_t corr = 0,
                       bool pageable = false) {
    return Gpu(GpuActivityKind::kMemcpy, name, start_us, end_us, 9, device,
               corr, pageable);
  }
  TraceBuilder& Cpu(const std::string& name, double start_us, double end_us,
                    uint64_t tid = 1, uint64_t corr = 0,
                    CpuEventCategory category = CpuEventCategory::kOther) {
    CpuEvent e;
    e.name = names_.Intern(name);
    e.start_ns = Ns(start_us);
    e.end_ns = Ns(end_us);
    e.thread = tid;
    e.correlation = corr;
    e.category = category;
    trace_.cpu.push_back(e);
    return *this;
  }
  // A cudaLaunchKernel runtime call with correlation `corr`.
  TraceBuilder& Launch(double start_us, double end_us, uint64_t corr,
                       uint64_t tid = 1) {
    return Cpu("cudaLaunchKernel", start_us, end_us, tid, corr,
               CpuEventCategory::kCudaRuntime);
  }

  // A collective kernel (name "ncclDevKernel_<type>(...)") and its
  // CollectiveKernel record: process group `group` (none if empty) and
  // Seq `seq` (none if negative).
  TraceBuilder& Collective(const std::string& type, double start_us,
                           double end_us, const std::string& group = "",
                           int64_t seq = -1, int stream = 24, int device = 0,
                           const std::string& group_ranks = "") {
    const std::string name = "ncclDevKernel_" + type + "(ncclDevComm*)";
    Gpu(GpuActivityKind::kKernel, name, start_us, end_us, stream, device, 0,
        false);
    CollectiveKernel c;
    c.start_ns = Ns(start_us);
    c.end_ns = Ns(end_us);
    c.device = device;
    c.stream = stream;
    c.kernel_name = names_.Intern(name);
    if (!group.empty()) c.process_group = names_.Intern(group);
    if (!group_ranks.empty()) c.group_ranks = names_.Intern(group_ranks);
    c.seq = seq;
    trace_.collectives.push_back(c);
    return *this;
  }

  Trace Build() const { return trace_; }
  Trace& trace() { return trace_; }

  static int64_t Ns(double us) {
    return static_cast<int64_t>(us * 1000.0 + (us >= 0 ? 0.5 : -0.5));
  }

 private:
  TraceBuilder& Gpu(GpuActivityKind kind, const std::string& name,
                    double start_us, double end_us, int stream, int device,
                    uint64_t corr, bool pageable) {
    GpuActivity a;
    a.kind = kind;
    a.name = names_.Intern(name);
    a.start_ns = Ns(start_us);
    a.end_ns = Ns(end_us);
    a.stream = stream;
    a.device = device;
    a.correlation = corr;
    a.pageable = pageable;
    trace_.gpu.push_back(a);
    return *this;
  }

  Trace trace_;
  NameInterner names_;
};

}  // namespace bubblewatch::testing

#endif  // BUBBLEWATCH_TESTS_ANALYSIS_TRACE_BUILDER_H_
