// optimizer.cuh: AdamW over every parameter in one launch (a multi-tensor update), and
// the gradients' global L2 norm for clipping.
//
//   v1  the parameters' elements in chunks of CHUNK, one block per chunk; a block finds
//       its tensor in a table of first blocks (binary search) and updates its chunk with
//       fp32 master weights and moments. The updated weight is also written where the
//       forward reads it (a bf16 copy, a slice of a concatenated weight). The global
//       norm: per-block sums of squares, added in block order by the last block.
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

TL_DEVICE void tl_store_copy(void *copy, int kind, tl_i64 i, float w) {
  if (!copy) return;
  if (kind == 1) tl_st((tl_bf16 *)copy, i, w);
  else if (kind == 2) ((float *)copy)[i] = __uint_as_float((tl_pack_bf16(w, 0.0f) & 0xffffu) << 16);
  else ((float *)copy)[i] = w;
}

// One chunk of tensor `t`'s AdamW step. S: LR, BETA1, BETA2, EPS, WEIGHT_DECAY, CHUNK.
template <class S, class G>
TL_DEVICE void tl_adamw_chunk(const G *grad, tl_i64 count, tl_i64 chunk, float clip, const tl_optimizer_state *state,
                              int t) {
  const tl_optimizer_tensor &tensor = state->tensors[t];
  const double step = (double)state->step;
  const float firstCorrection = (float)(1.0 - pow((double)S::BETA1, step));
  const float secondCorrection = (float)(1.0 - pow((double)S::BETA2, step));
  const tl_i64 begin = chunk * S::CHUNK, end = begin + S::CHUNK < count ? begin + S::CHUNK : count;
  for (tl_i64 i = begin + threadIdx.x; i < end; i += tl_block_threads()) {
    const float g = tl_ld(grad, i) * clip;
    const float m = S::BETA1 * tensor.first_moment[i] + (1.0f - S::BETA1) * g;
    const float v = S::BETA2 * tensor.second_moment[i] + (1.0f - S::BETA2) * g * g;
    tensor.first_moment[i] = m;
    tensor.second_moment[i] = v;
    const float w = tensor.weight[i] * (1.0f - S::LR * S::WEIGHT_DECAY) -
                    S::LR * (m / firstCorrection) / (sqrtf(v / secondCorrection) + S::EPS);
    tensor.weight[i] = w;
    tl_store_copy(tensor.copies[0], tensor.copy_kinds[0], i, w);
    tl_store_copy(tensor.copies[1], tensor.copy_kinds[1], i, w);
  }
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
