// hfexport's ExecuTorch kernel library: `hfexport::sdpa.out`, attention over a cache read where it
// lies. The stock runtime has no attention kernel, so a program built from its kernels and
// XNNPACK copies the slots it reads out of the cache (XNNPACK tensors are dense) and packs them
// again for each matmul; this kernel reads each key and value row once, in place, and only the
// rows the mask lets a query see. Loading the library registers the kernel (static initializer),
// as ExecuTorch's own kernel libraries do; programs exported with `--executorch-kernels hfexport`
// call it.
//
// hfexport::sdpa.out(Tensor q, Tensor k, Tensor v, Tensor? mask, float scale, float softcap, *,
//                    Tensor(a!) out) -> Tensor(a!)
//   q [B, Hq, S, D], k [B, Hkv, T, D], v [B, Hkv, T, Dv] float32, Hq a multiple of Hkv (query head
//   h reads kv head h / (Hq / Hkv)); mask [B, 1, S, T] bool (true: attend) or None; softcap 0:
//   none, else scores = tanh(scores / softcap) * softcap. A query row the mask hides from every
//   slot weighs all T slots equally, as an additive lowest-float mask does (transformers' eager).
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/kernel/kernel_includes.h>
#include <executorch/runtime/kernel/operator_registry.h>
#include <executorch/runtime/kernel/thread_parallel_interface.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace hfx_et {
namespace {

using executorch::aten::ScalarType;
using executorch::aten::SizesType;
using executorch::aten::Tensor;
using executorch::runtime::EValue;
using executorch::runtime::KernelRuntimeContext;
using executorch::runtime::Span;

// Eight floats at a time in GCC's vector type: one AVX register in the AVX clones below, two SSE
// ones in the default clone. (Left to itself, GCC vectorizes these loops across rows, badly.)
typedef float Floats8 __attribute__((vector_size(32)));
typedef float UnalignedFloats8 __attribute__((vector_size(32), aligned(4), may_alias));
#define HFX_LOAD8(p) (*reinterpret_cast<const UnalignedFloats8*>(p))

[[gnu::always_inline]] inline float horizontal_sum(const Floats8& v) { return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])); }

struct Shapes {
  int64_t batch, q_heads, kv_heads, queries, slots, depth, value_depth;
};

// Query rows are taken two at a time, so that each key and value row loaded serves both (a kv
// head's G query heads read the same rows).
constexpr int64_t kRowBlock = 2;

// scores[r][t] = q_r . k_t for the rows r0, r0 + 1 (if `pair`), both as 16-float strides when the
// depth allows, else one float at a time.
[[gnu::always_inline]] inline void dot_rows(const float* q0, const float* q1, const float* k, int64_t depth,
                                            float& s0, float& s1) {
  Floats8 a0 = {}, b0 = {}, a1 = {}, b1 = {};
  int64_t d = 0;
  for (; d + 16 <= depth; d += 16) {
    const Floats8 ka = HFX_LOAD8(k + d), kb = HFX_LOAD8(k + d + 8);
    a0 += HFX_LOAD8(q0 + d) * ka;
    b0 += HFX_LOAD8(q0 + d + 8) * kb;
    a1 += HFX_LOAD8(q1 + d) * ka;
    b1 += HFX_LOAD8(q1 + d + 8) * kb;
  }
  s0 = horizontal_sum(a0 + b0);
  s1 = horizontal_sum(a1 + b1);
  for (; d < depth; ++d) {
    s0 += q0[d] * k[d];
    s1 += q1[d] * k[d];
  }
}

