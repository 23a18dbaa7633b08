// CPU kernels: sum / amax over the (outer, reduced, inner) view, softmax and ReduceScale over
// rows. Work is cut into fixed-size chunks whose partial results are combined in chunk order,
// so results are the same bits whatever the thread count.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/dispatch.h"
#include "common/numeric.h"
#include "ops.h"

namespace reduce_ops {
namespace {

// Elements one task reduces before its partial is combined with the others (fixed, so the
// summation order does not depend on the thread count).
constexpr int64_t kChunk = 8192;
// Independent accumulators per task along a row: shorter dependency chains, better rounding.
constexpr int kLanes = 8;
// Output columns one task owns in the column reduction.
constexpr int64_t kColumnTile = 64;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Plain partials over kBlockLen elements (vectorizable), each folded into a compensated
// accumulator: the rounding of a sum grows with the block length, not the row length.
constexpr int64_t kBlockLen = 256;

template <typename Acc, typename Op, typename In>
Accumulator<Acc, Op> reduce_strided(const In* x, int64_t n, int64_t stride) {
  const Op op;
  Accumulator<Acc, Op> acc;
  for (int64_t b = 0; b < n; b += kBlockLen) {
    const int64_t len = std::min(kBlockLen, n - b);
    const In* xb = x + b * stride;
    Acc lanes[kLanes];
    for (Acc& l : lanes) l = Op::identity();
    int64_t i = 0;
    if (stride == 1) {
      for (; i + kLanes <= len; i += kLanes) {
        for (int k = 0; k < kLanes; ++k) lanes[k] = op(lanes[k], static_cast<Acc>(xb[i + k]));
      }
    }
    for (; i < len; ++i) lanes[i % kLanes] = op(lanes[i % kLanes], static_cast<Acc>(xb[i * stride]));
    for (int k = 0; k < kLanes; ++k) acc.add(lanes[k]);
  }
  return acc;
}

template <typename In, typename Out, typename Acc, typename Op>
void reduce_kernel(const In* x, Out* out, const ReduceGeometry& g) {
  using Accum = Accumulator<Acc, Op>;
  const int64_t outputs = g.outer * g.inner;
  const int64_t chunks = ceil_div(g.reduced, kChunk);
  std::vector<Accum> partial(chunks > 1 ? chunks * outputs : 0);
  auto emit = [&](int64_t chunk, int64_t j, const Accum& v) {
    if (chunks == 1) out[j] = static_cast<Out>(v.result());
    else partial[chunk * outputs + j] = v;
  };
  if (g.inner == 1) {
    // Rows: task (chunk, row).
    at::parallel_for(0, chunks * g.outer, 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const int64_t chunk = t / g.outer, o = t % g.outer;
        const int64_t r0 = chunk * kChunk, n = std::min(kChunk, g.reduced - r0);
        const In* base = x + o * g.outer_stride + r0 * g.reduced_stride;
        emit(chunk, o, reduce_strided<Acc, Op>(base, n, g.reduced_stride));
      }
    });
  } else {
    // Columns: task (chunk, outer, tile of inner); each output accumulates in r order.
    const int64_t tiles = ceil_div(g.inner, kColumnTile);
    at::parallel_for(0, chunks * g.outer * tiles, 1, [&](int64_t begin, int64_t end) {
      Accum acc[kColumnTile];
      for (int64_t t = begin; t < end; ++t) {
        const int64_t chunk = t / (g.outer * tiles), o = (t / tiles) % g.outer, tile = t % tiles;
        const int64_t i0 = tile * kColumnTile, width = std::min(kColumnTile, g.inner - i0);
        const int64_t r0 = chunk * kChunk, r1 = std::min(g.reduced, r0 + kChunk);
        std::fill(acc, acc + width, Accum());
        for (int64_t rb = r0; rb < r1; rb += kBlockLen) {
          // Plain per-column partials over a block of rows, folded compensated (as rows do).
          Acc plain[kColumnTile];
          std::fill(plain, plain + width, Op::identity());
          for (int64_t r = rb; r < std::min(r1, rb + kBlockLen); ++r) {
            const In* row = x + o * g.outer_stride + r * g.reduced_stride + i0 * g.inner_stride;
            if (g.inner_stride == 1) {
              for (int64_t i = 0; i < width; ++i) plain[i] = Op()(plain[i], static_cast<Acc>(row[i]));
            } else {
              for (int64_t i = 0; i < width; ++i) plain[i] = Op()(plain[i], static_cast<Acc>(row[i * g.inner_stride]));
            }
          }
          for (int64_t i = 0; i < width; ++i) acc[i].add(plain[i]);
        }
        for (int64_t i = 0; i < width; ++i) emit(chunk, o * g.inner + i0 + i, acc[i]);
      }
    });
  }
  if (chunks > 1) {
    at::parallel_for(0, outputs, 1024, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        Accum acc = partial[j];
        for (int64_t c = 1; c < chunks; ++c) acc.merge(partial[c * outputs + j]);
        out[j] = static_cast<Out>(acc.result());
      }
    });
  }
}

