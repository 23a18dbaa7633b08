// The CPU kernels, written once and compiled once per instruction set: kernels.cpp includes
// this file inside a namespace per target (reduce_ops::cpu_default, reduce_ops::cpu_avx2, ...)
// under that target's `#pragma GCC target`, and picks one at run time. It has no includes of
// its own (they would land inside that namespace); kernels.cpp includes what it needs first.
//
// The inner loops are written for vectors: reductions keep 128 bytes of lanes in vectors of
// the target's width (GCC's vector extension), elementwise loops are left to the vectorizer
// with selects instead of branches and an inline exp without calls or tables. Every element's
// and every lane's arithmetic is the same sequence of IEEE operations on every target
// (-ffp-contract=off: no fused multiply-adds), so each target gives the same bits.

namespace {

// Elements one task reduces before its partial is combined with the others (fixed, so the
// summation order does not depend on the thread count).
constexpr int64_t kChunk = 8192;
// Output columns one task owns in the column reductions.
constexpr int64_t kColumnTile = 64;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// at::parallel_for's grain for tasks of `elements` each: no thread gets less than torch's own
// grain (32768 elements), so small inputs stay on the calling thread instead of paying for an
// OpenMP region (5-10 us, more than the work below 100k elements).
int64_t grain(int64_t elements) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(elements, 1)); }

// Plain partials over kBlockLen elements (vectorizable), each folded into a compensated
// accumulator: the rounding of a sum grows with the block length, not the row length. A
// block's plain sum is 32 additions per lane and 5 levels of the lanes' tree (float32).
constexpr int64_t kBlockLen = 1024;
// The column reductions' blocks: rows added in sequence to each column's plain partial.
constexpr int64_t kColumnBlockLen = 256;

// A run's independent accumulators: 128 bytes of the accumulate type (32 floats, 16 doubles),
// element i of the run going to lane i % kLanes (bfloat16's in another fixed order:
// load_lanes), held as kLaneBytes / kVectorBytes vectors
// of the target's width (kVectorBytes comes from the including namespace: 16 for SSE, 32 for
// AVX2, 64 for AVX-512). The lane count is the same on every target, so are the bits; it
// gives each target at least two independent chains of vector adds. The loops over a run's
// vectors carry `#pragma GCC unroll`: left rolled, GCC 12 kept the vectors in a stack array,
// copied each 128-byte step in with 16-byte moves and read it back as 32-byte vectors (a
// store-forwarding stall a vector), the lanes' accumulators in memory across iterations (objdump
// of cpu_avx2::softmax_chunk_stats and softmax_short_rows_kernel). 2-core EPYC, best of 7 in
// four interleaved rounds, ms: softmax float32 4096 x 1024 3.32-3.43 -> 2.48-2.76, 1024 x 4096
// 3.30-3.51 -> 2.44-2.88, float16 4096 x 1024 2.64-2.81 -> 2.19-2.30, bfloat16 2.52-2.69 ->
// 2.23-2.24; float32 sum(-1) 0.69-0.70 -> 0.38-0.41, sum(0) 0.77-0.95 -> 0.46-0.53, 256 x 65536
// sum(0) 10.6-12.1 -> 3.7-4.0, amax(-1) 2.9-3.3 -> 2.0-2.2. Not reduce_plain's loops: unrolled,
// GCC kept two of bfloat16's four sum accumulators on the stack (a load, add and store a step,
// each step waiting on the last store), where rolled it keeps all four in registers and unrolls
// them itself (2-core EPYC, best of 25 in three rounds, ms: bfloat16 4096 x 1024 sum(-1)
// 0.15-0.26 rolled, 0.33-0.40 unrolled; float32's gains above hold rolled).
constexpr int kLaneBytes = 128;

template <typename Acc>
struct VectorOf;
template <>
struct VectorOf<float> {
  typedef float type __attribute__((vector_size(kVectorBytes)));
};
template <>
struct VectorOf<double> {
  typedef double type __attribute__((vector_size(kVectorBytes)));
};
template <typename Acc>
using Vec = typename VectorOf<Acc>::type;
template <typename Acc, int Bytes>
struct VectorBytes {
  typedef Acc type __attribute__((vector_size(Bytes)));
};

template <typename Acc>
constexpr int kWidth = kVectorBytes / sizeof(Acc);
template <typename Acc>
constexpr int kLanes = kLaneBytes / sizeof(Acc);

// Op's combine on scalars or vectors. The NaN-propagating max is one select of two compares
// (MaxOp's `||` may branch, and GCC does not vectorize it), so it is a compare, an or and a
// blend per vector.
template <typename Op, typename V>
inline V fold(V a, V b) {
  if constexpr (std::is_same_v<Op, SumOp<float>> || std::is_same_v<Op, SumOp<double>>) return a + b;
  else return ((a > b) | (a != a)) ? a : b;
}

struct Identity {
  template <typename V>
  V operator()(V v) const { return v; }
};

// |v| on scalars or vectors, +0 for both zeros (as std::abs) and NaN kept NaN.
struct Abs {
  template <typename V>
  V operator()(V v) const { return v <= 0 ? 0 - v : v; }
};

// float16 <-> float in integer and float operations, the cases joined by masks (GCC turned
// selects here into branches, which kept the loops around them from vectorizing); c10::Half's
// conversions are a call or a one-element instruction each. Both give c10's values: the
// widening is exact (a NaN comes out quiet, payload kept), the narrowing rounds to nearest even
// (a NaN becomes 0x7e00 with its sign). Neither meets a float subnormal, so flush-to-zero and
// denormals-are-zero modes change nothing.
inline uint32_t mask_if(bool c) { return 0u - static_cast<uint32_t>(c); }