// out_r += sum_t w_r[t] v_t for two rows, 64 floats of the value depth at a time held in
// registers across all slots; the rest one float at a time.
[[gnu::always_inline]] inline void weighted_values(const float* w0, const float* w1, const float* v, int64_t slots,
                                                   int64_t depth, float* o0, float* o1) {
  constexpr int64_t kChunk = 64, kLanes = kChunk / 8;
  int64_t d0 = 0;
  for (; d0 + kChunk <= depth; d0 += kChunk) {
    Floats8 acc0[kLanes] = {}, acc1[kLanes] = {};
    for (int64_t t = 0; t < slots; ++t) {
      const float x0 = w0[t], x1 = w1[t];
      if (x0 == 0.0f && x1 == 0.0f) continue;
      const float* row = v + t * depth + d0;
      for (int64_t j = 0; j < kLanes; ++j) {
        const Floats8 x = HFX_LOAD8(row + 8 * j);
        acc0[j] += x0 * x;
        acc1[j] += x1 * x;
      }
    }
    for (int64_t j = 0; j < kLanes; ++j) {
      *reinterpret_cast<UnalignedFloats8*>(o0 + d0 + 8 * j) = acc0[j];
      *reinterpret_cast<UnalignedFloats8*>(o1 + d0 + 8 * j) = acc1[j];
    }
  }
  for (int64_t d = d0; d < depth; ++d) {
    float a0 = 0, a1 = 0;
    for (int64_t t = 0; t < slots; ++t) {
      a0 += w0[t] * v[t * depth + d];
      a1 += w1[t] * v[t * depth + d];
    }
    o0[d] = a0;
    o1[d] = a1;
  }
}

// The query rows of one kv head (its G query heads x S positions) against the slots their mask
// allows: scores, softmax, then the weighted values, each key and value row read once per two
// rows. Clones for AVX-512 and AVX2+FMA are picked when the library loads (GCC's ifunc); the
// default runs anywhere.
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) void attend_kv_head(
    const Shapes& s, int64_t b, int64_t kv, const float* q, const float* k, const float* v, const bool* mask,
    float scale, float softcap, float* out) {
  const int64_t groups = s.q_heads / s.kv_heads, rows = groups * s.queries, T = s.slots;
  const float* keys = k + (b * s.kv_heads + kv) * T * s.depth;
  const float* values = v + (b * s.kv_heads + kv) * T * s.value_depth;
  const float* queries = q + (b * s.q_heads + kv * groups) * s.queries * s.depth;
  float* results = out + (b * s.q_heads + kv * groups) * s.queries * s.value_depth;
  // Row r is query head kv * G + r / S at position r % S; a padding row (odd row count) repeats
  // the last one and is not stored.
  const int64_t padded = (rows + kRowBlock - 1) / kRowBlock * kRowBlock;
  std::vector<float> weights(static_cast<size_t>(padded * T), 0.0f);
  std::vector<char> allowed(static_cast<size_t>(padded * T), 1);
  for (int64_t r = 0; r < padded; ++r)
    if (mask) std::memcpy(&allowed[r * T], mask + (b * s.queries + std::min(r, rows - 1) % s.queries) * T, T);
  for (int64_t r = 0; r < padded; r += kRowBlock) {
    const float* q0 = queries + r * s.depth;
    const float* q1 = queries + std::min(r + 1, rows - 1) * s.depth;
    const char *m0 = &allowed[r * T], *m1 = &allowed[(r + 1) * T];
    float *w0 = &weights[r * T], *w1 = &weights[(r + 1) * T];
    for (int64_t t = 0; t < T; ++t) {
      if (!m0[t] && !m1[t]) continue;
      float s0, s1;
      dot_rows(q0, q1, keys + t * s.depth, s.depth, s0, s1);
      w0[t] = s0 * scale;
      w1[t] = s1 * scale;
    }
  }
  for (int64_t r = 0; r < padded; ++r) {
    float* w = &weights[r * T];
    const char* m = &allowed[r * T];
    if (std::find(m, m + T, 1) == m + T) {  // hidden from every slot: all weigh the same
      std::fill(w, w + T, 1.0f / static_cast<float>(T));
      continue;
    }
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t t = 0; t < T; ++t) {
      if (!m[t]) continue;
      if (softcap > 0) w[t] = std::tanh(w[t] / softcap) * softcap;
      top = std::max(top, w[t]);
    }
    float total = 0;
    for (int64_t t = 0; t < T; ++t) total += w[t] = m[t] ? std::exp(w[t] - top) : 0.0f;
    for (int64_t t = 0; t < T; ++t) w[t] /= total;
  }
  std::vector<float> spare(static_cast<size_t>(s.value_depth));
  for (int64_t r = 0; r < rows; r += kRowBlock) {
    float* o1 = r + 1 < rows ? results + (r + 1) * s.value_depth : spare.data();
    weighted_values(&weights[r * T], &weights[(r + 1) * T], values, T, s.value_depth, results + r * s.value_depth, o1);
  }
}
#undef HFX_LOAD8