// exp for the softmax kernels (glibc's: measured faster here than a polynomial the compiler
// does not vectorize for baseline x86-64).
template <typename Acc>
inline Acc cpu_exp(Acc x) { return std::exp(x); }


// ---------------------------------------------------------------------------------------------
// Row-wise ops. Each row is cut into chunks of kChunk; phase 1 reduces each chunk to partial
// statistics, phase 2 combines a row's partials, phase 3 writes the chunk's outputs.

template <typename Acc>
struct SoftmaxStats {
  Acc max, sum;  // sum of exp(x - max) over the chunk
};

template <typename Acc>
SoftmaxStats<Acc> combine(SoftmaxStats<Acc> a, SoftmaxStats<Acc> b) {
  const Acc m = MaxOp<Acc>()(a.max, b.max);
  // A side whose max is -inf holds only -inf (exp gives 0); skip it to avoid -inf - -inf.
  const Acc sa = a.max == -std::numeric_limits<Acc>::infinity() ? Acc(0) : a.sum * cpu_exp(a.max - m);
  const Acc sb = b.max == -std::numeric_limits<Acc>::infinity() ? Acc(0) : b.sum * cpu_exp(b.max - m);
  return {m, sa + sb};
}

template <typename In, typename Acc>
SoftmaxStats<Acc> softmax_chunk_stats(const In* x, int64_t n) {
  const Acc m = reduce_strided<Acc, MaxOp<Acc>>(x, n, 1).result();
  Acc s = 0;
  for (int64_t i = 0; i < n; ++i) s += cpu_exp(static_cast<Acc>(x[i]) - m);
  return {m, s};
}

template <typename F>
void for_each_row_chunk(int64_t rows, int64_t cols, const F& f) {
  const int64_t chunks = ceil_div(cols, kChunk);
  at::parallel_for(0, rows * chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r = t / chunks, c = t % chunks;
      f(r, c, c * kChunk, std::min(kChunk, cols - c * kChunk));
    }
  });
}

// Rows of at most kChunk elements: one task per row, exp computed once and kept in a buffer.
template <typename In, typename Out, typename Acc>
void softmax_short_rows_kernel(const In* x, Out* y, const RowGeometry& g) {
  at::parallel_for(0, g.rows, std::max<int64_t>(1, kChunk / std::max<int64_t>(g.cols, 1)), [&](int64_t begin, int64_t end) {
    Acc e[kChunk];
    for (int64_t r = begin; r < end; ++r) {
      const In* xr = x + r * g.x_row_stride;
      Out* yr = y + r * g.y_row_stride;
      Acc m = MaxOp<Acc>::identity();
      for (int64_t i = 0; i < g.cols; ++i) m = MaxOp<Acc>()(m, static_cast<Acc>(xr[i]));
      Acc s = 0;
      for (int64_t i = 0; i < g.cols; ++i) {
        e[i] = cpu_exp(static_cast<Acc>(xr[i]) - m);
        s += e[i];
      }
      for (int64_t i = 0; i < g.cols; ++i) yr[i] = static_cast<Out>(e[i] / s);
    }
  });
}