inline float half_to_float(uint16_t h) {
  const uint32_t a = h & 0x7fffu;
  const uint32_t normal = (a << 13) + 0x38000000u;  // exponent rebiased by 127 - 15
  const uint32_t special = (a << 13) | 0x7f800000u | (mask_if(a > 0x7c00u) & 0x00400000u);  // inf, NaN
  const float small = static_cast<float>(static_cast<int32_t>(a)) * 0x1p-24f;  // zero, subnormals
  const uint32_t is_small = mask_if(a < 0x0400u), is_special = mask_if(a >= 0x7c00u);
  const uint32_t bits = (std::bit_cast<uint32_t>(small) & is_small) | (special & is_special) |
                        (normal & ~(is_small | is_special));
  return std::bit_cast<float>(bits | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

inline uint16_t float_to_half(float f) {
  const uint32_t w = std::bit_cast<uint32_t>(f);
  const uint32_t a = w & 0x7fffffffu;
  // Normal halves: the exponent rebiased, the 13 bits dropped rounded to nearest even (a carry
  // moves into the exponent, up to infinity from 65520 on).
  const uint32_t normal = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;
  // Below 2^-14: |f| + 0.5 rounds |f| to a multiple of 2^-24, the subnormal step, in hardware.
  const uint32_t small = std::bit_cast<uint32_t>(std::bit_cast<float>(a) + 0.5f) - 0x3f000000u;
  const uint32_t is_small = mask_if(a < 0x38800000u), is_inf = mask_if(a >= 0x477ff000u);
  const uint32_t is_nan = mask_if(a > 0x7f800000u);
  uint32_t h = (small & is_small) | (normal & ~(is_small | is_inf));
  h = (h & ~is_inf) | (0x7c00u & is_inf) | (0x0200u & is_nan);
  return static_cast<uint16_t>(h | ((w >> 16) & 0x8000u));
}

// In -> Acc and Acc -> Out conversions of the kernels (float16 through the functions above).
template <typename Acc, typename T>
inline Acc widen(T v) {
  if constexpr (std::is_same_v<T, at::Half> && std::is_same_v<Acc, float>) return half_to_float(v.x);
  else return static_cast<Acc>(v);
}

template <typename T, typename Acc>
inline T narrow(Acc v) {
  if constexpr (std::is_same_v<T, at::Half> && std::is_same_v<Acc, float>) return T(float_to_half(v), T::from_bits());
  else return static_cast<T>(v);
}

// Loops over elements of another type than Acc convert them in the loop (bfloat16: a shift in,
// a rounding add out, both vectorized), except float16's, which run on floats in buffers of
// their own, converted a vector at a time (convert_run). Staging bfloat16 as well cost
// its ReduceScale and softmax_backward 30% (2-core EPYC, 4096 x 1024, one thread).
template <typename T, typename Acc>
constexpr bool kStaged = std::is_same_v<T, at::Half> && std::is_same_v<Acc, float>;

// The 32-bit words of a float vector's width.
typedef uint32_t Bits32 __attribute__((vector_size(kVectorBytes)));

// The element type of a scalar or a vector.
template <typename V>
struct LaneOf {
  using type = std::remove_cvref_t<decltype(V{}[0])>;
};
template <>
struct LaneOf<float> {
  using type = float;
};
template <>
struct LaneOf<double> {
  using type = double;
};
template <typename V>
using Lane = typename LaneOf<V>::type;

// f(i, V{}) for i < n, one body for vectors and elements, so that every element takes the same
// operations. kVectors (float16 in or out): V = Vec<Acc> at each whole vector, Acc at each
// element of the tail, since GCC does not vectorize float16's conversions (load_as, store_as).
// Otherwise V = Acc and GCC vectorizes the loop itself: bfloat16's exp then runs two vectors an
// iteration, side by side, where one explicit vector an iteration was latency-bound (one chain of
// ~20 dependent operations): 2-core EPYC, bfloat16 4096 x 1024 softmax 2.73-2.76 -> 2.41-2.49 ms.
template <typename Acc, bool kVectors, typename F>
inline void for_each_vector(int64_t n, const F& f) {
  int64_t i = 0;
  if constexpr (kVectors)
    for (const int64_t whole = n - n % kWidth<Acc>; i < whole; i += kWidth<Acc>) f(i, Vec<Acc>{});
  for (; i < n; ++i) f(i, Acc{});
}

// V (Acc or Vec<Acc>) read from p and widened to Acc, with widen's values. float16 into float
// takes one instruction a vector where the target has it (F16C: the AVX2 and AVX-512 targets);
// half_to_float, vectorized, took about seven times as long, more than the memory did.
template <typename V, typename In>
inline V load_as(const In* p) {
  using Acc = Lane<V>;
  if constexpr (std::is_same_v<V, Acc>) {
    return widen<Acc>(*p);
  } else if constexpr (std::is_same_v<In, Acc>) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
#ifdef REDUCE_OPS_CPU_X86_TARGETS
  } else if constexpr (kStaged<In, Acc> && kVectorBytes == 64) {
    return (V)_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else if constexpr (kStaged<In, Acc> && kVectorBytes == 32) {
    return (V)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#endif
  } else {
    V v;
#pragma GCC unroll 16
    for (int k = 0; k < kWidth<Acc>; ++k) v[k] = widen<Acc>(p[k]);
    return v;
  }
}

// v (Acc or Vec<Acc>) narrowed to Out into p, with narrow's values; float16 as load_as, the
// instruction's NaN (which keeps the top of the payload) made float_to_half's 0x7e00 with its
// sign.
template <typename Out, typename V>
inline void store_as(Out* p, V v) {
  using Acc = Lane<V>;
  if constexpr (std::is_same_v<V, Acc>) {
    *p = narrow<Out>(v);
  } else if constexpr (std::is_same_v<Out, Acc>) {
    std::memcpy(p, &v, sizeof v);
#ifdef REDUCE_OPS_CPU_X86_TARGETS
  } else if constexpr (kStaged<Out, Acc> && kVectorBytes >= 32) {
    typedef int16_t Halves __attribute__((vector_size(kVectorBytes / 2)));
    Halves h;
    if constexpr (kVectorBytes == 64) h = (Halves)_mm512_cvtps_ph((__m512)v, _MM_FROUND_TO_NEAREST_INT);
    else h = (Halves)_mm256_cvtps_ph((__m256)v, _MM_FROUND_TO_NEAREST_INT);
    h &= ~(((h & 0x7fff) > 0x7c00) & 0x01ff);  // a NaN's payload cleared: 0x7e00 and the sign
    std::memcpy(p, &h, sizeof h);
#endif
  } else {
#pragma GCC unroll 16
    for (int k = 0; k < kWidth<Acc>; ++k) p[k] = narrow<Out>(v[k]);
  }
}

// y[i] = x[i] widened to Acc (From: the input type, To = Acc) or narrowed from it (From = Acc,
// To: the output type), for i < n.
template <typename Acc, typename From, typename To>
inline void convert_run(const From* x, To* y, int64_t n) {
  static_assert(std::is_same_v<From, Acc> || std::is_same_v<To, Acc>);
  constexpr bool kVectors = kStaged<From, Acc> || kStaged<To, Acc>;
  for_each_vector<Acc, kVectors>(n, [&](int64_t i, auto v) { store_as(y + i, load_as<decltype(v)>(x + i)); });
}

// x[i] read as Acc, converted where it is read.
template <typename Acc, typename T>
struct Widening {
  const T* p;
  Acc operator[](int64_t i) const { return widen<Acc>(p[i]); }
};

// y[i] written from Acc, converted where it is written.
template <typename Acc, typename T>
struct Narrowing {
  struct Slot {
    T* q;
    void operator=(Acc v) const { *q = narrow<T>(v); }
  };
  T* p;
  Slot operator[](int64_t i) const { return {p + i}; }
};

// x[0, n) as Acc values: x itself, a Widening view, or (float16) widened into buf.
template <typename Acc, typename In>
inline auto as_acc(const In* x, int64_t n, Acc* buf) {
  if constexpr (std::is_same_v<In, Acc>) {
    return x;
  } else if constexpr (kStaged<In, Acc>) {
    convert_run<Acc>(x, buf, n);
    return static_cast<const Acc*>(buf);
  } else {
    return Widening<Acc, In>{x};
  }
}

// Where a loop puts the Acc values of y[0, n): y itself, a Narrowing view, or (float16) buf,
// which store_run then narrows into y.
template <typename Acc, typename Out>
inline auto out_acc(Out* y, Acc* buf) {
  if constexpr (std::is_same_v<Out, Acc>) return y;
  else if constexpr (kStaged<Out, Acc>) return buf;
  else return Narrowing<Acc, Out>{y};
}

template <typename Acc, typename Out, typename Values>
inline void store_run(Values values, Out* y, int64_t n) {
  if constexpr (kStaged<Out, Acc>) convert_run<Acc>(static_cast<const Acc*>(values), y, n);
}

// f(xa, ya, m) over x[0, n) -> y[0, n) in blocks of kBlockLen: xa reads m elements of x as Acc,
// ya takes the m outputs as Acc (float16's buffers hold 4 KB: staging a whole kChunk, 32 KB,
// filled the level-1 cache).
template <typename Acc, typename In, typename Out, typename F>
inline void map_blocks(const In* x, Out* y, int64_t n, const F& f) {
  Acc buf[kStaged<In, Acc> || kStaged<Out, Acc> ? kBlockLen : 1];
  for (int64_t b = 0; b < n; b += kBlockLen) {
    const int64_t m = std::min(kBlockLen, n - b);
    const auto xa = as_acc(x + b, m, buf);
    const auto ya = out_acc(y + b, buf);
    f(xa, ya, m);
    store_run<Acc>(ya, y + b, m);
  }
}

// One step of a run: kLanes<Acc> elements x[0], x[stride], ... widened to Acc, into the lanes'
// vectors. Element i goes to lane i, except bfloat16's: read as 32-bit words of two elements,
// the even elements go to the first half of the lanes and the odd ones to the second (element
// 2k to lane k, 2k + 1 to lane kLanes / 2 + k), which takes a shift or an and per word where
// widening in order took shuffles (2-core EPYC, two threads, ms (torch): bfloat16 4096 x 1024
// amax(-1) 0.25 -> 0.12 (0.50), sum(-1) 0.18 -> 0.10 (0.13), 256 x 65536 sum(-1) 0.70 ->
// 0.45-0.56 (0.49-0.56)). Every target and every stride uses the same order, so the bits do not
// change with either.
template <typename Acc, typename In>
inline void load_lanes(const In* x, int64_t stride, Vec<Acc> (&v)[kLanes<Acc> / kWidth<Acc>]) {
  constexpr int W = kWidth<Acc>, L = kLanes<Acc>;
  constexpr bool kWords = std::is_same_v<In, at::BFloat16> && std::is_same_v<Acc, float>;
  if constexpr (std::is_same_v<In, Acc> || kWords) {
    if (stride == 1) {
      if constexpr (kWords) {
#pragma GCC unroll 16
        for (int j = 0; j < L / (2 * W); ++j) {
          Bits32 w;
          std::memcpy(&w, x + 2 * j * W, sizeof w);
          const Bits32 even = w << 16, odd = w & 0xffff0000u;
          std::memcpy(&v[j], &even, sizeof even);
          std::memcpy(&v[j + L / (2 * W)], &odd, sizeof odd);
        }
      } else {
#pragma GCC unroll 16
        for (int j = 0; j < L / W; ++j) std::memcpy(&v[j], x + j * W, sizeof v[j]);
      }
      return;
    }
  }
  Acc e[L];
  if (stride == 1) {
    convert_run<Acc>(x, e, L);  // float16, in order
    std::memcpy(v, e, sizeof e);
    return;
  }
  for (int k = 0; k < L; ++k) {
    const int64_t element = kWords ? (k < L / 2 ? 2 * k : 2 * (k - L / 2) + 1) : k;
    e[k] = widen<Acc>(x[element * stride]);
  }
  std::memcpy(v, e, sizeof e);
}

// The lanes' tree inside one vector (lane k takes lane k + w, w = n/2, ..., 1) as folds of its
// halves: the same operations as lane by lane, which went through memory and a loop (2-core
// EPYC, 1024 x 128 sum(-1) float32 12.8-13.2 -> 10.9 us, bfloat16 13.4-13.8 -> 11.5).
template <typename Op, typename Acc, int Bytes>
inline Acc fold_halves(typename VectorBytes<Acc, Bytes>::type v) {
  if constexpr (Bytes == 2 * sizeof(Acc)) {
    return fold<Op>(v[0], v[1]);
  } else {
    typename VectorBytes<Acc, Bytes / 2>::type low, high;
    std::memcpy(&low, &v, sizeof low);
    std::memcpy(&high, reinterpret_cast<const char*>(&v) + sizeof low, sizeof high);
    return fold_halves<Op, Acc, Bytes / 2>(fold<Op>(low, high));
  }
}

// The NaN-propagating max of vectors as a plain max (one vmaxps: `m > v ? m : v`, the same
// choice as fold's for every non-NaN pair, signed zeros included) and a mask of the lanes that
// saw a NaN (max_step), made the quiet NaN after the loop (max_finish): fold's select chain (two
// compares, an or and a blend a step) was the loops' critical path. A NaN comes out as the quiet
// NaN, whatever its sign or payload; the same on every target.
template <typename Acc>
using NanMask = decltype(Vec<Acc>{} != Vec<Acc>{});

template <typename Acc>
inline Vec<Acc> max_step(Vec<Acc> m, Vec<Acc> v, NanMask<Acc>& nan) {
  nan |= v != v;
  return m > v ? m : v;
}

template <typename Acc>
inline Vec<Acc> max_finish(Vec<Acc> m, NanMask<Acc> nan) {
  return nan != 0 ? Vec<Acc>{} + std::numeric_limits<Acc>::quiet_NaN() : m;
}

// Plain reduction of f(x[i]) for i < n into kLanes lanes, then a fixed tree over the lanes.
template <typename Acc, typename Op, typename In, typename F = Identity>
inline Acc reduce_plain(const In* x, int64_t n, int64_t stride, F f = {}) {
  constexpr int W = kWidth<Acc>, L = kLanes<Acc>;
  Acc lane[L];
  for (Acc& l : lane) l = Op::identity();
  Vec<Acc> vec[L / W];
  std::memcpy(vec, lane, sizeof vec);
  int64_t i = 0;
  if constexpr (std::is_same_v<Op, MaxOp<Acc>>) {
    // max_step / max_finish: 2-core EPYC, float32 amax(-1), ms (torch): one thread 4096 x 1024
    // 0.47 -> 0.31 (0.22), 1024 x 4096 0.38 -> 0.24 (0.21); two threads 0.21 -> 0.13 (0.10),
    // 0.20 -> 0.11 (0.10).
    NanMask<Acc> nan[L / W] = {};
    for (; i + L <= n; i += L) {
      Vec<Acc> v[L / W];
      load_lanes<Acc>(x + i * stride, stride, v);
      for (int j = 0; j < L / W; ++j) vec[j] = max_step<Acc>(vec[j], f(v[j]), nan[j]);
    }
    for (int j = 0; j < L / W; ++j) vec[j] = max_finish<Acc>(vec[j], nan[j]);
  } else {
    for (; i + L <= n; i += L) {
      Vec<Acc> v[L / W];
      load_lanes<Acc>(x + i * stride, stride, v);
      for (int j = 0; j < L / W; ++j) vec[j] = fold<Op>(vec[j], f(v[j]));
    }
  }
  if (i < n) {
    std::memcpy(lane, vec, sizeof vec);
    for (int k = 0; i + k < n; ++k) lane[k] = fold<Op>(lane[k], f(widen<Acc>(x[(i + k) * stride])));
    std::memcpy(vec, lane, sizeof vec);
  }
  // The tree: lane k takes lane k + w for w = L/2, ..., 1; the steps with w >= W are whole
  // vectors (the same additions, fewer instructions).
  for (int w = L / 2; w >= W; w /= 2)
    for (int j = 0; j < w / W; ++j) vec[j] = fold<Op>(vec[j], vec[j + w / W]);
  return fold_halves<Op, Acc, kVectorBytes>(vec[0]);
}

// Columns: N vectors of adjacent columns (x[0], ..., x[N W - 1] of each row) folded down rows
// [rb, re) in registers from Op's identity, stored into plain[0, N W) once. The same folds in the
// same order as one column at a time; the max through max_step and max_finish.
// 128 bytes of columns a row (N = kLanes / W) beat one vector (and float16 and bfloat16 went one
// column at a time). 2-core EPYC, one thread, us before -> after (torch): 4 x 65536 over dim 0,
// float32 sum 31 -> 25 (33), amax 37 -> 26 (20); bfloat16 sum 55 -> 25 (128), amax 46 -> 34 (56);
// float16 sum 86 -> 37 (122), amax 74 -> 40 (42); 1024 x 128 float32 amax 20 -> 9 (9);
// 4096 x 1024 float16 sum 700 -> 200 (243), float32 sum 1670 -> 1290 (870-970).
template <typename Op, typename Acc, int N, typename In>
inline void fold_columns(const In* x, int64_t rb, int64_t re, int64_t row_stride, Acc* plain) {
  constexpr int W = kWidth<Acc>;
  Vec<Acc> v[N];
#pragma GCC unroll 16
  for (int j = 0; j < N; ++j) v[j] = Vec<Acc>{} + Op::identity();  // a broadcast (lane by lane: masked moves)
  NanMask<Acc> nan[N] = {};  // the max's lanes that saw a NaN (max_step)
  for (int64_t r = rb; r < re; ++r) {
    const In* row = x + r * row_stride;
    Vec<Acc> e[N];
    if constexpr (std::is_same_v<In, Acc>) {
#pragma GCC unroll 16
      for (int j = 0; j < N; ++j) std::memcpy(&e[j], row + j * W, sizeof e[j]);
    } else {
      Acc wide[N * W];
      convert_run<Acc>(row, wide, N * W);
      std::memcpy(e, wide, sizeof e);
    }
    if constexpr (std::is_same_v<Op, MaxOp<Acc>>) {
#pragma GCC unroll 16
      for (int j = 0; j < N; ++j) v[j] = max_step<Acc>(v[j], e[j], nan[j]);
    } else {
#pragma GCC unroll 16
      for (int j = 0; j < N; ++j) v[j] = fold<Op>(v[j], e[j]);
    }
  }
  if constexpr (std::is_same_v<Op, MaxOp<Acc>>)
#pragma GCC unroll 16
    for (int j = 0; j < N; ++j) v[j] = max_finish<Acc>(v[j], nan[j]);
#pragma GCC unroll 16
  for (int j = 0; j < N; ++j) std::memcpy(plain + j * W, &v[j], sizeof v[j]);
}

// plain[i] = the fold over rows [rb, re) of x[r * row_stride + i * col_stride], i < width:
// adjacent columns in registers (fold_columns), the rest one at a time.
template <typename Op, typename Acc, typename In>
inline void fold_tile_columns(const In* x, int64_t rb, int64_t re, int64_t row_stride, int64_t col_stride,
                              int64_t width, Acc* plain) {
  int64_t strips = 0;  // columns done in registers
  if (col_stride == 1) {
    for (; strips + kLanes<Acc> <= width; strips += kLanes<Acc>)
      fold_columns<Op, Acc, kLanes<Acc> / kWidth<Acc>>(x + strips, rb, re, row_stride, plain + strips);
    for (; strips + kWidth<Acc> <= width; strips += kWidth<Acc>)
      fold_columns<Op, Acc, 1>(x + strips, rb, re, row_stride, plain + strips);
  }
  if (strips == width) return;
  std::fill(plain + strips, plain + width, Op::identity());
  for (int64_t r = rb; r < re; ++r) {
    const In* row = x + r * row_stride;
    for (int64_t i = strips; i < width; ++i) plain[i] = fold<Op>(plain[i], widen<Acc>(row[i * col_stride]));
  }
}

template <typename Acc, typename Op, typename In>
Accumulator<Acc, Op> reduce_strided(const In* x, int64_t n, int64_t stride) {
  Accumulator<Acc, Op> acc;
  if constexpr (std::is_same_v<Op, MaxOp<Acc>>) {
    acc.add(reduce_plain<Acc, Op>(x, n, stride));  // exact: no blocks needed
    return acc;
  }
  for (int64_t b = 0; b < n; b += kBlockLen)
    acc.add(reduce_plain<Acc, Op>(x + b * stride, std::min(kBlockLen, n - b), stride));
  return acc;
}

template <typename In, typename Out, typename Acc, typename Op>
void reduce_kernel(const In* x, Out* out, const ReduceGeometry& g) {
  using Accum = Accumulator<Acc, Op>;
  const int64_t outputs = g.outer * g.inner;
  const int64_t chunks = ceil_div(g.reduced, kChunk);
  std::vector<Accum> partial(chunks > 1 ? chunks * outputs : 0);
  auto emit = [&](int64_t chunk, int64_t j, const Accum& v) {
    if (chunks == 1) out[j] = narrow<Out>(v.result());
    else partial[chunk * outputs + j] = v;
  };
  if (g.inner == 1) {
    // Rows: task (row, chunk), a row's chunks in turn, so that a thread's tasks read on through
    // memory; chunk-major tasks jumped a whole row every kChunk elements. 2-core EPYC, three
    // interleaved runs, ms: 256 x 65536 bfloat16 sum 1.7-2.1 -> 0.7-1.2, amax 2.2-2.4 -> 0.9-1.6;
    // float32 sum 2.4-3.0 -> 1.9-2.5, amax 2.8-3.7 -> 1.7-2.1; 4096 x 1024 (one chunk a row) even.
    at::parallel_for(0, chunks * g.outer, grain(std::min(kChunk, g.reduced)), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const int64_t o = t / chunks, chunk = t % chunks;
        const int64_t r0 = chunk * kChunk, n = std::min(kChunk, g.reduced - r0);
        const In* base = x + o * g.outer_stride + r0 * g.reduced_stride;
        emit(chunk, o, reduce_strided<Acc, Op>(base, n, g.reduced_stride));
      }
    });
  } else {
    // Columns: task (chunk, outer, tile of inner); each output accumulates in r order.
    const int64_t tiles = ceil_div(g.inner, kColumnTile);
    const int64_t task = std::min(kColumnTile, g.inner) * std::min(kChunk, g.reduced);
    at::parallel_for(0, chunks * g.outer * tiles, grain(task), [&](int64_t begin, int64_t end) {
      Accum acc[kColumnTile];
      Acc plain[kColumnTile];
      for (int64_t t = begin; t < end; ++t) {
        const int64_t chunk = t / (g.outer * tiles), o = (t / tiles) % g.outer, tile = t % tiles;
        const int64_t i0 = tile * kColumnTile, width = std::min(kColumnTile, g.inner - i0);
        const int64_t r0 = chunk * kChunk, r1 = std::min(g.reduced, r0 + kChunk);
        // Plain per-column partials over a block of rows [rb, re), folded compensated (as rows do).
        auto block = [&](int64_t rb, int64_t re) {
          fold_tile_columns<Op>(x + o * g.outer_stride + i0 * g.inner_stride, rb, re, g.reduced_stride,
                                g.inner_stride, width, plain);
        };
        // The tile's outputs are adjacent: stored in loops of their own (through emit, GCC made
        // both branches masked scatters). 2-core EPYC, 4 x 65536 float32 sum over dim 0, one
        // thread: 102-105 -> 66-75 us, and 48 with the shortcut below (torch 34).
        const int64_t j0 = o * g.inner + i0;
        if (chunks == 1 && r1 - r0 <= kColumnBlockLen) {
          // One block: a fresh accumulator's add and result come to Op(identity, plain), bit for
          // bit (for the sum 0 + plain: the compensation is 0, or NaN only where the result is
          // final), without its per-column state.
          block(r0, r1);
          for (int64_t i = 0; i < width; ++i) out[j0 + i] = narrow<Out>(Op()(Op::identity(), plain[i]));
          continue;
        }
        std::fill(acc, acc + width, Accum());
        for (int64_t rb = r0; rb < r1; rb += kColumnBlockLen) {
          block(rb, std::min(r1, rb + kColumnBlockLen));
          for (int64_t i = 0; i < width; ++i) acc[i].add(plain[i]);
        }
        if (chunks == 1) {
          for (int64_t i = 0; i < width; ++i) out[j0 + i] = narrow<Out>(acc[i].result());
        } else {
          std::copy(acc, acc + width, partial.begin() + chunk * outputs + j0);
        }
      }
    });
  }
  if (chunks > 1) {
    at::parallel_for(0, outputs, 1024, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        Accum acc = partial[j];
        for (int64_t c = 1; c < chunks; ++c) acc.merge(partial[c * outputs + j]);
        out[j] = narrow<Out>(acc.result());
      }
    });
  }
}

