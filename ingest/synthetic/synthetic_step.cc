#include "ingest/synthetic/synthetic_step.h"

#include "ingest/synthetic/synthetic_names.h"

namespace bubblewatch {
namespace {

constexpr int kLayers = 12;
constexpr int kAllReduceEveryLayers = 3;

// Appends ops while counting events, weights and incident time.
class PlanBuilder {
 public:
  explicit PlanBuilder(SyntheticRng& rng) : rng_(rng) {}

  void Python(int64_t lo_us, int64_t hi_us) {
    Add({.kind = StepOpKind::kPython,
         .ns = rng_.Uniform(lo_us, hi_us) * kNsPerUs});
  }
  void PythonFraction(double lo, double hi) {
    Add({.kind = StepOpKind::kPython, .step_fraction = rng_.Between(lo, hi)});
  }
  void Open(NameId name, CpuEventCategory category = CpuEventCategory::kCpuOp) {
    Add({.kind = StepOpKind::kOpen, .name = name, .category = category});
  }
  void Close() { Add({.kind = StepOpKind::kClose}); }
  void Kernel(NameId name, double weight) {
    Add({.kind = StepOpKind::kKernel,
         .name = name,
         .stream = kComputeStream,
         .weight = weight});
  }
  void TinyKernel(NameId name, int64_t lo_us, int64_t hi_us) {
    Add({.kind = StepOpKind::kKernel,
         .name = name,
         .stream = kComputeStream,
         .ns = rng_.Uniform(lo_us, hi_us) * kNsPerUs});
  }
  void SideKernel(NameId name, double weight) {
    Add({.kind = StepOpKind::kSideKernel,
         .name = name,
         .stream = kNcclStream,
         .weight = weight});
  }
  void Add(StepOp op) {
    switch (op.kind) {
      case StepOpKind::kPython:
      case StepOpKind::kClose:
        break;
      case StepOpKind::kKernel:
      case StepOpKind::kSideKernel:
      case StepOpKind::kCopyToDevice:
        plan_.events += 2;  // The call and the GPU activity.
        break;
      case StepOpKind::kItem:
        plan_.events += 5;  // item, _local_scalar_dense, copy call, copy, sync.
        break;
      case StepOpKind::kOpen:
      case StepOpKind::kDeviceSync:
      case StepOpKind::kDataLoader:
      case StepOpKind::kFree:
      case StepOpKind::kMalloc:
        plan_.events += 1;
        break;
    }
    plan_.total_weight += op.weight;
    plan_.incident_fraction += op.step_fraction;
    plan_.ops.push_back(op);
  }

  // A framework op around one kernel launch: Python, the op, the launch.
  void Op(NameId op, NameId kernel, double weight) {
    Python(2, 6);
    Open(op);
    Python(1, 3);
    Kernel(kernel, weight);
    Python(1, 2);
    Close();
  }
  // aten::linear -> aten::addmm -> sgemm, optionally allocating first.
  void Linear(double weight, bool allocate) {
    Python(2, 6);
    Open(kNameAtenLinear);
    Python(1, 2);
    Open(kNameAtenAddmm);
    Python(1, 2);
    if (allocate) {
      Open(kNameAtenEmptyStrided);
      Python(1, 2);
      Add({.kind = StepOpKind::kMalloc,
           .name = kNameCudaMalloc,
           .ns = rng_.Uniform(200, 1200) * kNsPerUs});
      Close();
    }
    Kernel(kNameSgemmTn, weight);
    Python(1, 2);
    Close();
    Close();
  }
  // AddmmBackward0: the two gradient matmuls.
  void LinearBackward(double weight) {
    Python(2, 5);
    Open(kNameAddmmBackward);
    Python(1, 3);
    Kernel(kNameSgemmNn, weight);
    Python(1, 2);
    Kernel(kNameSgemmNt, weight);
    Python(1, 2);
    Close();
  }
  void Item() {
    Python(2, 6);
    Add({.kind = StepOpKind::kItem});
  }

  StepPlan Take() { return std::move(plan_); }