template <typename In, typename Out, typename Acc>
void softmax_rows_kernel(const In* x, Out* y, const RowGeometry& g) {
  if (g.cols <= kChunk) return softmax_short_rows_kernel<In, Out, Acc>(x, y, g);
  const int64_t chunks = ceil_div(g.cols, kChunk);
  std::vector<SoftmaxStats<Acc>> stats(g.rows * chunks);
  for_each_row_chunk(g.rows, g.cols, [&](int64_t r, int64_t c, int64_t c0, int64_t n) {
    stats[r * chunks + c] = softmax_chunk_stats<In, Acc>(x + r * g.x_row_stride + c0, n);
  });
  at::parallel_for(0, g.rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      SoftmaxStats<Acc> s = stats[r * chunks];
      for (int64_t c = 1; c < chunks; ++c) s = combine(s, stats[r * chunks + c]);
      stats[r * chunks] = s;
    }
  });
  for_each_row_chunk(g.rows, g.cols, [&](int64_t r, int64_t, int64_t c0, int64_t n) {
    const SoftmaxStats<Acc> s = stats[r * chunks];
    const In* xr = x + r * g.x_row_stride + c0;
    Out* yr = y + r * g.y_row_stride + c0;
    for (int64_t i = 0; i < n; ++i) yr[i] = static_cast<Out>(cpu_exp(static_cast<Acc>(xr[i]) - s.max) / s.sum);
  });
}

template <typename In, typename Out, typename Acc>
void softmax_inner_kernel(const In* x, Out* y, const InnerGeometry& g) {
  const int64_t tiles = ceil_div(g.inner, kColumnTile);
  at::parallel_for(0, g.outer * tiles, 1, [&](int64_t begin, int64_t end) {
    Acc m[kColumnTile], s[kColumnTile];
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / tiles, i0 = (t % tiles) * kColumnTile;
      const int64_t width = std::min(kColumnTile, g.inner - i0);
      const In* xb = x + o * g.cols * g.inner + i0;
      Out* yb = y + o * g.cols * g.inner + i0;
      std::fill(m, m + width, MaxOp<Acc>::identity());
      std::fill(s, s + width, Acc(0));
      for (int64_t c = 0; c < g.cols; ++c)
        for (int64_t i = 0; i < width; ++i) m[i] = MaxOp<Acc>()(m[i], static_cast<Acc>(xb[c * g.inner + i]));
      for (int64_t c = 0; c < g.cols; ++c)
        for (int64_t i = 0; i < width; ++i) s[i] += cpu_exp(static_cast<Acc>(xb[c * g.inner + i]) - m[i]);
      for (int64_t c = 0; c < g.cols; ++c)
        for (int64_t i = 0; i < width; ++i)
          yb[c * g.inner + i] = static_cast<Out>(cpu_exp(static_cast<Acc>(xb[c * g.inner + i]) - m[i]) / s[i]);
    }
  });
}

template <typename T, typename Acc>
void reduce_scale_kernel(const T* x, T* y, Acc* scale, const RowGeometry& g, Acc eps) {
  const int64_t chunks = ceil_div(g.cols, kChunk);
  std::vector<Acc> absmax(g.rows * chunks);
  for_each_row_chunk(g.rows, g.cols, [&](int64_t r, int64_t c, int64_t c0, int64_t n) {
    const T* xr = x + r * g.x_row_stride + c0;
    Acc m = MaxOp<Acc>::identity();
    for (int64_t i = 0; i < n; ++i) m = MaxOp<Acc>()(m, std::abs(static_cast<Acc>(xr[i])));
    absmax[r * chunks + c] = m;
  });
  at::parallel_for(0, g.rows, 256, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      Acc m = absmax[r * chunks];
      for (int64_t c = 1; c < chunks; ++c) m = MaxOp<Acc>()(m, absmax[r * chunks + c]);
      scale[r] = clamp_min_keep_nan(m, eps);
    }
  });
  // y may be x (in place): each element is read before it is written, by the same task.
  for_each_row_chunk(g.rows, g.cols, [&](int64_t r, int64_t, int64_t c0, int64_t n) {
    const Acc s = scale[r];
    const T* xr = x + r * g.x_row_stride + c0;
    T* yr = y + r * g.y_row_stride + c0;
    for (int64_t i = 0; i < n; ++i) yr[i] = static_cast<T>(scale_element(static_cast<Acc>(xr[i]), s));
  });
}

