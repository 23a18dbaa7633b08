// CPU kernels: sum / amax over the (outer, reduced, inner) view, softmax and ReduceScale over
// rows. Work is cut into fixed-size chunks whose partial results are combined in chunk order,
// so results are the same bits whatever the thread count, and the kernels (kernels_body.h) are
// compiled once per instruction set with the same arithmetic, so also whatever the target.
//
// Targets: the baseline of the architecture, and on x86-64 with GCC an AVX2 (with F16C) and
// an AVX-512 copy. The one used is the best the CPU runs and torch's own CPU kernels use (torch picks
// from the CPU and the ATEN_CPU_CAPABILITY variable, which therefore steers ours too).
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "common/dispatch.h"
#include "common/numeric.h"
#include "ops.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define REDUCE_OPS_CPU_X86_TARGETS 1
// GCC 12's _mm512_cvtph_ps and _mm512_cvtps_ph start from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports at every inlined use (the header's false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>  // float16 conversions (F16C, AVX-512)
#endif

namespace reduce_ops::cpu_default {
constexpr int kVectorBytes = 16;
#include "cpu/kernels_body.h"
}  // namespace reduce_ops::cpu_default

#ifdef REDUCE_OPS_CPU_X86_TARGETS
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
namespace reduce_ops::cpu_avx2 {
constexpr int kVectorBytes = 32;
#include "cpu/kernels_body.h"
}  // namespace reduce_ops::cpu_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2")
namespace reduce_ops::cpu_avx512 {
constexpr int kVectorBytes = 64;
#include "cpu/kernels_body.h"
}  // namespace reduce_ops::cpu_avx512
#pragma GCC pop_options
#endif

namespace reduce_ops {
namespace {

#ifdef REDUCE_OPS_CPU_X86_TARGETS
enum class CpuTarget { kDefault, kAvx2, kAvx512 };

// The target, picked on the first call of any entry and kept for the process.
CpuTarget cpu_target() {
  static const CpuTarget target = [] {
    const std::string torch_choice = at::get_cpu_capability();
    __builtin_cpu_init();
    if (torch_choice == "AVX512" && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
      return CpuTarget::kAvx512;
    if ((torch_choice == "AVX512" || torch_choice == "AVX2") && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("f16c"))
      return CpuTarget::kAvx2;
    return CpuTarget::kDefault;
  }();
  return target;
}

// Calls the kernel entry `name` of cpu_target().
#define REDUCE_OPS_CPU_CALL(name, ...)                                    \
  do {                                                                    \
    const CpuTarget target = cpu_target();                                \
    if (target == CpuTarget::kAvx512) cpu_avx512::name(__VA_ARGS__);      \
    else if (target == CpuTarget::kAvx2) cpu_avx2::name(__VA_ARGS__);     \
    else cpu_default::name(__VA_ARGS__);                                  \
  } while (0)
#else
#define REDUCE_OPS_CPU_CALL(name, ...) cpu_default::name(__VA_ARGS__)
#endif

}  // namespace

void reduce_cpu(const at::Tensor& x, const ReduceGeometry& g, const at::Tensor& out,
                ReduceKind kind) {
  REDUCE_OPS_CPU_CALL(reduce, x, g, out, kind);
}

void softmax_rows_cpu(const at::Tensor& x, const RowGeometry& g, const at::Tensor& y) {
  REDUCE_OPS_CPU_CALL(softmax_rows, x, g, y);
}

void softmax_inner_cpu(const at::Tensor& x, const InnerGeometry& g, const at::Tensor& y) {
  REDUCE_OPS_CPU_CALL(softmax_inner, x, g, y);
}

void reduce_scale_cpu(const at::Tensor& x, const RowGeometry& g, const at::Tensor& y,
                      const at::Tensor& scale, double eps) {
  REDUCE_OPS_CPU_CALL(reduce_scale, x, g, y, scale, eps);
}

void softmax_backward_cpu(const at::Tensor& grad, const at::Tensor& out, const InnerGeometry& g,
                          const at::Tensor& grad_x) {
  REDUCE_OPS_CPU_CALL(softmax_backward, grad, out, g, grad_x);
}

}  // namespace reduce_ops