// exp(x) for x <= 0 (x - max in the softmax kernels) or NaN, in float: 2^n * p(r) with
// n = round(x log2 e), r = x - n ln 2 (ln 2 in two parts, so n ln2_hi is exact) and p the
// degree-7 Taylor polynomial of exp on |r| <= ln2 / 2 (truncation under 1e-8, relative).
// Branch-free and call-free so that loops over it vectorize: glibc's expf is a call per
// element. Below -87 (where 2^n leaves the normal range) it returns 0 instead of a value
// under 1.7e-38; exp(-inf) is 0 and a NaN stays NaN. V is float or a vector of floats, U the
// 32-bit integers of its shape: a vector's lanes take the same operations as a float.
template <typename V, typename U>
inline V exp_nonpositive_float(V x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: t = y + kRound holds round(y) in its low bits
  constexpr float kMin = -87.0f;
  const V xc = x < kMin ? V{} + kMin : x;
  const V t = xc * kLog2e + kRound;
  const V n = t - kRound;
  const V r = (xc - n * kLn2Hi) - n * kLn2Lo;
  V p = V{} + 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n from n's bits in t: (n + 127) << 23 is the float 2^n for -126 <= n <= 127.
  const U two_n = (std::bit_cast<U>(t) - std::bit_cast<uint32_t>(kRound) + 127u) << 23;
  const V e = p * std::bit_cast<V>(two_n);
  return x < kMin ? V{} : e;
}

