// Operator schemas and the binding layer: argument checks, dim resolution, output allocation,
// and the reduction of every input to one of the canonical views of ops.h. Backends (cpu/,
// cuda/) only see those views.
#include <Python.h>

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "ops.h"

namespace reduce_ops {
namespace {

// Numbers in error messages are formatted with std::to_string rather than streamed: streaming an
// integer through c10::str crashed inside libstdc++'s locale code on one torch 2.11 + g++ 13
// image (a mix of two libstdc++ builds), turning a clear error into a segfault.
std::string num(int64_t v) { return std::to_string(v); }

std::string shape_str(at::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + num(sizes[i]);
  return s + "]";
}

bool is_supported(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat || t == at::kDouble;
}

void check_dtype(const char* op, at::ScalarType t) {
  TORCH_CHECK(is_supported(t), "reduce_ops.", op, ": unsupported dtype ", t,
              "; expected float16, bfloat16, float32 or float64");
}

void check_input(const char* op, const at::Tensor& x) {
  TORCH_CHECK(x.defined(), "reduce_ops.", op, ": input tensor is undefined");
  check_dtype(op, x.scalar_type());
  TORCH_CHECK(x.device().is_cpu() || x.device().is_cuda(), "reduce_ops.", op,
              ": unsupported device ", x.device().str());
  TORCH_CHECK(!x.is_sparse(), "reduce_ops.", op, ": sparse tensors are not supported");
}

int64_t wrap_dim(const char* op, int64_t d, int64_t ndim) {
  const int64_t rank = std::max<int64_t>(ndim, 1);
  TORCH_CHECK_INDEX(d >= -rank && d < rank, "reduce_ops.", op, ": dim ", num(d),
                    " out of range for a tensor of ", num(ndim), " dims (expected to be in range of [",
                    num(-rank), ", ", num(rank - 1), "])");
  return d < 0 ? d + rank : d;
}

// Which dims are reduced. None and an empty list both mean every dim, as in torch.
std::vector<bool> reduced_dims(const char* op, const at::Tensor& x, at::OptionalIntArrayRef dim) {
  const int64_t ndim = x.dim();
  std::vector<bool> mask(ndim, false);
  if (!dim.has_value() || dim->empty()) {
    std::fill(mask.begin(), mask.end(), true);
    return mask;
  }
  std::vector<bool> seen(std::max<int64_t>(ndim, 1), false);
  for (int64_t d : *dim) {
    const int64_t w = wrap_dim(op, d, ndim);
    TORCH_CHECK(!seen[w], "reduce_ops.", op, ": dim ", num(w), " appears multiple times in the list of dims");
    seen[w] = true;
    if (w < ndim) mask[w] = true;  // a 0-d tensor accepts dim 0 / -1 and reduces nothing
  }
  return mask;
}

struct StridedDim {
  int64_t size, stride;
};

// Whether dim b, inner to a (outer first), addresses memory as one dim with it.
bool merges(int64_t a_stride, int64_t b_size, int64_t b_stride) { return a_stride == b_stride * b_size; }

// Merges neighbours (outer first) that address memory as one dim (merges).
std::vector<StridedDim> merge_dims(const std::vector<StridedDim>& dims) {
  std::vector<StridedDim> merged;
  for (const StridedDim& d : dims) {
    if (!merged.empty() && merges(merged.back().stride, d.size, d.stride)) {
      merged.back() = {merged.back().size * d.size, d.stride};
    } else {
      merged.push_back(d);
    }
  }
  return merged;
}

// x's kept and reduced dims (mask), size-1 dims dropped, each list merged where memory allows.
// Kept dims keep their order (the output is laid out in it); reduced dims may be visited in any
// order, so they are sorted by stride first.
std::pair<std::vector<StridedDim>, std::vector<StridedDim>> kept_and_reduced(const at::Tensor& x,
                                                                              const std::vector<bool>& mask) {
  std::vector<StridedDim> kept, reduced;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (x.size(i) == 1) continue;
    (mask[i] ? reduced : kept).push_back({x.size(i), x.stride(i)});
  }
  std::stable_sort(reduced.begin(), reduced.end(),
                   [](const StridedDim& a, const StridedDim& b) { return a.stride > b.stride; });
  return {merge_dims(kept), merge_dims(reduced)};
}

// The (outer, reduced, inner) view of x, or nullopt when the strides need more than one reduced
// and two kept dims.
std::optional<ReduceGeometry> reduce_geometry(const at::Tensor& x, const std::vector<bool>& mask) {
  const auto [kept, reduced] = kept_and_reduced(x, mask);
  if (reduced.size() > 1 || kept.size() > 2) return std::nullopt;

  ReduceGeometry g;
  if (!reduced.empty()) {
    g.reduced = reduced[0].size;
    g.reduced_stride = reduced[0].stride;
  }
  if (kept.size() == 2) {
    g.outer = kept[0].size;
    g.outer_stride = kept[0].stride;
    g.inner = kept[1].size;
    g.inner_stride = kept[1].stride;
  } else if (kept.size() == 1) {
    // One kept dim: reduce along rows when the reduced elements are adjacent, else along
    // columns when the kept ones are (coalesced loads either way).
    const bool rows = g.reduced_stride == 1 || kept[0].stride != 1;
    (rows ? g.outer : g.inner) = kept[0].size;
    (rows ? g.outer_stride : g.inner_stride) = kept[0].stride;
  }
  return g;
}

// The view of x whose reduced dims make exactly two groups, with at most two kept ones, or nullopt.
std::optional<TwoGroupsGeometry> two_groups_geometry(const at::Tensor& x, const std::vector<bool>& mask) {
  const auto [kept, reduced] = kept_and_reduced(x, mask);
  if (reduced.size() != 2 || kept.size() > 2) return std::nullopt;
  TwoGroupsGeometry g;
  g.qs = reduced[0].size;
  g.q_stride = reduced[0].stride;
  g.ms = reduced[1].size;
  g.m_stride = reduced[1].stride;
  if (!kept.empty()) {
    g.outer = kept[0].size;
    g.outer_stride = kept[0].stride;
  }
  if (kept.size() == 2) {
    g.inner = kept[1].size;
    g.inner_stride = kept[1].stride;
  }
  return g;
}

// A staged reduction's rows (contiguous, reduced first) hold at least this many elements (reduce_impl).
constexpr int64_t kStagedRowsFirst = 32;

// The reduced dims of x (mask) in the groups reduce_geometry would merge them into, each group as
// a mask over x's dims; dims of size 1 are in none.
std::vector<std::vector<bool>> reduced_groups(const at::Tensor& x, const std::vector<bool>& mask) {
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (mask[i] && x.size(i) != 1) dims.push_back(i);
  }
  std::stable_sort(dims.begin(), dims.end(), [&](int64_t a, int64_t b) { return x.stride(a) > x.stride(b); });
  std::vector<std::vector<bool>> groups;
  for (size_t k = 0; k < dims.size(); ++k) {
    if (k == 0 || !merges(x.stride(dims[k - 1]), x.size(dims[k]), x.stride(dims[k]))) groups.emplace_back(x.dim(), false);
    groups.back()[dims[k]] = true;
  }
  return groups;
}

