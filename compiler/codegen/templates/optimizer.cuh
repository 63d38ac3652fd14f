// optimizer.cuh: AdamW over every parameter in one launch (a multi-tensor update), and
// the gradients' global L2 norm for clipping.
//
//   v1  the parameters' elements in chunks of CHUNK, one block per chunk; a block finds
//       its tensor in a table of first blocks (binary search) and updates its chunk with
//       fp32 master weights and moments. The updated weight is also written where the
//       forward reads it (a bf16 copy, a slice of a concatenated weight). The global
//       norm: per-block sums of squares, added in block order by the last block.
//   v2  four consecutive elements a thread a step (16-byte accesses of floats, 8-byte of
//       bf16) where the tensor's count is a multiple of 4 and every pointer aligned to
//       them; v1's loop otherwise. The update is compiled once a gradient type (the switch
//       over tensors picks a pointer), not once a tensor. A merged weight's gradient
//       (QKV's, gate/up's) is read in place: each parameter's piece at its offset (the
//       global norm reads it whole).
//
// The optimizer state is the runtime's: a kernel of adamw ops takes, after `sync`, a
// pointer to a tl_optimizer_state (runtime/OptimizerState.h has the same layout).
#pragma once
#include "prelude.cuh"

struct tl_optimizer_tensor {
  float *weight, *first_moment, *second_moment;
  void *copies[2];    // where the forward reads the weight, or null
  int copy_kinds[2];  // 0: f32, 1: bf16, 2: f32 rounded to bf16
};
struct tl_optimizer_state {
  long long step;     // the update being applied, from 1
  long long reserved;
  tl_optimizer_tensor tensors[1];  // one per adamw op, in order
};

// Which tensor block `block` belongs to, with FIRST[t] the first block of tensor t.
template <int TENSORS> TL_DEVICE int tl_tensor_of_block(const tl_i64 *first, tl_i64 block) {
  int lo = 0, hi = TENSORS - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first[mid] <= block) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// A float copy's value: w, or (kind 2) w rounded to bf16.
TL_DEVICE float tl_copy_value(int kind, float w) { return kind == 2 ? tl_bf16_lo(tl_pack_bf16(w, 0.0f)) : w; }

TL_DEVICE void tl_store_copy(void *copy, int kind, tl_i64 i, float w) {
  if (!copy) return;
  if (kind == 1) tl_st((tl_bf16 *)copy, i, w);
  else ((float *)copy)[i] = tl_copy_value(kind, w);
}