template <typename T, typename Acc>
void softmax_backward_kernel(const T* grad, const T* out, T* gx, const InnerGeometry& g) {
  const int64_t tiles = ceil_div(g.inner, kColumnTile);
  at::parallel_for(0, g.outer * tiles, 1, [&](int64_t begin, int64_t end) {
    Acc dot[kColumnTile];
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / tiles, i0 = (t % tiles) * kColumnTile;
      const int64_t width = std::min(kColumnTile, g.inner - i0);
      const int64_t base = o * g.cols * g.inner + i0;
      std::fill(dot, dot + width, Acc(0));
      for (int64_t c = 0; c < g.cols; ++c)
        for (int64_t i = 0; i < width; ++i) {
          const int64_t k = base + c * g.inner + i;
          dot[i] += static_cast<Acc>(grad[k]) * static_cast<Acc>(out[k]);
        }
      for (int64_t c = 0; c < g.cols; ++c)
        for (int64_t i = 0; i < width; ++i) {
          const int64_t k = base + c * g.inner + i;
          gx[k] = static_cast<T>(static_cast<Acc>(out[k]) * (static_cast<Acc>(grad[k]) - dot[i]));
        }
    }
  });
}

}  // namespace

void softmax_backward_cpu(const at::Tensor& grad, const at::Tensor& out, const InnerGeometry& g,
                          const at::Tensor& grad_x) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad.scalar_type(), "softmax_backward_cpu", [&] {
    softmax_backward_kernel<scalar_t, at::opmath_type<scalar_t>>(
        grad.const_data_ptr<scalar_t>(), out.const_data_ptr<scalar_t>(), grad_x.mutable_data_ptr<scalar_t>(), g);
  });
}

void reduce_cpu(const at::Tensor& x, const ReduceGeometry& g, const at::Tensor& out,
                ReduceKind kind) {
  dispatch_in_out("reduce_cpu", x.scalar_type(), out.scalar_type(), [&](auto in_tag, auto out_tag) {
    using In = typename decltype(in_tag)::type;
    using Out = typename decltype(out_tag)::type;
    using Acc = at::opmath_type<In>;
    const In* xp = x.const_data_ptr<In>();
    Out* op = out.mutable_data_ptr<Out>();
    if (kind == ReduceKind::kSum) reduce_kernel<In, Out, Acc, SumOp<Acc>>(xp, op, g);
    else reduce_kernel<In, Out, Acc, MaxOp<Acc>>(xp, op, g);
  });
}

void softmax_rows_cpu(const at::Tensor& x, const RowGeometry& g, const at::Tensor& y) {
  dispatch_in_out("softmax_cpu", x.scalar_type(), y.scalar_type(), [&](auto in_tag, auto out_tag) {
    using In = typename decltype(in_tag)::type;
    using Out = typename decltype(out_tag)::type;
    softmax_rows_kernel<In, Out, at::opmath_type<In>>(x.const_data_ptr<In>(), y.mutable_data_ptr<Out>(), g);
  });
}

void softmax_inner_cpu(const at::Tensor& x, const InnerGeometry& g, const at::Tensor& y) {
  dispatch_in_out("softmax_cpu", x.scalar_type(), y.scalar_type(), [&](auto in_tag, auto out_tag) {
    using In = typename decltype(in_tag)::type;
    using Out = typename decltype(out_tag)::type;
    softmax_inner_kernel<In, Out, at::opmath_type<In>>(x.const_data_ptr<In>(), y.mutable_data_ptr<Out>(), g);
  });
}

void reduce_scale_cpu(const at::Tensor& x, const RowGeometry& g, const at::Tensor& y,
                      const at::Tensor& scale, double eps) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "reduce_scale_cpu", [&] {
    using Acc = at::opmath_type<scalar_t>;
    // y may alias x, so take both pointers as mutable/const views of one buffer.
    reduce_scale_kernel<scalar_t, Acc>(static_cast<const scalar_t*>(x.const_data_ptr()),
                                       static_cast<scalar_t*>(y.data_ptr()),
                                       scale.mutable_data_ptr<Acc>(), g, static_cast<Acc>(eps));
  });
}

}  // namespace reduce_ops
