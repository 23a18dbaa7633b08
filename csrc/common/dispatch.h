// Dtype dispatch for the (input, output) pairs the kernels convert between in registers.
#pragma once

#include <ATen/Dispatch.h>

#include <type_traits>

namespace reduce_ops {

template <typename T>
struct Tag {
  using type = T;
};

template <typename T>
constexpr bool is_reduced_float_v =
    std::is_same_v<T, at::Half> || std::is_same_v<T, at::BFloat16>;

// Calls fn(Tag<In>{}, Tag<Out>{}) for the pairs the kernels support: Out == In for the four
// float dtypes, and Out == float for half and bfloat16 inputs (widened in registers); with
// kNarrow (the reductions), also Out == half or bfloat16 for float inputs: a staged sum's last
// stage, which adds float32 partials into a 16-bit result (ops.cpp). The binding converts any
// other pair before it gets here.
template <bool kNarrow = false, typename F>
void dispatch_in_out(const char* op, at::ScalarType in, at::ScalarType out, F&& fn) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in, "reduce_ops", [&] {
    using In = scalar_t;
    if (out == in) {
      fn(Tag<In>{}, Tag<In>{});
      return;
    }
    if constexpr (is_reduced_float_v<In>) {
      if (out == at::kFloat) {
        fn(Tag<In>{}, Tag<float>{});
        return;
      }
    }
    if constexpr (kNarrow && std::is_same_v<In, float>) {
      if (out == at::kHalf) {
        fn(Tag<float>{}, Tag<at::Half>{});
        return;
      }
      if (out == at::kBFloat16) {
        fn(Tag<float>{}, Tag<at::BFloat16>{});
        return;
      }
    }
    TORCH_CHECK(false, "reduce_ops.", op, ": no kernel from ", in, " to ", out);
  });
}

}  // namespace reduce_ops
