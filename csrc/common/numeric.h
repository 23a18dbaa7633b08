// Reduction functors and numeric helpers shared by the CPU and CUDA kernels.
//
// A sum kernel and a max kernel differ only by the functor they are instantiated with:
// each functor carries its identity and a combine that is safe for the special values
// SPEC.md names (the max identity is -inf, never FLT_MIN; a NaN wins every max).
#pragma once

#include <c10/macros/Macros.h>
#include <cmath>
#include <limits>
#include <type_traits>

namespace reduce_ops {

template <typename Acc>
struct SumOp {
  static C10_HOST_DEVICE Acc identity() { return Acc(0); }
  C10_HOST_DEVICE Acc operator()(Acc a, Acc b) const { return a + b; }
};

// NaN-propagating max: if either side is NaN the result is NaN (fmax would drop it). On sm_80+
// a float max is one max.NaN instruction instead of a compare, a NaN test and a select: the
// row kernels take a max per element, and those three instructions per element were most of
// their issue slots on short bfloat16 rows (ncu, H200: ReduceScale 442368 x 128 issued 0.74
// instructions per scheduler cycle against DRAM at 63% of peak). The two differ only on the
// sign of a zero max, which compares equal either way.
template <typename Acc>
struct MaxOp {
  static C10_HOST_DEVICE Acc identity() { return -std::numeric_limits<Acc>::infinity(); }
  C10_HOST_DEVICE Acc operator()(Acc a, Acc b) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<Acc, float>) {
      float m;
      asm("max.NaN.f32 %0, %1, %2;" : "=f"(m) : "f"(a), "f"(b));
      return m;
    }
#endif
    return (a > b || a != a) ? a : b;
  }
};

// A running reduction of one functor. Sums are compensated (Neumaier): the rounding error of
// every addition is carried in `comp` and folded in at the end, so a long sequential sum is
// accurate to a few ulps of the result instead of drifting by n ulps. Other functors are exact
// and just fold.
template <typename Acc, typename Op>
struct Accumulator {
  Acc value = Op::identity();
  C10_HOST_DEVICE void add(Acc x) { value = Op()(value, x); }
  C10_HOST_DEVICE void merge(const Accumulator& o) { add(o.value); }
  C10_HOST_DEVICE Acc result() const { return value; }
};

template <typename Acc>
struct Accumulator<Acc, SumOp<Acc>> {
  Acc value = Acc(0), comp = Acc(0);
  C10_HOST_DEVICE void add(Acc x) {
    const Acc t = value + x;
    // The low-order bits lost by t: from x when |value| >= |x|, else from value.
    comp += ((value < 0 ? -value : value) >= (x < 0 ? -x : x)) ? (value - t) + x : (x - t) + value;
    value = t;
  }
  C10_HOST_DEVICE void merge(const Accumulator& o) {
    add(o.value);
    comp += o.comp;
  }
  // An infinite or NaN sum is final: its compensation (inf - inf) would only turn it into NaN.
  C10_HOST_DEVICE Acc result() const { return value - value == Acc(0) ? value + comp : value; }
};

// max(a, eps) for the ReduceScale scale, keeping a NaN row NaN (as torch.clamp_min).
template <typename Acc>
C10_HOST_DEVICE inline Acc clamp_min_keep_nan(Acc a, Acc lo) {
  return (a < lo) ? lo : a;
}

// The ReduceScale output element: x / scale, or 0 for a row whose scale is 0.
template <typename Acc>
C10_HOST_DEVICE inline Acc scale_element(Acc x, Acc scale) {
  return scale == Acc(0) ? Acc(0) : x / scale;
}

}  // namespace reduce_ops
