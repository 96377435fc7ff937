// Which PyTorch-profiler (Kineto) event categories bubblewatch reads, and as
// what (docs/semantics.md#inputs).
#ifndef BUBBLEWATCH_INGEST_CHROME_KINETO_CATEGORY_H_
#define BUBBLEWATCH_INGEST_CHROME_KINETO_CATEGORY_H_

#include <optional>
#include <string_view>

#include "schemas/trace.h"

namespace bubblewatch {

// What a kept category becomes: a GPU activity of `gpu_kind`, or (gpu false)
// a CPU event of `cpu_category`.
struct KinetoCategory {
  bool gpu = false;
  GpuActivityKind gpu_kind = GpuActivityKind::kKernel;
  CpuEventCategory cpu_category = CpuEventCategory::kOther;
};

// Maps a "cat" value, current or older spelling:
//   kernel / Kernel -> kKernel, gpu_memcpy / Memcpy -> kMemcpy,
//   gpu_memset / Memset -> kMemset; cuda_runtime / Runtime -> kCudaRuntime,
//   cuda_driver / Driver -> kCudaDriver, cpu_op / Operator -> kCpuOp,
//   user_annotation -> kUserAnnotation, python_function -> kPythonFunction.
// nullopt for every other category (ac2g, fwdbwd, cuda_sync,
// gpu_user_annotation, mtia_*, Trace, ...), which readers skip and count.
std::optional<KinetoCategory> ClassifyKinetoCategory(std::string_view cat);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_CHROME_KINETO_CATEGORY_H_