// float64 keeps libm's exp: a polynomial as accurate needs twice the terms, and float64 rows
// are the rare case. V: a float, a double or a vector of floats (the only vectors for_each_vector
// passes: float16's).
template <typename V>
inline V exp_nonpositive(V x) {
  if constexpr (std::is_same_v<V, double>) {
    return std::exp(x);
  } else if constexpr (std::is_same_v<V, float>) {
    return exp_nonpositive_float<V, uint32_t>(x);
  } else {
    static_assert(std::is_same_v<Lane<V>, float>);
    return exp_nonpositive_float<V, typename VectorBytes<uint32_t, sizeof(V)>::type>(x);
  }
}

// ---------------------------------------------------------------------------------------------
// Row-wise ops. Each row is cut into chunks of kChunk; phase 1 reduces each chunk to partial
// statistics, phase 2 combines a row's partials, phase 3 writes the chunk's outputs.
// Softmax writes exp(x - max) times the reciprocal of the sum, taken once a row (a column in
// softmax_inner_kernel), as the CUDA kernels do, not a division an element: 2-core EPYC, best of
// 7 in each of three interleaved rounds, ms: float16 64 x 65536 rows 4.19-4.21 -> 3.90-3.95,
// bfloat16 4096 x 1024 rows 2.74-2.77 -> 2.58-2.70, float32 32 x 1024 x 64 over dim 1 1.94-2.03
// -> 1.81-1.93 (the rest within this machine's noise).

