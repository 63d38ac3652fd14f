// The kernel-level representation between the tl IR and the generated source: what one
// Program kernel computes, in the terms its device template needs. A fused linear is a
// GEMM with its prologue (where A's elements come from, an RMSNorm over A's rows) and
// its epilogue (per output group, the values stored and where); flash attention is an
// attention kernel; reductions along rows are row kernels; everything else is an
// elementwise kernel. Built from the fused IR by compiler/codegen/KernelBuilder.h,
// turned into source by compiler/codegen/Emitter.h. No MLIR here.
//
// Index expressions use these variables: GEMM operands bt (batch), m (row), k (depth),
// n (accumulator column); GEMM epilogues m and c (the group's output column);
// attention b, h, s; elementwise kernels e (the output element).
#pragma once

#include "compiler/codegen/ElementExpr.h"
#include "runtime/Program.h"

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace tlc::codegen {

// A kernel argument: a Program value read or written by the kernel. Arguments are the
// Program kernel's inputs, then its outputs, in order.
struct KernelParam {
  int value = -1;
  DType dtype = DType::F32;
  bool output = false;
};

// Output columns that one set of tiles computes. A group with one band is a slice of
// the accumulator's columns (a split piece, or all of them); with two bands, a tile
// holds matching columns of both (gate and up), joined elementwise by the epilogue.
struct GemmGroup {
  int64_t width = 0;            // output columns c = 0 .. width - 1
  std::vector<int64_t> bands;   // accumulator column of c = 0 in each band
  std::vector<Store> stores;    // values at row m, column c, and where they go
};

struct RowSpec {
  enum class Kind {
    RmsNorm, Softmax, Embedding, CrossEntropy,
    RmsNormGrad,       // x, gain, dy -> y (d x), gainGrad (d gain), normalized (x r g) if asked
    SoftmaxGrad,       // x (the saved softmax), dy -> y
    CrossEntropyGrad,  // x logits, ids -> y (d logits), loss (the mean loss) if asked
    EmbeddingGrad,     // dy [tokens, cols], ids -> y [rows, cols] (d table)
  } kind = Kind::RmsNorm;
  int x = -1, gain = -1, y = -1, ids = -1;   // CrossEntropy: x logits, ids tokens, y loss
  int dy = -1, gainGrad = -1, residual = -1;  // RmsNormGrad: residual (-1: none) + d x
  int normalized = -1;                        // RmsNormGrad: x r g (-1: not written)
  int loss = -1;                              // CrossEntropyGrad: the loss (-1: not written)
  int64_t tokens = 0;                        // EmbeddingGrad: tokens read (rows: the table's)
  int64_t rows = 0, cols = 0;                // CrossEntropy: batch x seq rows of cols logits
  int64_t batch = 0, seq = 0;
  double eps = 0;
};

struct GemmSpec {
  int64_t batch = 1, M = 0, N = 0, K = 0;  // N: accumulator columns
  int a = -1;                 // A[bt, m, k] is element aOffset of argument a (contiguous along k, or
  IndexExpr aOffset;          // along m: A stored [K, M], a weight gradient's dYᵀ)
  // Or A is computed as it is loaded (a prologue of elementwise ops): A[bt, m, k] is this
  // expression of loads over bt, m and k, and `a` is -1.
  ElementRef aValue;
  bool rowNorm = false;       // A is rmsnorm(x): x from a, gain from argument gain
  int gain = -1;
  double eps = 0;
  int b = -1;                 // B[bt, n, k] (or [bt, k, n] when bKN) is element bOffset of b
  bool bKN = false;
  IndexExpr bOffset;
  std::vector<GemmGroup> groups;
  // Set: the epilogue is this RMSNorm backward (tl-fuse-norm-grad-gemm; kind RmsNormGrad,
  // its d y the accumulator, dy unset), one group with no stores. Each row's sums span all
  // its column tiles, which share them (gemm_norm_grad.cuh).
  std::optional<RowSpec> normGrad;
  // Set: A is this GEMM's output, computed in the same kernel (tl-fuse-gemv-chains: gate/up
  // in a decode step's down projection). Its one group's one store is A's element [m, c]
  // (param -1: kept on chip); `a` and `aValue` are unset. Each block computes a slice of
  // its columns and adds their products with this GEMM's matching K slice (gemv_chain.cuh).
  std::shared_ptr<const GemmSpec> producer;
};

struct AttentionSpec {
  int q = -1, k = -1, v = -1, out = -1;      // arguments
  int lse = -1;                              // with the log-sum-exp of each query row (for the backward), f32 [B, H, SQ]
  IndexExpr qRow, kRow, vRow, outRow;        // first element of row (b, h, s): q/out over H heads, k/v over HKV
  int64_t B = 0, H = 0, HKV = 0, SQ = 0, SK = 0, D = 0, DV = 0;
  bool causal = false;
  double scale = 1;
};

// Where a gradient's rows go: the element offset of row (b, h, s) (its columns follow
// contiguously), and, where tl.rope_grad was folded into the kernel, the RoPE its pairs
// are rotated back by: minus s * theta^(-2i / D), pair i the columns (2i, 2i+1) or, by
// halves, (i, i + D/2).
struct GradRows {
  IndexExpr row;
  double ropeTheta = 0;      // 0: stored as computed
  bool ropeHalves = false;   // pairs (i, i + D/2) rather than (2i, 2i+1)
};

// The backward of flash attention: dq, dk, dv from q, k, v, the saved output and
// log-sum-exp, and d output (its rows at outRow). Each gradient has its operand's shape;
// unfused its rows are the forward's (qRow, kRow, vRow), fused
// (tl.fused_flash_attention_grad) wherever the epilogue's layout puts them.
struct AttentionGradSpec {
  AttentionSpec forward;                      // q, k, v, out (the saved output), lse
  int dout = -1, dq = -1, dk = -1, dv = -1;   // arguments
  GradRows dqRows, dkRows, dvRows;
};


// Decode attention over generation's KV cache (tl.cache_attention): query row (b, h, s)
// sits at position positions[b] + s and reads cache rows 0..that position of layer
// `layer` of the caches [layers, B, HKV, context, D], query head h the kv head h / (H / HKV).
struct CacheAttentionSpec {
  int q = -1, keys = -1, values = -1, positions = -1, out = -1;  // arguments
  IndexExpr qRow, outRow;                    // first element of row (b, h, s), over H heads
  int64_t B = 0, H = 0, HKV = 0, SQ = 0, D = 0, DV = 0, layers = 0, layer = 0, context = 0;
  double scale = 1;
};

struct ElementwiseSpec {
  int64_t count = 0;          // output elements e = 0 .. count - 1
  std::vector<Store> stores;
};

// The optimizer: one AdamW step over every parameter (a multi-tensor update), or the
// global L2 norm of all gradients (for clipping).
struct OptimizerSpec {
  enum class Kind { AdamW, GlobalNorm } kind = Kind::AdamW;
  std::vector<int> grads;          // arguments, one per parameter (AdamW: the update's order)
  std::vector<int64_t> counts;     // their elements
  // where each gradient starts in its argument, in elements (AdamW: a piece of a merged
  // weight's gradient that the kernel's tl.concat_grad splits off; 0 for a whole argument)
  std::vector<int64_t> offsets;
  int pieces = 0;  // AdamW: the updates reading such a piece
  int gradNorm = -1;               // AdamW with clipping: the global norm's argument
  int norm = -1;                   // GlobalNorm: the f32 scalar written
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weightDecay = 0, maxGradNorm = 0;
};

struct KernelSpec {
  std::string entry;          // the kernel function's name
  std::vector<KernelParam> params;
  bool chained = false;       // launched as a dependent of the kernel before it
  bool collective = false;    // a tl.all_reduce: the runtime's collectives library runs it, no source
  // Provenance for the header comment: which ops of the model file each launch of this
  // source computes, one line each (filled by emitHipKernels from Kernel::origins).
  std::vector<std::string> provenance;
  std::variant<GemmSpec, AttentionSpec, AttentionGradSpec, CacheAttentionSpec, RowSpec, ElementwiseSpec, OptimizerSpec>
      body;
};

} // namespace tlc::codegen