// Row view (rows of `cols` contiguous elements along the last dim) of x, or nullopt.
std::optional<RowGeometry> row_geometry(const at::Tensor& x) {
  RowGeometry g;
  g.cols = x.dim() == 0 ? 1 : x.size(-1);
  g.rows = g.cols == 0 ? 0 : x.numel() / g.cols;
  if (x.dim() > 0 && g.cols > 1 && x.stride(-1) != 1) return std::nullopt;
  std::vector<StridedDim> kept;
  for (int64_t i = 0; i + 1 < x.dim(); ++i) {
    if (x.size(i) != 1) kept.push_back({x.size(i), x.stride(i)});
  }
  kept = merge_dims(kept);
  if (kept.size() > 1) return std::nullopt;
  g.x_row_stride = kept.empty() ? g.cols : kept[0].stride;
  g.y_row_stride = g.cols;
  return g;
}

bool is_cuda(const at::Tensor& x) { return x.device().is_cuda(); }

// The kernels convert in registers from x's dtype to the output dtype when they are the same,
// or for half/bfloat16 -> float32 (a widening); any other dtype= converts the input first,
// as torch does.
bool widens_in_kernel(at::ScalarType in, at::ScalarType out) {
  return out == in || (out == at::kFloat && (in == at::kHalf || in == at::kBFloat16));
}