 private:
  SyntheticRng& rng_;
  StepPlan plan_;
};

}  // namespace

StepPlan BuildStepPlan(SyntheticScenario scenario, int64_t step,
                       SyntheticRng& rng) {
  PlanBuilder b(rng);
  const bool healthy = scenario == SyntheticScenario::kHealthy;

  b.Open(kNameTrainStep, CpuEventCategory::kUserAnnotation);
  // Next batch. Prefetched workers answer in tens of microseconds; a
  // starved input pipeline makes the training loop wait.
  b.Python(3, 8);
  if (scenario == SyntheticScenario::kDataloader) {
    b.Add({.kind = StepOpKind::kDataLoader,
           .name = kNameDataLoaderNext,
           .step_fraction = rng.Between(0.10, 0.30)});
  } else {
    b.Add({.kind = StepOpKind::kDataLoader,
           .name = kNameDataLoaderNext,
           .ns = rng.Uniform(30, 80) * kNsPerUs});
  }
  // batch.to("cuda", non_blocking=True) from pinned memory.
  b.Python(2, 5);
  b.Open(kNameAtenTo);
  b.Python(1, 3);
  b.Open(kNameAtenCopy);
  b.Python(1, 2);
  if (scenario == SyntheticScenario::kMemcpy) {
    // A big tensor copied on the compute stream right before it is needed.
    b.Add({.kind = StepOpKind::kCopyToDevice,
           .name = kNameMemcpyHtoD,
           .on_compute_stream = true,
           .step_fraction = rng.Between(0.05, 0.15)});
  } else {
    b.Add({.kind = StepOpKind::kCopyToDevice,
           .name = kNameMemcpyHtoD,
           .bytes = rng.Uniform(2, 8) << 20});
  }
  b.Close();
  b.Close();

  if (scenario == SyntheticScenario::kLaunch) {
    // GPU-side augmentation, one tiny elementwise kernel per sample and op:
    // each launch costs more host time than its kernel takes to run.
    const int64_t tiny_kernels = rng.Uniform(250, 400);
    for (int64_t i = 0; i < tiny_kernels; ++i) {
      b.Python(1, 3);
      b.Open(i % 2 == 0 ? kNameAtenMul : kNameAtenAdd);
      b.Python(1, 2);
      b.TinyKernel(i % 2 == 0 ? kNameMulKernel : kNameAddKernel, 2, 4);
      b.Python(0, 1);
      b.Close();
    }
  }

  // Forward.
  const bool allocate = scenario == SyntheticScenario::kAlloc;
  int linears = 0;
  for (int layer = 0; layer < kLayers; ++layer) {
    b.Linear(3.0, allocate && linears++ < 4);  // QKV projection.
    b.Op(kNameAtenAttention, kNameFmhaForward, 2.0);
    b.Linear(1.0, allocate && linears++ < 4);  // Output projection.
    b.Op(kNameAtenAdd, kNameAddKernel, 0.15);
    b.Op(kNameAtenLayerNorm, kNameLayerNormKernel, 0.2);
    b.Linear(4.0, false);  // MLP up.
    b.Op(kNameAtenGelu, kNameGeluKernel, 0.3);
    b.Linear(4.0, false);  // MLP down.
    b.Op(kNameAtenAdd, kNameAddKernel, 0.15);
    b.Op(kNameAtenLayerNorm, kNameLayerNormKernel, 0.2);
    if (scenario == SyntheticScenario::kSync && layer == kLayers / 2) {
      // Data-dependent control flow: `if mask.any().item(): ...`.
      b.Item();
      b.PythonFraction(0.04, 0.10);
    }
  }
  b.Python(2, 5);
  b.Open(kNameAtenCrossEntropy);
  b.Python(1, 3);
  b.Kernel(kNameLogSoftmaxKernel, 0.5);
  b.Python(1, 2);
  b.Kernel(kNameNllLossKernel, 0.1);
  b.Close();

  // Backward, with gradient buckets all-reduced while later layers compute.
  for (int layer = kLayers - 1; layer >= 0; --layer) {
    b.Python(1, 3);
    b.Open(kNameLayerNormBackward);
    b.Kernel(kNameLayerNormBackwardKernel, 0.4);
    b.Close();
    b.LinearBackward(4.0);  // MLP down.
    b.Python(1, 3);
    b.Open(kNameGeluBackward);
    b.Kernel(kNameGeluBackwardKernel, 0.3);
    b.Close();
    b.LinearBackward(4.0);  // MLP up.
    b.Python(1, 3);
    b.Open(kNameLayerNormBackward);
    b.Kernel(kNameLayerNormBackwardKernel, 0.4);
    b.Close();
    b.LinearBackward(1.0);  // Output projection.
    b.Python(1, 3);
    b.Open(kNameAttentionBackward);
    b.Kernel(kNameFmhaBackward, 4.0);
    b.Close();
    b.LinearBackward(3.0);  // QKV projection.
    if (layer % kAllReduceEveryLayers == 0) {
      b.Python(2, 5);
      b.Open(kNameNcclAllReduce);
      b.Python(1, 3);
      b.SideKernel(kNameNcclAllReduceKernel, 1.5);
      b.Close();
    }
  }

  // Fused AdamW.
  b.Python(5, 15);
  b.Open(kNameOptimizerStep, CpuEventCategory::kUserAnnotation);
  for (int i = 0; i < 4; ++i) {
    b.Python(2, 4);
    b.Kernel(kNameAdamKernel, 0.5);
  }
  b.Close();

  if (scenario == SyntheticScenario::kAlloc) {
    // torch.cuda.empty_cache() in the loop: cudaFree waits for the device.
    b.Python(3, 8);
    b.Open(kNameEmptyCache, CpuEventCategory::kPythonFunction);
    b.Add({.kind = StepOpKind::kFree,
           .name = kNameCudaFree,
           .ns = rng.Uniform(100, 400) * kNsPerUs});
    b.Add({.kind = StepOpKind::kFree,
           .name = kNameCudaFree,
           .ns = rng.Uniform(50, 150) * kNsPerUs});
    b.Close();
  }
  // loss.item() for logging: every step, except in the healthy loop.
  if (!healthy || step % 10 == 9) b.Item();
  if (scenario == SyntheticScenario::kSync) {
    b.Python(3, 8);
    b.Open(kNameLogMetrics, CpuEventCategory::kPythonFunction);
    b.Add({.kind = StepOpKind::kDeviceSync,
           .name = kNameCudaDeviceSynchronize,
           .category = CpuEventCategory::kCudaRuntime});
    b.PythonFraction(0.05, 0.12);
    b.Close();
  }
  b.Python(3, 10);
  b.Close();  // train_step
  return b.Take();
}

}  // namespace bubblewatch
