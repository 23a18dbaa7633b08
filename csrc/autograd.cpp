// Autograd of the ops: one torch::autograd::Function each, registered at the Autograd key.
//
// In C++ so that a call never leaves C++: with Python's torch.library.register_autograd every
// call, gradient or not, went from the dispatcher back into Python and out again.
// scripts/host_overhead.py, us per call of 1024 floats, Python autograd -> this file (torch
// eager): 2-core EPYC, CPU tensors, torch 2.14: 6.6-7.4 -> 3.2-3.5 (1.4-1.7), with an input that
// requires grad 14-18 -> 5.0-5.9 (2.1-2.5); the H100 machine's host, CUDA tensors, torch 2.11:
// 16-23 -> 9-12 (7-10; reduce_scale 22-25), requiring grad 29-50 -> 12-15 (8-14). Each backward is made of
// differentiable ops (ours included), so double backward works, of symbolic sizes only, so that
// torch.compile traces it with dynamic shapes, and of saved tensors and saved_data only, so that
// compiled autograd traces it too (is_traceable). Neither version runs under torch.func's grad
// transforms (vmap runs).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <tuple>
#include <vector>

namespace reduce_ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Typed handles to the ops, resolved once. Called below the Autograd key from forward, and
// through it from a backward (softmax_backward), so that double backward records its graph.
template <typename Signature>
c10::TypedOperatorHandle<Signature> handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

using SumSig = at::Tensor(const at::Tensor&, at::OptionalIntArrayRef, bool, std::optional<at::ScalarType>);
using AmaxSig = at::Tensor(const at::Tensor&, at::OptionalIntArrayRef, bool);
using SoftmaxSig = at::Tensor(const at::Tensor&, int64_t, std::optional<at::ScalarType>);
using SoftmaxBackwardSig = at::Tensor(const at::Tensor&, const at::Tensor&, int64_t);
using ReduceScaleSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, double);
using ReduceScaleInplaceSig = at::Tensor(at::Tensor&, double);

const c10::TypedOperatorHandle<SumSig>& sum_op() {
  static const auto op = handle<SumSig>("reduce_ops::sum");
  return op;
}
const c10::TypedOperatorHandle<AmaxSig>& amax_op() {
  static const auto op = handle<AmaxSig>("reduce_ops::amax");
  return op;
}
const c10::TypedOperatorHandle<SoftmaxSig>& softmax_op() {
  static const auto op = handle<SoftmaxSig>("reduce_ops::softmax");
  return op;
}
const c10::TypedOperatorHandle<SoftmaxBackwardSig>& softmax_backward_op() {
  static const auto op = handle<SoftmaxBackwardSig>("reduce_ops::softmax_backward");
  return op;
}
const c10::TypedOperatorHandle<ReduceScaleSig>& reduce_scale_op() {
  static const auto op = handle<ReduceScaleSig>("reduce_ops::reduce_scale");
  return op;
}
const c10::TypedOperatorHandle<ReduceScaleInplaceSig>& reduce_scale_inplace_op() {
  static const auto op = handle<ReduceScaleInplaceSig>("reduce_ops::reduce_scale_");
  return op;
}

// The op's kernel for the inputs' backend (or a tracing mode's), skipping the Autograd key.
template <typename Sig, typename... Args>
auto call_below_autograd(const c10::TypedOperatorHandle<Sig>& op, Args&&... args) {
  at::AutoDispatchBelowADInplaceOrView below;
  return op.call(std::forward<Args>(args)...);
}

// The reduced dims, wrapped, in the order given (the op has already checked them). None and an
// empty list mean every dim; a 0-d tensor accepts dim 0 / -1 and reduces nothing.
std::vector<int64_t> reduced_dims(int64_t ndim, at::OptionalIntArrayRef dim) {
  std::vector<int64_t> dims;
  if (!dim.has_value() || dim->empty()) {
    for (int64_t d = 0; d < ndim; ++d) dims.push_back(d);
    return dims;
  }
  const int64_t rank = std::max<int64_t>(ndim, 1);
  for (int64_t d : *dim) {
    const int64_t w = d < 0 ? d + rank : d;
    if (w < ndim) dims.push_back(w);
  }
  return dims;
}

// A reduction's gradient (or result) with the reduced dims back as size 1, when keepdim=False
// dropped them.
at::Tensor restore_reduced(at::Tensor t, std::vector<int64_t> dims, bool keepdim) {
  if (keepdim) return t;
  std::sort(dims.begin(), dims.end());
  for (int64_t d : dims) t = t.unsqueeze(d);
  return t;
}

void save_reduction(AutogradContext* ctx, const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim) {
  ctx->saved_data["dims"] = reduced_dims(x.dim(), dim);
  ctx->saved_data["keepdim"] = keepdim;
}