// The row view of x, reading one contiguous copy when its rows' elements are not adjacent.
std::pair<at::Tensor, RowGeometry> rows_of(const at::Tensor& x) {
  if (std::optional<RowGeometry> g = row_geometry(x)) return {x, *g};
  at::Tensor dense = x.contiguous();
  return {dense, *row_geometry(dense)};
}

[[noreturn]] void no_cuda(const char* op) {
  TORCH_CHECK(false, "reduce_ops.", op, ": this build of reduce_ops has no CUDA kernels; "
              "rebuild it where nvcc matches torch's CUDA version (see README)");
}

void run_reduce(const at::Tensor& x, const ReduceGeometry& g, const at::Tensor& out, ReduceKind k) {
  if (is_cuda(x)) {
#ifdef REDUCE_OPS_WITH_CUDA
    reduce_cuda(x, g, out, k);
#else
    no_cuda(k == ReduceKind::kSum ? "sum" : "amax");
#endif
  } else {
    reduce_cpu(x, g, out, k);
  }
}

at::Tensor reduce_impl(const char* op, const at::Tensor& x, at::OptionalIntArrayRef dim,
                       bool keepdim, at::ScalarType out_dtype, ReduceKind kind) {
  const std::vector<bool> mask = reduced_dims(op, x, dim);
  if (kind == ReduceKind::kMax && x.numel() == 0) {
    // torch: RuntimeError when no dim is named, IndexError for a named dim of size 0.
    TORCH_CHECK(dim.has_value() && !dim->empty(), "reduce_ops.", op,
                ": cannot reduce an empty tensor over every dim; name the dims to reduce");
    for (int64_t i = 0; i < x.dim(); ++i) {
      TORCH_CHECK_INDEX(!mask[i] || x.size(i) != 0, "reduce_ops.", op,
                        ": cannot reduce over dim ", num(i), " of size 0");
    }
  }
  std::vector<int64_t> out_shape;
  int64_t reduced_numel = 1;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (mask[i]) {
      reduced_numel *= x.size(i);
      if (keepdim) out_shape.push_back(1);
    } else {
      out_shape.push_back(x.size(i));
    }
  }
  at::Tensor out = at::empty(out_shape, x.options().dtype(out_dtype));
  if (out.numel() == 0) return out;
  if (reduced_numel == 0) return out.zero_();  // a sum of nothing (amax raised above)

  at::Tensor input = widens_in_kernel(x.scalar_type(), out_dtype) ? x : x.to(out_dtype);

  std::vector<bool> left = mask;  // the dims of `input` still to reduce
  std::optional<ReduceGeometry> g = reduce_geometry(input, left);
#ifdef REDUCE_OPS_WITH_CUDA
  // CUDA inputs whose reduced dims make exactly two groups (dims 0 and 2 of a contiguous (N, C,
  // L)): one launch, not the two stages below, where reduce_two_groups_cuda finds it pays (up to
  // 2^20 elements, or the inner group's contiguous runs of 128 bytes or more).
  if (!g && is_cuda(input)) {
    if (std::optional<TwoGroupsGeometry> two = two_groups_geometry(input, left)) {
      if (reduce_two_groups_cuda(input, *two, out, kind)) return out;
    }
  }