template <typename Acc>
struct SoftmaxStats {
  Acc max, sum;  // sum of exp(x - max) over the chunk
};

template <typename Acc>
SoftmaxStats<Acc> combine(SoftmaxStats<Acc> a, SoftmaxStats<Acc> b) {
  const Acc m = MaxOp<Acc>()(a.max, b.max);
  // A side whose max is -inf holds only -inf (exp gives 0); skip it to avoid -inf - -inf.
  const Acc sa = a.max == -std::numeric_limits<Acc>::infinity() ? Acc(0) : a.sum * exp_nonpositive(a.max - m);
  const Acc sb = b.max == -std::numeric_limits<Acc>::infinity() ? Acc(0) : b.sum * exp_nonpositive(b.max - m);
  return {m, sa + sb};
}

// A softmax element is exp(x - m_c) * k_c, m_c the max of its chunk and k_c = exp(m_c - max) / sum
// for the row's max and sum: the exp of the statistics pass is the output's, so a row that fits
// in cache is written from it (softmax_row) and one that does not takes it again from x
// (softmax_split_rows_kernel), to the same bits. A row of one chunk has k = 1 * (1 / sum).
// A chunk of -inf only (m_c = -inf, exp(x - m_c) NaN) takes the row's max instead: exp(x - max)
// is then 0, NaN where the whole row is -inf or holds a NaN (SPEC, as torch).
template <typename Acc>
struct ChunkScale {
  Acc shift, k;
  bool own_max;  // shift is the chunk's max: the statistics pass's exp are the ones to scale
};