std::vector<int64_t> saved_dims(AutogradContext* ctx) { return ctx->saved_data["dims"].toIntVector(); }

struct SumFunction : torch::autograd::Function<SumFunction> {
  static constexpr bool is_traceable = true;
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim,
                            std::optional<at::ScalarType> dtype) {
    const at::Tensor out = call_below_autograd(sum_op(), x, dim, keepdim, dtype);
    save_reduction(ctx, x, dim, keepdim);
    ctx->saved_data["shape"] = x.sym_sizes();
    ctx->saved_data["dtype"] = x.scalar_type();
    return out;
  }

  // d sum / dx = 1: the gradient broadcast back over the reduced dims.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor g = restore_reduced(grads[0], saved_dims(ctx), ctx->saved_data["keepdim"].toBool());
    const auto shape = ctx->saved_data["shape"].toSymIntVector();
    return {g.expand_symint(shape).to(ctx->saved_data["dtype"].toScalarType()), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

struct AmaxFunction : torch::autograd::Function<AmaxFunction> {
  static constexpr bool is_traceable = true;
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim) {
    const at::Tensor out = call_below_autograd(amax_op(), x, dim, keepdim);
    save_reduction(ctx, x, dim, keepdim);
    ctx->save_for_backward({x, out});
    return out;
  }

  // As torch: the gradient is split evenly among the elements equal to the max.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const std::vector<int64_t> dims = saved_dims(ctx);
    const bool keepdim = ctx->saved_data["keepdim"].toBool();
    const at::Tensor g = grads[0];
    const at::Tensor tied = saved[0].eq(restore_reduced(saved[1], dims, keepdim)).to(g.scalar_type());
    const at::Tensor count = dims.empty() ? tied : tied.sum(dims, /*keepdim=*/true);
    return {restore_reduced(g, dims, keepdim) * tied / count, at::Tensor(), at::Tensor()};
  }
};

struct SoftmaxFunction : torch::autograd::Function<SoftmaxFunction> {
  static constexpr bool is_traceable = true;
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t dim,
                            std::optional<at::ScalarType> dtype) {
    const at::Tensor out = call_below_autograd(softmax_op(), x, dim, dtype);
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["dtype"] = x.scalar_type();
    ctx->save_for_backward({out});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor out = ctx->get_saved_variables()[0];
    const at::Tensor grad_x =
        softmax_backward_op().call(grads[0].to(out.scalar_type()), out, ctx->saved_data["dim"].toInt());
    return {grad_x.to(ctx->saved_data["dtype"].toScalarType()), at::Tensor(), at::Tensor()};
  }
};

struct SoftmaxBackwardFunction : torch::autograd::Function<SoftmaxBackwardFunction> {
  static constexpr bool is_traceable = true;
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& grad, const at::Tensor& out, int64_t dim) {
    const at::Tensor grad_x = call_below_autograd(softmax_backward_op(), grad, out, dim);
    ctx->saved_data["dim"] = dim;
    ctx->save_for_backward({grad, out});
    return grad_x;
  }

  // gx = y * (g - <g, y>). Its vector-Jacobian products:
  //   d/dg: y * (v - <v, y>)                      = softmax_backward(v, y)
  //   d/dy: v * (g - <g, y>) - g * <v, y>
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &g = saved[0], &y = saved[1], &v = grads[0];
    const int64_t d = ctx->saved_data["dim"].toInt();
    at::Tensor grad_grad, grad_out;
    if (ctx->needs_input_grad(0)) grad_grad = softmax_backward_op().call(v, y, d);
    if (ctx->needs_input_grad(1)) {
      const at::Tensor dot_gy = (g * y).sum(d, /*keepdim=*/true);
      const at::Tensor dot_vy = (v * y).sum(d, /*keepdim=*/true);
      grad_out = v * (g - dot_gy) - g * dot_vy;
    }
    return {grad_grad, grad_out, at::Tensor()};
  }
};

