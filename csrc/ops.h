// The interface between the binding (ops.cpp) and the CPU / CUDA backends.
//
// The binding validates arguments, resolves dims and reduces every input to one of the
// canonical strided views below; a backend only sees those views and fresh outputs.
#pragma once

#include <ATen/core/Tensor.h>

namespace reduce_ops {

enum class ReduceKind { kSum, kMax };

// out[o * inner + i] = reduce over r < reduced of
//                      x[o * outer_stride + r * reduced_stride + i * inner_stride]
// Strides are in elements and may be 0 (expanded) but never negative. out is contiguous
// with outer * inner elements, of the output dtype (x's, or float32 for a half/bfloat16 sum
// asked for in float32).
struct ReduceGeometry {
  int64_t outer = 1, reduced = 1, inner = 1;
  int64_t outer_stride = 0, reduced_stride = 0, inner_stride = 0;
};

// A reduction whose reduced dims make two groups that no single view joins (dims 0 and 2 of a
// contiguous (N, C, L), a column slice reduced whole): out[o * inner + i] = reduce over q < qs and
// m < ms of x[o * outer_stride + i * inner_stride + q * q_stride + m * m_stride] (q_stride >=
// m_stride), out contiguous with outer * inner elements as in ReduceGeometry.
struct TwoGroupsGeometry {
  int64_t outer = 1, inner = 1, qs = 1, ms = 1;
  int64_t outer_stride = 0, inner_stride = 0, q_stride = 0, m_stride = 0;
};

// Row-wise ops (softmax, reduce_scale): `rows` rows of `cols` elements; row r starts at
// x + r * x_row_stride and y + r * y_row_stride, its elements are contiguous (stride 1).
struct RowGeometry {
  int64_t rows = 0, cols = 0;
  int64_t x_row_stride = 0, y_row_stride = 0;
};

// Softmax over the middle dim of a contiguous (outer, cols, inner) tensor, inner > 1.
struct InnerGeometry {
  int64_t outer = 0, cols = 0, inner = 0;
};

void reduce_cpu(const at::Tensor& x, const ReduceGeometry& g, const at::Tensor& out,
                ReduceKind kind);
void softmax_rows_cpu(const at::Tensor& x, const RowGeometry& g, const at::Tensor& y);
void softmax_inner_cpu(const at::Tensor& x, const InnerGeometry& g, const at::Tensor& y);
// y may alias x (the in-place op); scale is contiguous with `rows` elements.
void reduce_scale_cpu(const at::Tensor& x, const RowGeometry& g, const at::Tensor& y,
                      const at::Tensor& scale, double eps);
// grad_x = out * (grad - sum(grad * out, dim)) on contiguous (outer, cols, inner) tensors of one
// dtype; inner == 1 means rows.
void softmax_backward_cpu(const at::Tensor& grad, const at::Tensor& out, const InnerGeometry& g,
                          const at::Tensor& grad_x);

#ifdef REDUCE_OPS_WITH_CUDA
void reduce_cuda(const at::Tensor& x, const ReduceGeometry& g, const at::Tensor& out,
                 ReduceKind kind);
// One launch: small inputs (a block an output), and larger ones whose inner group is contiguous
// runs of 128 bytes or more (the runs kernel); false, launching nothing, where the stages pay (the
// binding runs them) or a strategy is forced.
bool reduce_two_groups_cuda(const at::Tensor& x, const TwoGroupsGeometry& g, const at::Tensor& out,
                            ReduceKind kind);
void softmax_rows_cuda(const at::Tensor& x, const RowGeometry& g, const at::Tensor& y);
void softmax_inner_cuda(const at::Tensor& x, const InnerGeometry& g, const at::Tensor& y);
void reduce_scale_cuda(const at::Tensor& x, const RowGeometry& g, const at::Tensor& y,
                       const at::Tensor& scale, double eps);
void softmax_backward_cuda(const at::Tensor& grad, const at::Tensor& out, const InnerGeometry& g,
                           const at::Tensor& grad_x);
#endif

}  // namespace reduce_ops