template <typename Acc>
ChunkScale<Acc> chunk_scale(SoftmaxStats<Acc> chunk, SoftmaxStats<Acc> row, Acc inv) {
  const bool own_max = chunk.max != -std::numeric_limits<Acc>::infinity();
  const Acc shift = own_max ? chunk.max : row.max;
  return {shift, exp_nonpositive(shift - row.max) * inv, own_max};
}

// The chunk's max and sum of exp(x - max), with exp(x[i] - max) left in e[i] (keep) or each
// block's in e[0, kBlockLen) (the sum in blocks of plain lanes, added in block order).
template <typename Acc, typename In>
SoftmaxStats<Acc> softmax_chunk_stats(const In* x, int64_t n, Acc* e, bool keep) {
  const Acc m = reduce_plain<Acc, MaxOp<Acc>>(x, n, 1);
  Acc s = 0;
  for (int64_t b = 0; b < n; b += kBlockLen) {
    const int64_t len = std::min(kBlockLen, n - b);
    Acc* eb = keep ? e + b : e;
    for_each_vector<Acc, kStaged<In, Acc>>(len, [&](int64_t i, auto v) {
      store_as(eb + i, exp_nonpositive(load_as<decltype(v)>(x + b + i) - m));
    });
    s += reduce_plain<Acc, SumOp<Acc>>(eb, len, 1);
  }
  return {m, s};
}

// y[0, n) of a chunk: e[i] * k, or where e is null or not the chunk's own, exp(x[i] - shift) * k.
template <typename Acc, typename In, typename Out>
void softmax_write_chunk(const In* x, const Acc* e, ChunkScale<Acc> c, Out* y, int64_t n) {
  constexpr bool kVectors = kStaged<In, Acc> || kStaged<Out, Acc>;
  if (e != nullptr && c.own_max) {
    for_each_vector<Acc, kVectors>(n, [&](int64_t i, auto v) { store_as(y + i, load_as<decltype(v)>(e + i) * c.k); });
  } else {
    for_each_vector<Acc, kVectors>(n, [&](int64_t i, auto v) {
      store_as(y + i, exp_nonpositive(load_as<decltype(v)>(x + i) - c.shift) * c.k);
    });
  }
}

template <typename Acc>
SoftmaxStats<Acc> combine_chunks(const SoftmaxStats<Acc>* stats, int64_t chunks) {
  SoftmaxStats<Acc> s = stats[0];
  for (int64_t c = 1; c < chunks; ++c) s = combine(s, stats[c]);
  return s;
}

// One row by one task: each chunk's statistics with its exp kept in e[0, cols) (y itself for an
// Acc output, else a buffer; null: not kept), then the outputs, while the row is in cache.
template <typename In, typename Out, typename Acc>
void softmax_row(const In* x, Out* y, int64_t cols, Acc* e, SoftmaxStats<Acc>* stats) {
  const int64_t chunks = ceil_div(cols, kChunk);
  Acc block[kBlockLen];
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t c0 = c * kChunk, n = std::min(kChunk, cols - c0);
    stats[c] = e != nullptr ? softmax_chunk_stats<Acc>(x + c0, n, e + c0, true)
                            : softmax_chunk_stats<Acc>(x + c0, n, block, false);
  }
  const SoftmaxStats<Acc> row = combine_chunks(stats, chunks);
  const Acc inv = Acc(1) / row.sum;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t c0 = c * kChunk, n = std::min(kChunk, cols - c0);
    softmax_write_chunk(x + c0, e != nullptr ? e + c0 : nullptr, chunk_scale(stats[c], row, inv), y + c0, n);
  }
}