#endif
  // Reduced dims that fit no single view, such as dims (0, 2) of a contiguous (N, C, L) or a
  // sliced tensor reduced whole: reduced in stages, a group of them a stage, into partials of the
  // accumulate type (a sum's float32 or float64; a max keeps the dtype, exactly), each read once
  // by the next stage; the last writes the result (a 16-bit sum's float32 partials rounded once
  // there, in the kernel): the input is read once, as torch does, instead of copied first. Of the
  // groups that fit a view, contiguous rows of kStagedRowsFirst elements or more go first (the row
  // kernels), else the biggest group (the fewest partials). H200, us, events, a stage's two
  // launches in a CUDA graph, (0, 2) of (N, C, L) float32 sums, columns of N first -> rows of L
  // first (h200_study/session89.txt): 256 x 512 x 49 14.14 -> 13.09 (bfloat16 amax 12.83 ->
  // 9.98), 1024 x 64 x 49 13.54 -> 10.88, 1024 x 256 x 64 24.83 -> 22.51, 2048 x 128 x 32 17.15
  // -> 15.49, but 8192 x 64 x 32 23.81 -> 24.77; rows of 8 and 16 were mixed (4096 x 64 x 16 12.96
  // -> 13.34, 4096 x 64 x 8 11.97 -> 11.55), so those take the biggest group.
  while (!g) {
    std::optional<ReduceGeometry> stage_g;
    std::vector<bool> stage;
    std::pair<bool, int64_t> stage_rank{false, 1};  // (rows first, elements)
    for (const std::vector<bool>& group : reduced_groups(input, left)) {
      int64_t size = 1;
      bool unit_stride = false;
      for (int64_t i = 0; i < input.dim(); ++i) {
        if (!group[i]) continue;
        size *= input.size(i);
        unit_stride = unit_stride || input.stride(i) == 1;
      }
      const std::pair<bool, int64_t> rank{unit_stride && size >= kStagedRowsFirst, size};
      if (rank <= stage_rank) continue;
      if (std::optional<ReduceGeometry> fit = reduce_geometry(input, group)) {
        stage_g = fit;
        stage = group;
        stage_rank = rank;
      }
    }
    if (!stage_g) break;
    std::vector<int64_t> shape;
    std::vector<bool> rest;
    for (int64_t i = 0; i < input.dim(); ++i) {
      if (stage[i]) continue;
      shape.push_back(input.size(i));
      rest.push_back(left[i]);
    }
    const at::ScalarType partial_dtype =
        kind == ReduceKind::kMax ? input.scalar_type() : (out_dtype == at::kDouble ? at::kDouble : at::kFloat);
    at::Tensor partial = at::empty(shape, input.options().dtype(partial_dtype));
    run_reduce(input, *stage_g, partial, kind);
    input = partial;
    left = rest;
    g = reduce_geometry(input, left);
  }
  if (!g) {
    // Strides that fit no view even a group at a time (kept dims that no stage merges into two):
    // one copy with the reduced dims innermost, then rows.
    std::vector<int64_t> order;
    for (int64_t i = 0; i < input.dim(); ++i) if (!left[i]) order.push_back(i);
    for (int64_t i = 0; i < input.dim(); ++i) if (left[i]) order.push_back(i);
    input = input.permute(order).contiguous();
    std::vector<bool> permuted_mask(input.dim(), false);
    for (int64_t i = input.dim() - static_cast<int64_t>(std::count(left.begin(), left.end(), true));
         i < input.dim(); ++i) {
      permuted_mask[i] = true;
    }
    g = reduce_geometry(input, permuted_mask);
    TORCH_INTERNAL_ASSERT(g.has_value(), "reduce_ops.", op, ": contiguous input has no view");
  }
  run_reduce(input, *g, out, kind);
  return out;
}

at::Tensor sum_op(const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim,
                  std::optional<at::ScalarType> dtype) {
  check_input("sum", x);
  const at::ScalarType out_dtype = dtype.value_or(x.scalar_type());
  check_dtype("sum", out_dtype);
  return reduce_impl("sum", x, dim, keepdim, out_dtype, ReduceKind::kSum);
}

