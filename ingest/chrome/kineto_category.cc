#include "ingest/chrome/kineto_category.h"

namespace bubblewatch {
namespace {

constexpr KinetoCategory Gpu(GpuActivityKind kind) { return {true, kind, {}}; }
constexpr KinetoCategory Cpu(CpuEventCategory category) {
  return {false, GpuActivityKind::kKernel, category};
}

}  // namespace

std::optional<KinetoCategory> ClassifyKinetoCategory(std::string_view cat) {
  // Most frequent first.
  if (cat == "cpu_op" || cat == "Operator") {
    return Cpu(CpuEventCategory::kCpuOp);
  }
  if (cat == "cuda_runtime" || cat == "Runtime") {
    return Cpu(CpuEventCategory::kCudaRuntime);
  }
  if (cat == "kernel" || cat == "Kernel") return Gpu(GpuActivityKind::kKernel);
  if (cat == "gpu_memcpy" || cat == "Memcpy") {
    return Gpu(GpuActivityKind::kMemcpy);
  }
  if (cat == "gpu_memset" || cat == "Memset") {
    return Gpu(GpuActivityKind::kMemset);
  }
  if (cat == "cuda_driver" || cat == "Driver") {
    return Cpu(CpuEventCategory::kCudaDriver);
  }
  if (cat == "user_annotation") return Cpu(CpuEventCategory::kUserAnnotation);
  if (cat == "python_function") return Cpu(CpuEventCategory::kPythonFunction);
  return std::nullopt;
}

}  // namespace bubblewatch