template <typename F>
void for_each_row_chunk(int64_t rows, int64_t cols, const F& f) {
  const int64_t chunks = ceil_div(cols, kChunk);
  at::parallel_for(0, rows * chunks, grain(std::min(kChunk, cols)), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r = t / chunks, c = t % chunks;
      f(r, c, c * kChunk, std::min(kChunk, cols - c * kChunk));
    }
  });
}

// Few long rows: tasks of one chunk, for statistics, then for outputs (exp taken again).
template <typename In, typename Out, typename Acc>
void softmax_split_rows_kernel(const In* x, Out* y, const RowGeometry& g) {
  const int64_t chunks = ceil_div(g.cols, kChunk);
  std::vector<SoftmaxStats<Acc>> stats(g.rows * chunks), row(g.rows);
  for_each_row_chunk(g.rows, g.cols, [&](int64_t r, int64_t c, int64_t c0, int64_t n) {
    Acc block[kBlockLen];
    stats[r * chunks + c] = softmax_chunk_stats<Acc>(x + r * g.x_row_stride + c0, n, block, false);
  });
  at::parallel_for(0, g.rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) row[r] = combine_chunks(&stats[r * chunks], chunks);
  });
  for_each_row_chunk(g.rows, g.cols, [&](int64_t r, int64_t c, int64_t c0, int64_t n) {
    const ChunkScale<Acc> s = chunk_scale(stats[r * chunks + c], row[r], Acc(1) / row[r].sum);
    softmax_write_chunk<Acc>(x + r * g.x_row_stride + c0, nullptr, s, y + r * g.y_row_stride + c0, n);
  });
}

// Rows up to this long keep their exp (in y, or a float buffer of the row for 16-bit outputs)
// from the statistics to the outputs; longer ones take exp again. 2^18 floats are 1 MB, twice
// this EPYC's 512 KB L2 but well inside its 32 MB L3; longer rows were not measured.
constexpr int64_t kKeptExpCols = int64_t(1) << 18;

// One task a row while there are rows enough to share (4 a thread: the last one idles at most a
// fifth of the time), else one task a chunk; both give the same bits, so the choice may depend on
// the thread count. One task a row, exp kept and the row in cache, vs the chunk tasks taking x
// from memory again and exp twice: 2-core EPYC, best of 7, three interleaved rounds, ms (torch):
// float32 256 x 65536 37.2-38.4 -> 32.2-33.2 (32.8-33.5), 64 x 262144 36.8-38.6 -> 32.7-33.5
// (33.3-34.2); bfloat16 256 x 65536 28.3-30.0 -> 21.6-24.5 (21.3-25.6), 64 x 262144 28.1-29.2 ->
// 21.9-22.0 (21.5-22.0); float16 256 x 65536 26.9-27.5 -> 20.9-25.6 (20.2-21.4).
template <typename In, typename Out, typename Acc>
void softmax_rows_kernel(const In* x, Out* y, const RowGeometry& g) {
  if (g.rows == 0 || g.cols == 0) return;
  const int64_t chunks = ceil_div(g.cols, kChunk);
  if (chunks > 1 && g.rows < 4 * at::get_num_threads()) return softmax_split_rows_kernel<In, Out, Acc>(x, y, g);
  const bool keep = g.cols <= kKeptExpCols;
  at::parallel_for(0, g.rows, grain(g.cols), [&](int64_t begin, int64_t end) {
    std::vector<SoftmaxStats<Acc>> stats(chunks);
    std::vector<Acc> buffer(keep && !std::is_same_v<Out, Acc> ? g.cols : 0);
    for (int64_t r = begin; r < end; ++r) {
      Out* yr = y + r * g.y_row_stride;
      Acc* e = nullptr;
      if constexpr (std::is_same_v<Out, Acc>) e = yr;
      else e = buffer.data();
      softmax_row(x + r * g.x_row_stride, yr, g.cols, keep ? e : nullptr, stats.data());
    }
  });
}

template <typename In, typename Out, typename Acc>
void softmax_inner_kernel(const In* x, Out* y, const InnerGeometry& g) {
  const int64_t tiles = ceil_div(g.inner, kColumnTile);
  at::parallel_for(0, g.outer * tiles, grain(g.cols * std::min(kColumnTile, g.inner)), [&](int64_t begin, int64_t end) {
    Acc m[kColumnTile], s[kColumnTile], buf[kColumnTile];
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / tiles, i0 = (t % tiles) * kColumnTile;
      const int64_t width = std::min(kColumnTile, g.inner - i0);
      const In* xb = x + o * g.cols * g.inner + i0;
      Out* yb = y + o * g.cols * g.inner + i0;
      fold_tile_columns<MaxOp<Acc>>(xb, 0, g.cols, g.inner, 1, width, m);
      std::fill(s, s + width, Acc(0));
      for (int64_t c = 0; c < g.cols; ++c) {
        const auto xa = as_acc(xb + c * g.inner, width, buf);
        for (int64_t i = 0; i < width; ++i) s[i] += exp_nonpositive(xa[i] - m[i]);
      }
      for (int64_t i = 0; i < width; ++i) s[i] = Acc(1) / s[i];
      for (int64_t c = 0; c < g.cols; ++c) {
        const auto xa = as_acc(xb + c * g.inner, width, buf);
        const auto ya = out_acc(yb + c * g.inner, buf);
        for (int64_t i = 0; i < width; ++i) ya[i] = exp_nonpositive(xa[i] - m[i]) * s[i];
        store_run<Acc>(ya, yb + c * g.inner, width);
      }
    }
  });
}

template <typename T, typename Acc>
void reduce_scale_kernel(const T* x, T* y, Acc* scale, const RowGeometry& g, Acc eps) {
  const int64_t chunks = ceil_div(g.cols, kChunk);
  std::vector<Acc> absmax(g.rows * chunks);
  for_each_row_chunk(g.rows, g.cols, [&](int64_t r, int64_t c, int64_t c0, int64_t n) {
    const T* xr = x + r * g.x_row_stride + c0;
    absmax[r * chunks + c] = reduce_plain<Acc, MaxOp<Acc>>(xr, n, 1, Abs{});
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
    map_blocks<Acc>(x + r * g.x_row_stride + c0, y + r * g.y_row_stride + c0, n, [&](auto xa, auto ya, int64_t m) {
      for (int64_t i = 0; i < m; ++i) ya[i] = scale_element(xa[i], s);
    });
  });
}

