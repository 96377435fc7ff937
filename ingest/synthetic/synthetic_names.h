// The names the synthetic fleet uses, as PyTorch's profiler (Kineto) writes
// them. Every synthetic Trace holds exactly this string table in this order,
// so NameId == SyntheticName and traces of one job concatenate without
// remapping.
#ifndef BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_NAMES_H_
#define BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_NAMES_H_

#include <array>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "schemas/trace.h"

namespace bubblewatch {

enum SyntheticName : NameId {
  // CUDA runtime calls.
  kNameCudaLaunchKernel,
  kNameCudaMemcpyAsync,
  kNameCudaStreamSynchronize,
  kNameCudaDeviceSynchronize,
  kNameCudaFree,
  kNameCudaMalloc,
  // Framework operators, annotations and Python ranges (context only,
  // except aten::item / _local_scalar_dense (sync), the DataLoader range
  // (data loading) and empty_cache (allocator)).
  kNameTrainStep,
  kNameDataLoaderNext,
  kNameAtenTo,
  kNameAtenCopy,
  kNameAtenLinear,
  kNameAtenAddmm,
  kNameAtenAttention,
  kNameAtenAdd,
  kNameAtenMul,
  kNameAtenLayerNorm,
  kNameAtenGelu,
  kNameAtenCrossEntropy,
  kNameAtenItem,
  kNameAtenLocalScalarDense,
  kNameAtenEmptyStrided,
  kNameAddmmBackward,
  kNameGeluBackward,
  kNameLayerNormBackward,
  kNameAttentionBackward,
  kNameNcclAllReduce,
  kNameOptimizerStep,
  kNameEmptyCache,
  kNameLogMetrics,
  // GPU kernels and copies.
  kNameSgemmTn,
  kNameSgemmNn,
  kNameSgemmNt,
  kNameFmhaForward,
  kNameFmhaBackward,
  kNameAddKernel,
  kNameMulKernel,
  kNameGeluKernel,
  kNameGeluBackwardKernel,
  kNameLayerNormKernel,
  kNameLayerNormBackwardKernel,
  kNameLogSoftmaxKernel,
  kNameNllLossKernel,
  kNameNcclAllReduceKernel,
  kNameAdamKernel,
  kNameMemcpyHtoD,
  kNameMemcpyDtoH,
  kNumSyntheticNames,
};

inline constexpr std::array<absl::string_view, kNumSyntheticNames>
    kSyntheticNames = {
        "cudaLaunchKernel",
        "cudaMemcpyAsync",
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaFree",
        "cudaMalloc",
        "train_step",
        "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
        "aten::to",
        "aten::copy_",
        "aten::linear",
        "aten::addmm",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::add",
        "aten::mul",
        "aten::layer_norm",
        "aten::gelu",
        "aten::cross_entropy_loss",
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::empty_strided",
        "autograd::engine::evaluate_function: AddmmBackward0",
        "autograd::engine::evaluate_function: GeluBackward0",
        "autograd::engine::evaluate_function: NativeLayerNormBackward0",
        "autograd::engine::evaluate_function: "
        "ScaledDotProductEfficientAttentionBackward0",
        "nccl:all_reduce",
        "Optimizer.step#AdamW.step",
        "torch/cuda/memory.py(192): empty_cache",
        "train.py(88): log_metrics",
        "ampere_sgemm_128x64_tn",
        "ampere_sgemm_128x64_nn",
        "ampere_sgemm_64x64_nt",
        "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::"
        "AttentionKernel<float, cutlass::arch::Sm80, true, 64, 64, 64, true, "
        "true>::Params)",
        "fmha_cutlassB_f32_aligned_64x64_k64_sm80(PyTorchMemEffAttention::"
        "AttentionBackwardKernel<cutlass::arch::Sm80, float, true, false, "
        "true, 64, 64, 64, false>::Params)",
        "void at::native::vectorized_elementwise_kernel<4, "
        "at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >"
        "(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, "
        "3>)",
        "void at::native::vectorized_elementwise_kernel<4, "
        "at::native::AUnaryFunctor<float, float, float, "
        "at::native::binary_internal::MulFunctor<float> >, "
        "at::detail::Array<char*, 2> >(int, at::native::AUnaryFunctor<float, "
        "float, float, at::native::binary_internal::MulFunctor<float> >, "
        "at::detail::Array<char*, 2>)",
        "void at::native::vectorized_elementwise_kernel<4, "
        "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
        "at::native::GeluType)::{lambda()#2}::operator()() const::"
        "{lambda(float)#1}, at::detail::Array<char*, 2> >(int, ...)",
        "void at::native::elementwise_kernel<128, 2, "
        "at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, "
        "at::native::GeluType)::{lambda(float, float)#2}>(int, ...)",
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel"
        "<float, float>(int, float, float const*, float const*, float const*, "
        "float*, float*, float*)",
        "void at::native::(anonymous namespace)::"
        "layer_norm_grad_input_kernel_vectorized<float, float>(float const*, "
        "float const*, float const*, float const*, float const*, float*, "
        "int)",
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, "
        "float, float, at::native::(anonymous namespace)::"
        "LogSoftMaxForwardEpilogue>(float*, float const*, int)",
        "void at::native::(anonymous namespace)::"
        "nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, "
        "float*, float const*, long const*, float const*, bool, long, long, "
        "long, long)",
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, "
        "ncclWork*)",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<"
        "at::native::(anonymous namespace)::TensorListMetadata<4>, "
        "at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
        "(at::native::ADAM_MODE)1, false>, float*, double, double, double, "
        "double, double, bool, float const*, float const*>(...)",
        "Memcpy HtoD (Pinned -> Device)",
        "Memcpy DtoH (Device -> Pageable)",
};

// A group's `Process Group Ranks` as PyTorch's profiler writes it
// (saveNcclMeta's format_list): "[0, 4, 8]", and for a group of more than
// 30 ranks only the first 30, then "...": "[0, 1, ..., 29, ...]". A
// 1,024-rank world's full list (5 KB) would pass the processor's name limit;
// the truncated one lists too little to name the members, so the analysis
// infers them (docs/semantics.md#matching-instances).
inline std::string ProcessGroupRanksText(const std::vector<int>& ranks) {
  constexpr size_t kListed = 30;
  if (ranks.size() <= kListed) {
    return absl::StrCat("[", absl::StrJoin(ranks, ", "), "]");
  }
  return absl::StrCat(
      "[", absl::StrJoin(ranks.begin(), ranks.begin() + kListed, ", "),
      ", ...]");
}

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_NAMES_H_