// v2: four consecutive elements from index i on (i a multiple of 4), 16-byte loads and
// stores of floats (8-byte ones of bf16), so a warp's access covers 512 bytes whole.
TL_DEVICE void tl_ld4_aligned(const float *p, tl_i64 i, float (&v)[4]) { tl_ld4(p, i, v); }
TL_DEVICE void tl_ld4_aligned(const tl_bf16 *p, tl_i64 i, float (&v)[4]) {
  const uint2 raw = *reinterpret_cast<const uint2 *>(p + i);
  v[0] = tl_bf16_lo(raw.x), v[1] = tl_bf16_hi(raw.x), v[2] = tl_bf16_lo(raw.y), v[3] = tl_bf16_hi(raw.y);
}
// (NVRTC splits a plain store of a float4 reached through the state's pointers into four;
// __stcs keeps it one, streaming: nothing here is read again this step.)
template <class T> TL_DEVICE void tl_st_streaming(T *at, T value) {
#if defined(TL_NVIDIA)
  __stcs(at, value);
#else
  *at = value;
#endif
}
TL_DEVICE void tl_st4_aligned(float *p, tl_i64 i, const float (&v)[4]) {
  tl_st_streaming(reinterpret_cast<float4 *>(p + i), make_float4(v[0], v[1], v[2], v[3]));
}
TL_DEVICE void tl_store_copy4(void *copy, int kind, tl_i64 i, const float (&w)[4]) {
  if (!copy) return;
  if (kind == 1) {
    tl_st_streaming(reinterpret_cast<uint2 *>((tl_bf16 *)copy + i),
                    make_uint2(tl_pack_bf16(w[0], w[1]), tl_pack_bf16(w[2], w[3])));
    return;
  }
  float v[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = tl_copy_value(kind, w[j]);
  tl_st4_aligned((float *)copy, i, v);
}

// Whether v2's vector accesses may serve tensor `tensor` (its gradient `grad`) from element `begin` on.
template <class G>
TL_DEVICE bool tl_adamw_vectors(const tl_optimizer_tensor &tensor, const G *grad, tl_i64 count, tl_i64 begin) {
  auto misaligned = [&](const void *base, tl_i64 bytes) {
    return base && (reinterpret_cast<unsigned long long>(base) + begin * bytes) % (4 * bytes) != 0;
  };
  auto copyBytes = [](int kind) { return kind == 1 ? tl_i64(2) : tl_i64(4); };
  return count % 4 == 0 && !misaligned(grad, sizeof(G)) && !misaligned(tensor.weight, 4) &&
         !misaligned(tensor.first_moment, 4) && !misaligned(tensor.second_moment, 4) &&
         !misaligned(tensor.copies[0], copyBytes(tensor.copy_kinds[0])) &&
         !misaligned(tensor.copies[1], copyBytes(tensor.copy_kinds[1]));
}

// A tensor's gradient, f32 or bf16, and its element count: the kernel's switch over
// tensors picks one, so the update below is compiled once a gradient type, not once a tensor.
struct tl_grad_ref {
  const float *f32 = nullptr;
  const tl_bf16 *bf16 = nullptr;
  tl_i64 count = 0;
};
TL_DEVICE tl_grad_ref tl_grad_of(const float *grad, tl_i64 count) { return {grad, nullptr, count}; }
TL_DEVICE tl_grad_ref tl_grad_of(const tl_bf16 *grad, tl_i64 count) { return {nullptr, grad, count}; }

// One chunk of tensor `t`'s AdamW step. S: LR, BETA1, BETA2, EPS, WEIGHT_DECAY, CHUNK.
template <class S, class G>
TL_DEVICE void tl_adamw_chunk(const G *grad, tl_i64 count, tl_i64 chunk, float clip, const tl_optimizer_state *state,
                              int t) {
  const tl_optimizer_tensor &tensor = state->tensors[t];
  const double step = (double)state->step;
  const float firstCorrection = (float)(1.0 - pow((double)S::BETA1, step));
  const float secondCorrection = (float)(1.0 - pow((double)S::BETA2, step));
  const tl_i64 begin = chunk * S::CHUNK, end = begin + S::CHUNK < count ? begin + S::CHUNK : count;
  auto update = [&](float g, float &m, float &v, float &w) {
    g *= clip;
    m = S::BETA1 * m + (1.0f - S::BETA1) * g;
    v = S::BETA2 * v + (1.0f - S::BETA2) * g * g;
    w = w * (1.0f - S::LR * S::WEIGHT_DECAY) - S::LR * (m / firstCorrection) / (sqrtf(v / secondCorrection) + S::EPS);
  };
  if (tl_adamw_vectors(tensor, grad, count, begin)) {  // v2
    for (tl_i64 i = begin + 4 * threadIdx.x; i < end; i += 4 * tl_block_threads()) {
      float g[4], m[4], v[4], w[4];
      tl_ld4_aligned(grad, i, g);
      tl_ld4_aligned(tensor.first_moment, i, m);
      tl_ld4_aligned(tensor.second_moment, i, v);
      tl_ld4_aligned(tensor.weight, i, w);
#pragma unroll
      for (int j = 0; j < 4; ++j) update(g[j], m[j], v[j], w[j]);
      tl_st4_aligned(tensor.first_moment, i, m);
      tl_st4_aligned(tensor.second_moment, i, v);
      tl_st4_aligned(tensor.weight, i, w);
      tl_store_copy4(tensor.copies[0], tensor.copy_kinds[0], i, w);
      tl_store_copy4(tensor.copies[1], tensor.copy_kinds[1], i, w);
    }
    return;
  }
  for (tl_i64 i = begin + threadIdx.x; i < end; i += tl_block_threads()) {
    float m = tensor.first_moment[i], v = tensor.second_moment[i], w = tensor.weight[i];
    update(tl_ld(grad, i), m, v, w);
    tensor.first_moment[i] = m;
    tensor.second_moment[i] = v;
    tensor.weight[i] = w;
    tl_store_copy(tensor.copies[0], tensor.copy_kinds[0], i, w);
    tl_store_copy(tensor.copies[1], tensor.copy_kinds[1], i, w);
  }
}

template <class S>
TL_DEVICE void tl_adamw_chunk(const tl_grad_ref &grad, tl_i64 chunk, float clip, const tl_optimizer_state *state, int t) {
  if (grad.f32) tl_adamw_chunk<S>(grad.f32, grad.count, chunk, clip, state, t);
  else tl_adamw_chunk<S>(grad.bf16, grad.count, chunk, clip, state, t);
}

// This block's chunk's sum of squares; the last block to finish writes sqrt of all,
// summed in block order. S: CHUNK; partial(p) (tl_grid_blocks() floats of workspace),
// counter(p) (a zeroed word, left zeroed), norm(p).
template <class S, class G> TL_DEVICE float tl_chunk_squares(const G *x, tl_i64 count, tl_i64 chunk) {
  const tl_i64 begin = chunk * S::CHUNK, end = begin + S::CHUNK < count ? begin + S::CHUNK : count;
  float sum = 0.0f;
  for (tl_i64 i = begin + threadIdx.x; i < end; i += tl_block_threads()) {
    const float v = tl_ld(x, i);
    sum = fmaf(v, v, sum);
  }
  return sum;
}

template <class S> TL_DEVICE float tl_chunk_squares(const tl_grad_ref &grad, tl_i64 chunk) {
  return grad.f32 ? tl_chunk_squares<S>(grad.f32, grad.count, chunk) : tl_chunk_squares<S>(grad.bf16, grad.count, chunk);
}

// `blockSum`: the block's total, every thread holding it.
template <class S> TL_DEVICE void tl_global_norm_finish(const typename S::Params &p, float blockSum) {
  if (threadIdx.x == 0) S::partial(p)[tl_block_index()] = blockSum;
  if (!tl_last_block_arrives(S::counter(p))) return;
  const double total = tl_block_sum_in_order(S::partial(p), tl_grid_blocks());
  if (threadIdx.x == 0) {
    S::norm(p)[0] = (float)sqrt(total);
    *S::counter(p) = 0u;
  }
}