at::Tensor amax_op(const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim) {
  check_input("amax", x);
  return reduce_impl("amax", x, dim, keepdim, x.scalar_type(), ReduceKind::kMax);
}

at::Tensor softmax_op(const at::Tensor& x_in, int64_t dim, std::optional<at::ScalarType> dtype) {
  check_input("softmax", x_in);
  const at::ScalarType out_dtype = dtype.value_or(x_in.scalar_type());
  check_dtype("softmax", out_dtype);
  const int64_t d = wrap_dim("softmax", dim, x_in.dim());
  at::Tensor x = widens_in_kernel(x_in.scalar_type(), out_dtype) ? x_in : x_in.to(out_dtype);
  at::Tensor y = at::empty(x.sizes(), x.options().dtype(out_dtype));
  if (y.numel() == 0) return y;

  int64_t inner = 1;
  for (int64_t i = d + 1; i < x.dim(); ++i) inner *= x.size(i);
  const bool cuda = is_cuda(x);
  if (inner == 1) {
    while (x.dim() > d + 1) x = x.squeeze(-1);  // trailing size-1 dims: the rows end at dim d
    const auto [rows, g] = rows_of(x);
#ifdef REDUCE_OPS_WITH_CUDA
    if (cuda) { softmax_rows_cuda(rows, g, y); return y; }
#endif
    if (cuda) no_cuda("softmax");
    softmax_rows_cpu(rows, g, y);
    return y;
  }
  x = x.contiguous();  // the inner-dim kernels read a dense (outer, cols, inner) block
  InnerGeometry g{x.numel() / (x.size(d) * inner), x.size(d), inner};
#ifdef REDUCE_OPS_WITH_CUDA
  if (cuda) { softmax_inner_cuda(x, g, y); return y; }
#endif
  if (cuda) no_cuda("softmax");
  softmax_inner_cpu(x, g, y);
  return y;
}

std::vector<int64_t> scale_shape(const at::Tensor& x) {
  if (x.dim() == 0) return {};  // as x.abs().amax(-1, keepdim=True) on a 0-d tensor
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = 1;
  return shape;
}

void check_rows(const char* op, const at::Tensor& x) {
  TORCH_CHECK_INDEX(x.dim() == 0 || x.size(-1) != 0, "reduce_ops.", op,
                    ": rows (the last dim) have length 0; their absmax is undefined");
}

void run_reduce_scale(const at::Tensor& x, const RowGeometry& g, const at::Tensor& y,
                      const at::Tensor& scale, double eps) {
  if (is_cuda(x)) {
#ifdef REDUCE_OPS_WITH_CUDA
    reduce_scale_cuda(x, g, y, scale, eps);
#else
    no_cuda("reduce_scale");
#endif
  } else {
    reduce_scale_cpu(x, g, y, scale, eps);
  }
}