struct ReduceScaleFunction : torch::autograd::Function<ReduceScaleFunction> {
  static constexpr bool is_traceable = true;
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, double eps) {
    const auto [out, scale] = call_below_autograd(reduce_scale_op(), x, eps);
    ctx->saved_data["eps"] = eps;
    ctx->save_for_backward({x, scale});
    return {out, scale};
  }

  // out_i = x_i / s with s = max(a, eps), a = max_j |x_j| over the row (a row with s == 0 has
  // out = 0, a constant). With g = grad_out and h = grad_scale:
  //   dL/dx_j = g_j / s + dL/ds * ds/dx_j,   dL/ds = h - sum_i g_i x_i / s^2,
  //   ds/dx_j = sign(x_j) / (number of ties) if |x_j| = a and a >= eps (clamp_min passes the
  //             gradient where a >= eps, as torch), else 0.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &scale = saved[1];
    const double eps = ctx->saved_data["eps"].toDouble();
    const at::Tensor xs = x.to(scale.scalar_type());
    const at::Tensor zero_row = scale.eq(0);
    const at::Tensor safe = at::where(zero_row, at::ones_like(scale), scale);
    at::Tensor dl_ds = grads[1].defined() ? grads[1] : at::zeros_like(scale);
    at::Tensor grad_x = at::zeros_like(xs);
    if (grads[0].defined()) {
      const at::Tensor g = at::where(zero_row, at::zeros_like(xs), grads[0].to(scale.scalar_type()));
      grad_x = g / safe;
      dl_ds = dl_ds - (g * xs).sum(-1, /*keepdim=*/true) / (safe * safe);
    }
    const at::Tensor absx = xs.abs();
    const at::Tensor absmax = absx.amax(-1, /*keepdim=*/true);
    const at::Tensor at_max = (absx.eq(absmax) & absmax.ge(eps)).to(xs.scalar_type());
    const at::Tensor ties = at_max.sum(-1, /*keepdim=*/true).clamp_min(1);
    grad_x = grad_x + at_max * xs.sign() * dl_ds / ties;
    return {grad_x.to(x.scalar_type()), at::Tensor()};
  }
};

// A call that needs no gradient skips the Function (its node, context and saved data: ~1.5 us)
// and runs the op below the Autograd key, as Function::apply would have.
bool needs_grad(const at::Tensor& t) { return t.requires_grad() && at::GradMode::is_enabled(); }

at::Tensor sum_autograd(const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim,
                        std::optional<at::ScalarType> dtype) {
  if (!needs_grad(x)) return call_below_autograd(sum_op(), x, dim, keepdim, dtype);
  return SumFunction::apply(x, dim, keepdim, dtype);
}

at::Tensor amax_autograd(const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim) {
  if (!needs_grad(x)) return call_below_autograd(amax_op(), x, dim, keepdim);
  return AmaxFunction::apply(x, dim, keepdim);
}

at::Tensor softmax_autograd(const at::Tensor& x, int64_t dim, std::optional<at::ScalarType> dtype) {
  if (!needs_grad(x)) return call_below_autograd(softmax_op(), x, dim, dtype);
  return SoftmaxFunction::apply(x, dim, dtype);
}

at::Tensor softmax_backward_autograd(const at::Tensor& grad, const at::Tensor& out, int64_t dim) {
  if (!needs_grad(grad) && !needs_grad(out)) {
    return call_below_autograd(softmax_backward_op(), grad, out, dim);
  }
  return SoftmaxBackwardFunction::apply(grad, out, dim);
}

std::tuple<at::Tensor, at::Tensor> reduce_scale_autograd(const at::Tensor& x, double eps) {
  if (!needs_grad(x)) return call_below_autograd(reduce_scale_op(), x, eps);
  const variable_list r = ReduceScaleFunction::apply(x, eps);
  return {r[0], r[1]};
}

// reduce_scale_ is not differentiable: it overwrites the x its gradient needs. On a tensor that
// requires grad it raises, as torch's in-place ops do on a leaf (before, it wrote x and
// autograd went on with x's old graph: a wrong gradient, with no word).
at::Tensor reduce_scale_inplace_autograd(at::Tensor& x, double eps) {
  TORCH_CHECK(!needs_grad(x), "reduce_ops.reduce_scale_: x requires grad, and the in-place op is not "
              "differentiable (it overwrites the x its gradient needs); use reduce_ops.reduce_scale, or "
              "call it under torch.no_grad() on a tensor nothing differentiates through");
  at::AutoDispatchBelowAutograd below;  // on to ADInplaceOrView, which bumps x's version
  return reduce_scale_inplace_op().call(x, eps);
}

// As torch's in-place ops: x's version counter moves, so that a graph that saved x for its
// backward raises instead of using the overwritten values.
at::Tensor reduce_scale_inplace_ad_inplace_or_view(at::Tensor& x, double eps) {
  at::Tensor scale = call_below_autograd(reduce_scale_inplace_op(), x, eps);
  torch::autograd::impl::bump_version(x);
  return scale;
}

}  // namespace

TORCH_LIBRARY_IMPL(reduce_ops, Autograd, m) {
  m.impl("sum", &sum_autograd);
  m.impl("amax", &amax_autograd);
  m.impl("softmax", &softmax_autograd);
  m.impl("softmax_backward", &softmax_backward_autograd);
  m.impl("reduce_scale", &reduce_scale_autograd);
  m.impl("reduce_scale_", &reduce_scale_inplace_autograd);
}

TORCH_LIBRARY_IMPL(reduce_ops, ADInplaceOrView, m) {
  m.impl("reduce_scale_", &reduce_scale_inplace_ad_inplace_or_view);
}

}  // namespace reduce_ops