bool float32_rank4(const Tensor& t) { return t.scalar_type() == ScalarType::Float && t.dim() == 4; }

void sdpa_out(KernelRuntimeContext& context, Span<EValue*> stack) {
  // q, k, v, mask, scale, softcap, out, and out again as the returned value.
  ET_KERNEL_CHECK_MSG(context, stack.size() == 8, InvalidProgram, , "hfexport::sdpa.out: expected 8 arguments, got %zu",
                      stack.size());
  const Tensor& q = stack[0]->toTensor();
  const Tensor& k = stack[1]->toTensor();
  const Tensor& v = stack[2]->toTensor();
  const bool masked = !stack[3]->isNone();
  const float scale = static_cast<float>(stack[4]->toDouble());
  const float softcap = static_cast<float>(stack[5]->toDouble());
  Tensor& out = stack[6]->toTensor();
  ET_KERNEL_CHECK_MSG(context, float32_rank4(q) && float32_rank4(k) && float32_rank4(v) && float32_rank4(out),
                      InvalidArgument, , "hfexport::sdpa.out: q, k, v and out must be float32 [B, H, S, D]");
  const Shapes s{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
  ET_KERNEL_CHECK_MSG(context,
                      k.size(0) == s.batch && v.size(0) == s.batch && v.size(1) == s.kv_heads && v.size(2) == s.slots &&
                          k.size(3) == s.depth && s.kv_heads > 0 && s.q_heads % s.kv_heads == 0,
                      InvalidArgument, , "hfexport::sdpa.out: q, k and v disagree on batch, heads, slots or depth");
  const bool* mask = nullptr;
  if (masked) {
    const Tensor& m = stack[3]->toTensor();
    ET_KERNEL_CHECK_MSG(context,
                        m.scalar_type() == ScalarType::Bool && m.dim() == 4 && m.size(0) == s.batch && m.size(1) == 1 &&
                            m.size(2) == s.queries && m.size(3) == s.slots,
                        InvalidArgument, , "hfexport::sdpa.out: the mask must be bool [B, 1, S, T]");
    mask = m.const_data_ptr<bool>();
  }
  const SizesType sizes[4] = {static_cast<SizesType>(s.batch), static_cast<SizesType>(s.q_heads),
                              static_cast<SizesType>(s.queries), static_cast<SizesType>(s.value_depth)};
  ET_KERNEL_CHECK_MSG(context, executorch::runtime::resize_tensor(out, {sizes, 4}) == executorch::runtime::Error::Ok,
                      InvalidArgument, , "hfexport::sdpa.out: out cannot hold [B, Hq, S, Dv]");
  const float *qd = q.const_data_ptr<float>(), *kd = k.const_data_ptr<float>(), *vd = v.const_data_ptr<float>();
  float* od = out.mutable_data_ptr<float>();
  // One task per (batch, kv head): the runtime's thread pool, shared with XNNPACK.
  executorch::extension::parallel_for(0, s.batch * s.kv_heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      attend_kv_head(s, i / s.kv_heads, i % s.kv_heads, qd, kd, vd, mask, scale, softcap, od);
  });
}

const executorch::runtime::Kernel kKernels[] = {executorch::runtime::Kernel("hfexport::sdpa.out", sdpa_out)};
const bool kRegistered =
    executorch::runtime::register_kernels({kKernels, sizeof kKernels / sizeof kKernels[0]}) ==
    executorch::runtime::Error::Ok;

}  // namespace

// For a loader that wants to know the kernels are in (the static initializer has run by then).
extern "C" __attribute__((visibility("default"))) int hfexport_executorch_kernels_registered() { return kRegistered; }

}  // namespace hfx_et