at::ScalarType scale_dtype(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

std::tuple<at::Tensor, at::Tensor> reduce_scale_op(const at::Tensor& x_in, double eps) {
  check_input("reduce_scale", x_in);
  check_rows("reduce_scale", x_in);
  at::Tensor scale = at::empty(scale_shape(x_in), x_in.options().dtype(scale_dtype(x_in)));
  at::Tensor y = at::empty(x_in.sizes(), x_in.options());
  if (y.numel() == 0) return {y, scale};
  const auto [rows, g] = rows_of(x_in);
  run_reduce_scale(rows, g, y, scale, eps);
  return {y, scale};
}

at::Tensor reduce_scale_inplace_op(at::Tensor& x, double eps) {
  check_input("reduce_scale_", x);
  check_rows("reduce_scale_", x);
  // As torch's in-place ops: an expanded x would have several outputs written to one element.
  at::assert_no_internal_overlap(x);
  at::Tensor scale = at::empty(scale_shape(x), x.options().dtype(scale_dtype(x)));
  if (x.numel() == 0) return scale;
  std::optional<RowGeometry> g = row_geometry(x);
  if (g) {
    g->y_row_stride = g->x_row_stride;  // rows are read and written in place
    run_reduce_scale(x, *g, x, scale, eps);
    return scale;
  }
  // Rows whose elements are not adjacent: scale a dense copy in place, then write it back.
  at::Tensor dense = x.contiguous();
  RowGeometry dense_g = *row_geometry(dense);
  run_reduce_scale(dense, dense_g, dense, scale, eps);
  x.copy_(dense);
  return scale;
}

at::Tensor softmax_backward_op(const at::Tensor& grad_in, const at::Tensor& out_in, int64_t dim) {
  check_input("softmax_backward", grad_in);
  check_input("softmax_backward", out_in);
  TORCH_CHECK(grad_in.sizes() == out_in.sizes(), "reduce_ops.softmax_backward: grad of shape ",
              shape_str(grad_in.sizes()), " and out of shape ", shape_str(out_in.sizes()), " differ");
  TORCH_CHECK(grad_in.scalar_type() == out_in.scalar_type(), "reduce_ops.softmax_backward: grad (",
              grad_in.scalar_type(), ") and out (", out_in.scalar_type(), ") differ in dtype");
  TORCH_CHECK(grad_in.device() == out_in.device(), "reduce_ops.softmax_backward: grad on ",
              grad_in.device().str(), " and out on ", out_in.device().str());
  const int64_t d = wrap_dim("softmax_backward", dim, grad_in.dim());
  // The kernels read dense (outer, cols, inner) blocks; a non-contiguous operand is copied once.
  const at::Tensor grad = grad_in.contiguous(), out = out_in.contiguous();
  at::Tensor grad_x = at::empty(grad.sizes(), grad.options());
  if (grad_x.numel() == 0) return grad_x;
  int64_t inner = 1;
  for (int64_t i = d + 1; i < grad.dim(); ++i) inner *= grad.size(i);
  const int64_t cols = grad.dim() == 0 ? 1 : grad.size(d);
  const InnerGeometry g{grad.numel() / (cols * inner), cols, inner};
  if (is_cuda(grad)) {
#ifdef REDUCE_OPS_WITH_CUDA
    softmax_backward_cuda(grad, out, g, grad_x);
#else
    no_cuda("softmax_backward");
#endif
  } else {
    softmax_backward_cpu(grad, out, g, grad_x);
  }
  return grad_x;
}

}  // namespace

TORCH_LIBRARY(reduce_ops, m) {
  m.def("sum(Tensor x, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor");
  m.def("amax(Tensor x, int[1]? dim=None, bool keepdim=False) -> Tensor");
  m.def("softmax(Tensor x, int dim=-1, *, ScalarType? dtype=None) -> Tensor");
  m.def("reduce_scale(Tensor x, *, float eps=0.0) -> (Tensor, Tensor)");
  m.def("reduce_scale_(Tensor(a!) x, *, float eps=0.0) -> Tensor");
  m.def("softmax_backward(Tensor grad, Tensor out, int dim) -> Tensor");
}

// One binding serves both backends: it routes to the CPU or CUDA kernels by device.
void register_kernels(torch::Library& m) {
  m.impl("sum", &sum_op);
  m.impl("amax", &amax_op);
  m.impl("softmax", &softmax_op);
  m.impl("reduce_scale", &reduce_scale_op);
  m.impl("reduce_scale_", &reduce_scale_inplace_op);
  m.impl("softmax_backward", &softmax_backward_op);
}

TORCH_LIBRARY_IMPL(reduce_ops, CPU, m) { register_kernels(m); }

#ifdef REDUCE_OPS_WITH_CUDA
TORCH_LIBRARY_IMPL(reduce_ops, CUDA, m) { register_kernels(m); }
#endif

}  // namespace reduce_ops

// The extension is a Python module only so that `import reduce_ops._C` loads the library and
// runs its TORCH_LIBRARY registrations; it defines no Python functions.
extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