template <typename T, typename Acc>
void softmax_backward_kernel(const T* grad, const T* out, T* gx, const InnerGeometry& g) {
  if (g.inner == 1) {
    // Rows: the dot product in blocks of plain lanes (compensated across blocks), then the
    // elementwise pass.
    at::parallel_for(0, g.outer, grain(g.cols), [&](int64_t begin, int64_t end) {
      Acc products[kBlockLen], gbuf[kBlockLen], obuf[kBlockLen];
      for (int64_t r = begin; r < end; ++r) {
        const T* gr = grad + r * g.cols;
        const T* orow = out + r * g.cols;
        T* gxr = gx + r * g.cols;
        Accumulator<Acc, SumOp<Acc>> dot;
        for (int64_t b = 0; b < g.cols; b += kBlockLen) {
          const int64_t n = std::min(kBlockLen, g.cols - b);
          const auto ga = as_acc(gr + b, n, gbuf);
          const auto oa = as_acc(orow + b, n, obuf);
          for (int64_t i = 0; i < n; ++i) products[i] = ga[i] * oa[i];
          dot.add(reduce_plain<Acc, SumOp<Acc>>(products, n, 1));
        }
        const Acc d = dot.result();
        for (int64_t b = 0; b < g.cols; b += kBlockLen) {
          const int64_t n = std::min(kBlockLen, g.cols - b);
          const auto ga = as_acc(gr + b, n, gbuf);
          const auto oa = as_acc(orow + b, n, obuf);
          const auto ya = out_acc(gxr + b, products);
          for (int64_t i = 0; i < n; ++i) ya[i] = oa[i] * (ga[i] - d);
          store_run<Acc>(ya, gxr + b, n);
        }
      }
    });
    return;
  }
  const int64_t tiles = ceil_div(g.inner, kColumnTile);
  at::parallel_for(0, g.outer * tiles, grain(g.cols * std::min(kColumnTile, g.inner)), [&](int64_t begin, int64_t end) {
    Acc dot[kColumnTile], gbuf[kColumnTile], obuf[kColumnTile];
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / tiles, i0 = (t % tiles) * kColumnTile;
      const int64_t width = std::min(kColumnTile, g.inner - i0);
      const int64_t base = o * g.cols * g.inner + i0;
      std::fill(dot, dot + width, Acc(0));
      for (int64_t c = 0; c < g.cols; ++c) {
        const auto ga = as_acc(grad + base + c * g.inner, width, gbuf);
        const auto oa = as_acc(out + base + c * g.inner, width, obuf);
        for (int64_t i = 0; i < width; ++i) dot[i] += ga[i] * oa[i];
      }
      for (int64_t c = 0; c < g.cols; ++c) {
        T* gxr = gx + base + c * g.inner;
        const auto ga = as_acc(grad + base + c * g.inner, width, gbuf);
        const auto oa = as_acc(out + base + c * g.inner, width, obuf);
        const auto ya = out_acc(gxr, gbuf);
        for (int64_t i = 0; i < width; ++i) ya[i] = oa[i] * (ga[i] - dot[i]);
        store_run<Acc>(ya, gxr, width);
      }
    }
  });
}

}  // namespace

void softmax_backward(const at::Tensor& grad, const at::Tensor& out, const InnerGeometry& g,
                      const at::Tensor& grad_x) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad.scalar_type(), "softmax_backward_cpu", [&] {
    softmax_backward_kernel<scalar_t, at::opmath_type<scalar_t>>(
        grad.const_data_ptr<scalar_t>(), out.const_data_ptr<scalar_t>(), grad_x.mutable_data_ptr<scalar_t>(), g);
  });
}

void reduce(const at::Tensor& x, const ReduceGeometry& g, const at::Tensor& out, ReduceKind kind) {
  dispatch_in_out<true>("reduce_cpu", x.scalar_type(), out.scalar_type(), [&](auto in_tag, auto out_tag) {
    using In = typename decltype(in_tag)::type;
    using Out = typename decltype(out_tag)::type;
    using Acc = at::opmath_type<In>;
    const In* xp = x.const_data_ptr<In>();
    Out* op = out.mutable_data_ptr<Out>();
    if (kind == ReduceKind::kSum) {
      reduce_kernel<In, Out, Acc, SumOp<Acc>>(xp, op, g);
    } else if constexpr (sizeof(Out) < sizeof(In)) {
      TORCH_INTERNAL_ASSERT(false, "reduce_cpu: a narrowed result is a staged sum's");
    } else {
      reduce_kernel<In, Out, Acc, MaxOp<Acc>>(xp, op, g);
    }
  });
}

void softmax_rows(const at::Tensor& x, const RowGeometry& g, const at::Tensor& y) {
  dispatch_in_out("softmax_cpu", x.scalar_type(), y.scalar_type(), [&](auto in_tag, auto out_tag) {
    using In = typename decltype(in_tag)::type;
    using Out = typename decltype(out_tag)::type;
    softmax_rows_kernel<In, Out, at::opmath_type<In>>(x.const_data_ptr<In>(), y.mutable_data_ptr<Out>(), g);
  });
}

void softmax_inner(const at::Tensor& x, const InnerGeometry& g, const at::Tensor& y) {
  dispatch_in_out("softmax_cpu", x.scalar_type(), y.scalar_type(), [&](auto in_tag, auto out_tag) {
    using In = typename decltype(in_tag)::type;
    using Out = typename decltype(out_tag)::type;
    softmax_inner_kernel<In, Out, at::opmath_type<In>>(x.const_data_ptr<In>(), y.mutable_data_ptr<Out>(), g);
  });
}

void reduce_scale(const at::Tensor& x, const RowGeometry& g, const at::Tensor& y,
                  const at::Tensor& scale, double eps) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "reduce_scale_cpu", [&] {
    using Acc = at::opmath_type<scalar_t>;
    // y may alias x, so take both pointers as mutable/const views of one buffer.
    reduce_scale_kernel<scalar_t, Acc>(static_cast<const scalar_t*>(x.const_data_ptr()),
                                       static_cast<scalar_t*>(y.data_ptr()),
                                       scale.mutable_data_ptr<Acc>(), g, static_cast<Acc>(eps));
  });
}

