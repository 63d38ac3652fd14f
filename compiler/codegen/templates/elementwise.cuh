// elementwise.cuh: one output element per step, for ops that stand alone (O0, O1):
// elementwise math from the shared table, RoPE, masks, and layout ops (transposes,
// head splits and merges, GQA repeats, splits, concatenations).
//
//   v1  grid-stride over the output; where every operand of 8 consecutive outputs is 8
//       consecutive elements, one 16-byte access moves them (S::VEC == 8).
//
// Spec S: COUNT, VEC, Params, and compute(p, e, v) filling v[0..VEC) for outputs
// e..e+VEC-1 and storing them.
#pragma once
#include "prelude.cuh"

template <class S> TL_DEVICE void tl_elementwise(const typename S::Params &p) {
  tl_wait_for_producers();
  const tl_i64 steps = (S::COUNT + S::VEC - 1) / S::VEC;
  for (tl_i64 i = (tl_i64)tl_block_index() * tl_block_threads() + threadIdx.x; i < steps; i += (tl_i64)tl_grid_blocks() * tl_block_threads())
    S::compute(p, i * S::VEC);
  tl_allow_dependents();
}
