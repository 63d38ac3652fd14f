// Reference semantics of every tl op, on fp32 host buffers.
//
// The CPU backend calls runOp for each op of a kernel; tests call it directly. All
// reductions (dot products, sums of squares, softmax sums, the loss) accumulate in fp64.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/Program.h"
#include "runtime/ThreadPool.h"

namespace tlc::cpu {

// An operand: fp32 data in row-major order; i32 values (token ids) also give `ids`.
struct OpInput {
  std::vector<int64_t> shape;
  const float *data = nullptr;
  const int32_t *ids = nullptr;
};

// A result buffer of the shape the Program declares; runOp fills all of it.
struct OpOutput {
  std::vector<int64_t> shape;
  float *data = nullptr;
};

// Runs one op. Throws tlc::Error on an unknown op ("cpu backend: unknown op 'x' in
// kernel 'y'"), or an op its rules (runtime/OpRules.h) reject: a missing or
// out-of-range attribute, operand or result shapes the op cannot take.
void runOp(const OpRecord &op, const std::vector<OpInput> &operands,
           const std::vector<OpOutput> &results, ThreadPool &pool, const std::string &kernelName);

// A parameter's training state, in fp32: the master weight and AdamW's moments.
struct ParameterState {
  std::vector<float> weight, firstMoment, secondMoment;
};

// Runs an optimizer op (`adamw`): updates `state` in place from the gradient it reads;
// `step` is the optimizer step, from 1. Throws tlc::Error as runOp does, and when the
// state does not match the gradient.
void runOptimizerOp(const OpRecord &op, const std::vector<OpInput> &operands, ParameterState &state,
                    int64_t step, ThreadPool &pool, const std::string &kernelName);

// c[m, n] = sum_k a[m, k] * b[n, k] for `batch` independent problems laid out
// contiguously (a: batch x M x K, b: batch x N x K, c: batch x M x N); fp64 accumulation.
// bBatchStride = 0 shares one b across the batch. Uses the best GEMM variant this CPU runs.
void matmulTransposedB(const float *a, const float *b, float *c, int64_t batch, int64_t M,
                       int64_t N, int64_t K, int64_t bBatchStride, ThreadPool &pool);

// The GEMM is compiled once per instruction set and picked at run time; tests run each.
enum class GemmIsa { Avx512, Avx2, Baseline };
std::vector<GemmIsa> supportedGemmIsas(); // those this CPU runs, best first
void matmulTransposedB(const float *a, const float *b, float *c, int64_t batch, int64_t M,
                       int64_t N, int64_t K, int64_t bBatchStride, ThreadPool &pool, GemmIsa isa);

} // namespace tlc::cpu
