// Reference semantics of every tl op, as the CPU backend runs them.
//
// Shapes are row-major. Every reduction accumulates in fp64; results are rounded to
// fp32 once, when stored. The GEMM behind linear/batch_matmul is in CpuMatmul.cpp.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/CpuOps.h"
#include "runtime/ElementwiseOps.h"
#include "runtime/Error.h"
#include "runtime/OpRules.h"
#include "runtime/Tensor.h"

namespace tlc::cpu {
namespace {

// Elementwise loops split into chunks of this many elements across the pool.
constexpr int64_t kElementGrain = 1 << 14;

class OpRunner {
public:
  OpRunner(const OpRecord &op, const std::vector<OpInput> &operands,
           const std::vector<OpOutput> &results, ThreadPool &pool, const std::string &kernel,
           ParameterState *state = nullptr, int64_t step = 0)
      : op_(op), operands_(operands), results_(results), pool_(pool), kernel_(kernel), state_(state),
        step_(step) {}

  void run() {
    if (operands_.size() != op_.operands.size() || results_.size() != op_.results.size())
      fail(fmt::format("given {} operands and {} results, but the op record lists {} and {}",
                       operands_.size(), results_.size(), op_.operands.size(), op_.results.size()));
    for (const OpInput &operand : operands_)
      if (!operand.data && !operand.ids) fail("an operand has no data");
    for (const OpOutput &result : results_)
      if (!result.data) fail("a result has no buffer");
    checkShapes();
    compute();
  }

private:
  // The op's reference semantics, by its kind's method in runtime/Ops.def.
  void compute() {
    switch (op_.kind) {
#define TL_OP(name, method) \
  case OpKind::name: return method();
#include "runtime/Ops.def"
#undef TL_OP
    }
    fail("is no op kind");
  }

  // ---- checks and attributes ------------------------------------------------------

  [[noreturn]] void fail(const std::string &message) const {
    throw Error(fmt::format("cpu backend: op '{}' in kernel '{}': {}", opKindName(op_.kind), kernel_, message));
  }

  const OpInput &in(size_t index) const { return operands_[index]; }
  const OpOutput &out(size_t index) const { return results_[index]; }

  // The op's rules (runtime/OpRules.h): arity, attributes and shapes, so the ops below
  // only compute.
  void checkShapes() const {
    std::vector<Shape> operandShapes;
    for (const OpInput &operand : operands_) operandShapes.push_back(operand.shape);
    std::vector<Shape> expected;
    try {
      expected = inferResultShapes(op_, operandShapes);
    } catch (const Error &error) {
      fail(error.what());
    }
    if (expected.size() != results_.size())
      fail(fmt::format("computes {} results, given {}", expected.size(), results_.size()));
    for (size_t i = 0; i < expected.size(); ++i)
      if (out(i).shape != expected[i])
        fail(fmt::format("result {} has shape {}, expected {}", i, shapeString(out(i).shape),
                         shapeString(expected[i])));
  }

  // Operands with only i32 ids (no fp32 copy) cannot feed fp32 math.
  const float *floats(size_t index) const {
    if (!operands_[index].data)
      fail(fmt::format("operand {} must be a floating-point tensor", index));
    return operands_[index].data;
  }

  const int32_t *tokenIds(size_t index) const {
    if (!operands_[index].ids) fail(fmt::format("operand {} must hold i32 token ids", index));
    return operands_[index].ids;
  }

  // Applies `fn(i)` to every element index in parallel.
  template <typename F> void forEachElement(int64_t count, F fn) {
    pool_.parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) fn(i);
    });
  }

  // Calls fn(row) for each of `rows` rows, grouping rows of `rowCost` work per chunk.
  template <typename F> void forEachRow(int64_t rows, int64_t rowCost, F fn) {
    int64_t grain = std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, rowCost));
    pool_.parallelFor(rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) fn(row);
    });
  }

  // ---- ops: checkShapes() has checked arity, attributes and shapes ----------------

  // embedding(table[V,H], ids[...]) -> [..., H]: out[t, :] = table[ids[t], :]
  void embedding() {
    const float *table = floats(0);
    const int32_t *ids = tokenIds(1);
    int64_t rows = in(0).shape[0], hidden = in(0).shape[1];
    float *result = out(0).data;
    forEachRow(Tensor::elementsOf(in(1).shape), hidden, [&](int64_t token) {
      int32_t id = ids[token];
      if (id < 0 || id >= rows)
        fail(fmt::format("token id {} at position {} is out of range for an embedding table of "
                         "{} rows",
                         id, token, rows));
      std::memcpy(result + token * hidden, table + int64_t(id) * hidden, size_t(hidden) * 4);
    });
  }

  // rmsnorm(x[..., H] [, gain[H]]) -> x / sqrt(mean(x^2) + eps) [* gain]
  void rmsnorm() {
    int64_t hidden = in(0).shape.back();
    double eps = op_.floatAttr("eps");
    const float *x = floats(0), *gain = operands_.size() > 1 ? floats(1) : nullptr;
    float *result = out(0).data;
    forEachRow(Tensor::elementsOf(in(0).shape) / hidden, hidden, [&](int64_t row) {
      const float *xRow = x + row * hidden;
      double sumOfSquares = 0;
      for (int64_t i = 0; i < hidden; ++i) sumOfSquares += double(xRow[i]) * double(xRow[i]);
      double inverseRms = 1.0 / std::sqrt(sumOfSquares / double(hidden) + eps);
      for (int64_t i = 0; i < hidden; ++i)
        result[row * hidden + i] = float(double(xRow[i]) * inverseRms * (gain ? double(gain[i]) : 1.0));
    });
  }

  // linear(x[..., K], w[N, K]) -> [..., N] = x · wᵀ
  void linear() {
    int64_t K = in(0).shape.back(), N = in(1).shape[0];
    matmulTransposedB(floats(0), floats(1), out(0).data, 1, Tensor::elementsOf(in(0).shape) / K, N, K, 0,
                      pool_);
  }

  // transpose(x) (perm) -> out.shape[i] = x.shape[perm[i]]
  void transpose() {
    Shape perm = op_.intsAttr("perm");
    const Shape &inShape = in(0).shape, &outShape = out(0).shape;
    size_t rank = inShape.size();
    if (rank == 0) {
      out(0).data[0] = floats(0)[0];
      return;
    }
    Shape inStrides(rank, 1);
    for (size_t i = rank; i-- > 1;) inStrides[i - 1] = inStrides[i] * inShape[i];
    // Element strides in x for each output dimension; output rows are walked in order.
    Shape strideOfOutDim(rank);
    for (size_t i = 0; i < rank; ++i) strideOfOutDim[i] = inStrides[size_t(perm[i])];
    int64_t rowLength = outShape.back(), innerStride = strideOfOutDim.back();
    const float *x = floats(0);
    float *result = out(0).data;
    forEachRow(Tensor::elementsOf(outShape) / rowLength, rowLength, [&](int64_t row) {
      int64_t source = 0;
      for (size_t dim = rank - 1, rest = size_t(row); dim-- > 0;) {
        source += int64_t(rest % size_t(outShape[dim])) * strideOfOutDim[dim];
        rest /= size_t(outShape[dim]);
      }
      for (int64_t i = 0; i < rowLength; ++i)
        result[row * rowLength + i] = x[source + i * innerStride];
    });
  }

  // Row-major reshape: the same elements in the same order under a new shape.
  // split_heads(x[B, S, H*D]) -> [B, S, H, D] and merge_heads: a View between kernels,
  // a copy here.
  void copyReshaped() {
    std::memcpy(out(0).data, floats(0), size_t(Tensor::elementsOf(out(0).shape)) * 4);
  }
  void splitHeads() { copyReshaped(); }
  void mergeHeads() { copyReshaped(); }

  // concat(x0, x1, ...) along dim 0; the other dims agree.
  void concat() {
    float *destination = out(0).data;
    for (size_t i = 0; i < operands_.size(); ++i) {
      int64_t count = Tensor::elementsOf(in(i).shape);
      std::memcpy(destination, floats(i), size_t(count) * 4);
      destination += count;
    }
  }

  // rope(x[B, S, H, D]) (theta, style): rotates pairs by angle s * theta^(-2i/D).
  void rope() { rotatePairs(+1.0, nullptr); }

  // rope_grad(dy): the transpose of a rotation is the rotation by minus the angle.
  void ropeGrad() { rotatePairs(-1.0, nullptr); }

  // rope_at(x[B, S, H, D], positions[B]): token s of sequence b at position positions[b] + s.
  void ropeAt() { rotatePairs(+1.0, tokenIds(1)); }

  // Sequence b's first position: positions[b], checked, or 0 without positions.
  int64_t startOf(const int32_t *positions, int64_t b) const {
    if (!positions) return 0;
    if (positions[b] < 0) fail(fmt::format("sequence {} is at position {}, which is negative", b, positions[b]));
    return positions[b];
  }

  // Rotates each pair of each head by `direction` * p * theta^(-2i/D), p the token's
  // position: s, or positions[b] + s.
  void rotatePairs(double direction, const int32_t *positions) {
    int64_t seq = in(0).shape[1], heads = in(0).shape[2], headDim = in(0).shape[3];
    double theta = op_.floatAttr("theta");
    bool adjacent = op_.stringAttr("style") == "adjacent";
    int64_t pairs = headDim / 2;
    std::vector<double> frequencies(static_cast<size_t>(pairs));
    for (int64_t i = 0; i < pairs; ++i) frequencies[size_t(i)] = std::pow(theta, -2.0 * double(i) / double(headDim));
    const float *x = floats(0);
    float *result = out(0).data;
    forEachRow(in(0).shape[0] * seq, heads * headDim, [&](int64_t token) {
      double position = double(startOf(positions, token / seq) + token % seq);
      for (int64_t i = 0; i < pairs; ++i) {
        double angle = position * frequencies[size_t(i)], c = std::cos(angle), sn = direction * std::sin(angle);
        for (int64_t h = 0; h < heads; ++h) {
          int64_t base = (token * heads + h) * headDim;
          int64_t first = base + (adjacent ? 2 * i : i);
          int64_t second = base + (adjacent ? 2 * i + 1 : i + pairs);
          double a = x[first], b = x[second];
          result[first] = float(a * c - b * sn);
          result[second] = float(a * sn + b * c);
        }
      }
    });
  }

  // The position of token s of sequence b in a cache of `context`, checked.
  int64_t cachePosition(const int32_t *positions, int64_t b, int64_t s, int64_t context) const {
    int64_t position = startOf(positions, b) + s;
    if (position >= context)
      fail(fmt::format("sequence {} reaches position {}, past the cache's {} positions", b, position, context));
    return position;
  }

  // kv_cache_store(cache[L,B,Hkv,T,D], x[B,Hkv,S,D][, positions[B]]) (layer) -> the cache
  // with x[b, h, s] at cache[layer, b, h, positions[b] + s] (from 0 without positions).
  void kvCacheStore() {
    const Shape &cache = in(0).shape, &x = in(1).shape;
    int64_t batch = x[0], kvHeads = x[1], seq = x[2], headDim = x[3], context = cache[3];
    int64_t layer = op_.intAttr("layer");
    const int32_t *positions = operands_.size() > 2 ? tokenIds(2) : nullptr;
    float *result = out(0).data;
    if (result != floats(0)) std::memcpy(result, floats(0), size_t(Tensor::elementsOf(cache)) * 4);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < seq; ++s) {
        int64_t position = cachePosition(positions, b, s, context);
        for (int64_t h = 0; h < kvHeads; ++h)
          std::memcpy(result + (((layer * batch + b) * kvHeads + h) * context + position) * headDim,
                      floats(1) + ((b * kvHeads + h) * seq + s) * headDim, size_t(headDim) * 4);
      }
  }

  // softmax(q kᵀ * scale) v of one query row over keys and values [visible, D] (rows of
  // `headDim`), written to `result`; returns the scores' log-sum-exp.
  static double attendRow(const float *qRow, const float *keys, const float *values, int64_t visible,
                          int64_t headDim, int64_t valueDim, double scale, std::vector<double> &scores,
                          std::vector<double> &accumulator, float *result) {
    double maximum = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < visible; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < headDim; ++d) dot += double(qRow[d]) * double(keys[j * headDim + d]);
      scores[size_t(j)] = dot * scale;
      maximum = std::max(maximum, scores[size_t(j)]);
    }
    std::fill(accumulator.begin(), accumulator.end(), 0.0);
    double sum = 0;
    for (int64_t j = 0; j < visible; ++j) {
      double weight = std::exp(scores[size_t(j)] - maximum);
      sum += weight;
      for (int64_t d = 0; d < valueDim; ++d) accumulator[size_t(d)] += weight * double(values[j * valueDim + d]);
    }
    for (int64_t d = 0; d < valueDim; ++d) result[d] = float(accumulator[size_t(d)] / sum);
    return maximum + std::log(sum);
  }

  // cache_attention(q[B,H,S,D], keys, values [L,B,Hkv,T,D], positions[B]) (layer, scale)
  // -> [B,H,S,D]: query s of sequence b reads cache positions 0..positions[b] + s.
  void cacheAttention() {
    const Shape &q = in(0).shape, &cache = in(1).shape;
    int64_t batch = q[0], heads = q[1], seq = q[2], headDim = q[3], kvHeads = cache[2], context = cache[3];
    int64_t layer = op_.intAttr("layer"), group = heads / kvHeads;
    double scale = op_.floatAttr("scale");
    const int32_t *positions = tokenIds(3);
    for (int64_t b = 0; b < batch; ++b) cachePosition(positions, b, seq - 1, context);  // checked before the threads
    pool_.parallelFor(batch * heads * seq, 1, [&](int64_t begin, int64_t end) {
      std::vector<double> scores(static_cast<size_t>(context)), accumulator(static_cast<size_t>(headDim));
      for (int64_t row = begin; row < end; ++row) {
        int64_t s = row % seq, head = (row / seq) % heads, b = row / (seq * heads);
        int64_t offset = ((layer * batch + b) * kvHeads + head / group) * context * headDim;
        attendRow(floats(0) + row * headDim, floats(1) + offset, floats(2) + offset, positions[b] + s + 1, headDim,
                  headDim, scale, scores, accumulator, out(0).data + row * headDim);
      }
    });
  }


  // repeat_kv(x[B, Hkv, S, D]) (repeats r) -> [B, Hkv*r, S, D], out[:, h] = x[:, h / r]
  void repeatKv() {
    int64_t repeats = op_.intAttr("repeats");
    const Shape &outShape = out(0).shape;
    int64_t headElements = in(0).shape[2] * in(0).shape[3], kvHeads = in(0).shape[1];
    const float *x = floats(0);
    float *result = out(0).data;
    forEachRow(outShape[0] * outShape[1], headElements, [&](int64_t outHead) {
      int64_t b = outHead / outShape[1], h = outHead % outShape[1];
      std::memcpy(result + outHead * headElements, x + (b * kvHeads + h / repeats) * headElements,
                  size_t(headElements) * 4);
    });
  }

  // batch_matmul(a[..., M, K], b[..., N, K] or [..., K, N]) (transpose_b) -> [..., M, N]
  void batchMatmul() {
    bool transposedB = op_.intAttr("transpose_b") != 0;
    const Shape &aShape = in(0).shape;
    size_t rank = aShape.size();
    int64_t M = aShape[rank - 2], K = aShape[rank - 1], N = out(0).shape.back();
    int64_t batch = Tensor::elementsOf(aShape) / (M * K);
    const float *b = floats(1);
    std::vector<float> bTransposed;
    if (!transposedB) { // the GEMM wants b as [N, K]
      bTransposed.resize(size_t(batch * N * K));
      forEachRow(batch * N, K, [&](int64_t row) {
        int64_t problem = row / N, n = row % N;
        for (int64_t k = 0; k < K; ++k)
          bTransposed[size_t(row * K + k)] = b[problem * K * N + k * N + n];
      });
      b = bTransposed.data();
    }
    matmulTransposedB(floats(0), b, out(0).data, batch, M, N, K, N * K, pool_);
  }

  // causal_mask(x[..., R, C]) -> -inf where col > row + (C - R); C == R gives col > row.
  void causalMask() { maskAboveDiagonal(-std::numeric_limits<float>::infinity()); }

  // causal_mask_grad(dy): nothing flows back through a masked score.
  void causalMaskGrad() { maskAboveDiagonal(0.0f); }

  void maskAboveDiagonal(float masked) {
    const Shape &shape = in(0).shape;
    int64_t rows = shape[shape.size() - 2], cols = shape.back();
    const float *x = floats(0);
    float *result = out(0).data;
    forEachRow(Tensor::elementsOf(shape) / cols, cols, [&](int64_t line) {
      int64_t row = line % rows;
      for (int64_t col = 0; col < cols; ++col)
        result[line * cols + col] = col > row + (cols - rows) ? masked : x[line * cols + col];
    });
  }

  // softmax(x) over the last dim: max-subtracted, fp64 sum.
  void softmax() {
    int64_t cols = in(0).shape.back();
    const float *x = floats(0);
    float *result = out(0).data;
    forEachRow(Tensor::elementsOf(in(0).shape) / cols, cols, [&](int64_t row) {
      const float *xRow = x + row * cols;
      float *outRow = result + row * cols;
      double maximum = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < cols; ++i) maximum = std::max(maximum, double(xRow[i]));
      std::vector<double> exps(static_cast<size_t>(cols));
      double sum = 0;
      for (int64_t i = 0; i < cols; ++i)
        sum += exps[size_t(i)] = std::exp(double(xRow[i]) - maximum);
      for (int64_t i = 0; i < cols; ++i) outRow[i] = float(exps[size_t(i)] / sum);
    });
  }

  // Every op of runtime/ElementwiseOps.def: operands of one shape, fp64 arithmetic.
  void elementwise() {
    const ElementwiseOp &op = *findElementwiseOp(op_.kind);
    double attr = std::string(op.attribute) == "none" ? 0.0 : op_.floatAttr(op.attribute);
    const float *a = floats(0), *b = op.operands == 2 ? floats(1) : nullptr;
    float *result = out(0).data;
    forEachElement(Tensor::elementsOf(in(0).shape), [&](int64_t i) {
      result[i] = float(op.apply(double(a[i]), b ? double(b[i]) : 0.0, attr));
    });
  }

  // split(x[..., N]) (sizes) -> one result per size, slicing the last dim in order.
  void split() {
    Shape sizes = op_.intsAttr("sizes");
    int64_t width = in(0).shape.back();
    const float *x = floats(0);
    forEachRow(Tensor::elementsOf(in(0).shape) / width, width, [&](int64_t row) {
      int64_t start = 0;
      for (size_t r = 0; r < sizes.size(); ++r) {
        std::memcpy(out(r).data + row * sizes[r], x + row * width + start, size_t(sizes[r]) * 4);
        start += sizes[r];
      }
    });
  }

  // flash_attention(q[B,H,Sq,D], k[B,Hkv,Sk,D], v[B,Hkv,Sk,Dv]) (scale, causal)
  // -> [B,H,Sq,Dv]; query head h reads kv head h / (H / Hkv). One query row at a time:
  // no Sq x Sk buffer.
  void flashAttention() {
    const Shape &qShape = in(0).shape, &kShape = in(1).shape, &vShape = in(2).shape;
    int64_t batch = qShape[0], heads = qShape[1], querySeq = qShape[2], headDim = qShape[3];
    int64_t kvHeads = kShape[1], keySeq = kShape[2], valueDim = vShape[3];
    double scaleFactor = op_.floatAttr("scale");
    bool causal = op_.intAttr("causal") != 0;
    int64_t group = heads / kvHeads;
    const float *q = floats(0), *k = floats(1), *v = floats(2);
    float *result = out(0).data;
    float *logSumExp = results_.size() > 1 ? out(1).data : nullptr;  // with_lse: what the backward reads
    pool_.parallelFor(
        batch * heads * querySeq, std::max<int64_t>(1, kElementGrain / (keySeq * headDim + 1)),
        [&](int64_t begin, int64_t end) {
          std::vector<double> scores(static_cast<size_t>(keySeq));
          std::vector<double> accumulator(static_cast<size_t>(valueDim));
          for (int64_t row = begin; row < end; ++row) {
            int64_t i = row % querySeq, head = (row / querySeq) % heads,
                    b = row / (querySeq * heads);
            int64_t kvHead = b * kvHeads + head / group;
            const float *qRow = q + row * headDim;
            const float *keys = k + kvHead * keySeq * headDim;
            const float *values = v + kvHead * keySeq * valueDim;
            // With causal masking key j is visible when j <= i + (Sk - Sq): at least one,
            // as the rules require Sk >= Sq.
            int64_t visible = causal ? std::min(keySeq, i + (keySeq - querySeq) + 1) : keySeq;
            double lse = attendRow(qRow, keys, values, visible, headDim, valueDim, scaleFactor, scores, accumulator,
                                   result + row * valueDim);
            if (logSumExp) logSumExp[row] = float(lse);
          }
        });
  }

  // log(sum(exp(row))), max-subtracted, in fp64.
  static double logSumExp(const float *row, int64_t count) {
    double maximum = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < count; ++i) maximum = std::max(maximum, double(row[i]));
    double sum = 0;
    for (int64_t i = 0; i < count; ++i) sum += std::exp(double(row[i]) - maximum);
    return maximum + std::log(sum);
  }

  // The next token's id for row (b, s) of a [B, S, ...] tensor, checked against `vocab`.
  int32_t targetOf(const int32_t *ids, int64_t b, int64_t s, int64_t seq, int64_t vocab) const {
    int32_t target = ids[b * seq + s + 1];
    if (target < 0 || target >= vocab)
      fail(fmt::format("target id {} at position {} is out of range for vocab {}", target, b * seq + s + 1,
                       vocab));
    return target;
  }

  // cross_entropy(logits[B,S,V], ids[B,S]) -> 0-d: mean over b and s < S-1 of
  // logsumexp(logits[b,s,:]) - logits[b,s,ids[b,s+1]]. NaN when S == 1 (no targets).
  void crossEntropy() { crossEntropyInto(out(0).data[0]); }

  void crossEntropyInto(float &loss) {
    const Shape &shape = in(0).shape;
    int64_t batch = shape[0], seq = shape[1], vocab = shape[2];
    const float *logits = floats(0);
    const int32_t *ids = tokenIds(1);
    int64_t predictions = batch * (seq - 1);
    std::vector<double> losses(size_t(std::max<int64_t>(0, predictions)));
    forEachRow(predictions, vocab, [&](int64_t index) {
      int64_t b = index / (seq - 1), s = index % (seq - 1);
      const float *row = logits + (b * seq + s) * vocab;
      int32_t target = targetOf(ids, b, s, seq, vocab);
      losses[size_t(index)] = logSumExp(row, vocab) - double(row[target]);
    });
    // Summed in order, so the loss does not depend on the thread count.
    double total = 0;
    for (double loss : losses) total += loss;
    loss = predictions > 0 ? float(total / double(predictions)) : std::numeric_limits<float>::quiet_NaN();
  }

  // ---- the backward: each op's VJP (their derivations are in compiler/TlGradOps.td) -

  // A [rows, cols] matrix transposed into a new buffer (the GEMM takes Bᵀ), in square
  // tiles so both sides are read and written a cache line at a time.
  std::vector<float> transposed(const float *matrix, int64_t rows, int64_t cols) {
    constexpr int64_t kTile = 32;
    std::vector<float> result(size_t(rows * cols));
    int64_t tileRows = (rows + kTile - 1) / kTile, tileCols = (cols + kTile - 1) / kTile;
    forEachRow(tileRows * tileCols, kTile * kTile, [&](int64_t tile) {
      int64_t row0 = tile / tileCols * kTile, col0 = tile % tileCols * kTile;
      for (int64_t col = col0; col < std::min(cols, col0 + kTile); ++col)
        for (int64_t row = row0; row < std::min(rows, row0 + kTile); ++row)
          result[size_t(col * rows + row)] = matrix[row * cols + col];
    });
    return result;
  }

  // embedding_grad(dy[B, S, H], ids[B, S]) (rows) -> [rows, H]: each token's row of dy
  // added into the row its id reads, in token order (fp64 sums).
  void embeddingGrad() {
    const float *grad = floats(0);
    const int32_t *ids = tokenIds(1);
    int64_t rows = op_.intAttr("rows"), hidden = in(0).shape[2], tokens = in(0).shape[0] * in(0).shape[1];
    for (int64_t token = 0; token < tokens; ++token)
      if (ids[token] < 0 || ids[token] >= rows)
        fail(fmt::format("token id {} at position {} is out of range for {} rows", ids[token], token, rows));
    std::vector<double> sums(size_t(rows * hidden), 0.0);
    // Columns split across the pool; each column sums its tokens in order.
    pool_.parallelFor(hidden, std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, tokens)),
                      [&](int64_t begin, int64_t end) {
                        for (int64_t token = 0; token < tokens; ++token)
                          for (int64_t i = begin; i < end; ++i)
                            sums[size_t(ids[token] * hidden + i)] += grad[token * hidden + i];
                      });
    float *result = out(0).data;
    forEachElement(rows * hidden, [&](int64_t i) { result[i] = float(sums[size_t(i)]); });
  }

  // rmsnorm_grad(x, gain, dy [, residual]) (eps [, with_normalized]) -> (residual + dx,
  // dgain [, x r gain as rmsnorm computes it]), the inverse RMS r recomputed per row.
  void rmsnormGrad() {
    int64_t hidden = in(0).shape.back(), rows = Tensor::elementsOf(in(0).shape) / hidden;
    double eps = op_.floatAttr("eps");
    const float *x = floats(0), *gain = floats(1), *grad = floats(2);
    const float *residual = op_.operands.size() > 3 ? floats(3) : nullptr;
    float *inputGrad = out(0).data, *gainGrad = out(1).data;
    float *normalized = results_.size() > 2 ? out(2).data : nullptr;
    std::vector<double> inverseRms(static_cast<size_t>(rows));
    forEachRow(rows, hidden, [&](int64_t row) {
      const float *xRow = x + row * hidden, *gradRow = grad + row * hidden;
      double sumOfSquares = 0, projection = 0;
      for (int64_t i = 0; i < hidden; ++i) sumOfSquares += double(xRow[i]) * double(xRow[i]);
      double inverse = 1.0 / std::sqrt(sumOfSquares / double(hidden) + eps);
      inverseRms[size_t(row)] = inverse;
      // mean over the row of (g * dy) * x̂
      for (int64_t i = 0; i < hidden; ++i) projection += double(gain[i]) * gradRow[i] * xRow[i] * inverse;
      projection /= double(hidden);
      for (int64_t i = 0; i < hidden; ++i)
        inputGrad[row * hidden + i] =
            float((residual ? double(residual[row * hidden + i]) : 0.0) +
                  inverse * (double(gain[i]) * gradRow[i] - double(xRow[i]) * inverse * projection));
      if (normalized)
        for (int64_t i = 0; i < hidden; ++i)
          normalized[row * hidden + i] = float(double(xRow[i]) * inverse * double(gain[i]));
    });
    // dgain[i] = sum over rows of dy * x̂, one column per task, rows in order.
    pool_.parallelFor(hidden, std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, rows)),
                      [&](int64_t begin, int64_t end) {
                        for (int64_t i = begin; i < end; ++i) {
                          double sum = 0;
                          for (int64_t row = 0; row < rows; ++row)
                            sum += double(grad[row * hidden + i]) * x[row * hidden + i] * inverseRms[size_t(row)];
                          gainGrad[i] = float(sum);
                        }
                      });
  }

  // linear_grad_input(dy[M, N], w[N, K]) -> [M, K] = dy · w
  void linearGradInput() {
    int64_t N = in(1).shape[0], K = in(1).shape[1], M = Tensor::elementsOf(in(0).shape) / N;
    std::vector<float> weightT = transposed(floats(1), N, K);
    matmulTransposedB(floats(0), weightT.data(), out(0).data, 1, M, K, N, 0, pool_);
  }

  // linear_grad_weight(dy[M, N], x[M, K]) -> [N, K] = dyᵀ · x, summed over the M tokens
  void linearGradWeight() {
    int64_t N = in(0).shape.back(), K = in(1).shape.back(), M = Tensor::elementsOf(in(0).shape) / N;
    std::vector<float> gradT = transposed(floats(0), M, N), inputT = transposed(floats(1), M, K);
    matmulTransposedB(gradT.data(), inputT.data(), out(0).data, 1, N, K, M, 0, pool_);
  }

  // repeat_kv_grad(dy[B, Hkv*r, S, D]) (repeats r) -> [B, Hkv, S, D]: each kv head the
  // sum of the r query heads that read it.
  void repeatKvGrad() {
    int64_t repeats = op_.intAttr("repeats");
    const Shape &outShape = out(0).shape;
    int64_t headElements = outShape[2] * outShape[3];
    const float *grad = floats(0);
    float *result = out(0).data;
    forEachRow(outShape[0] * outShape[1], headElements * repeats, [&](int64_t kvHead) {
      const float *group = grad + kvHead * repeats * headElements;  // heads h*r .. h*r + r-1
      for (int64_t i = 0; i < headElements; ++i) {
        double sum = 0;
        for (int64_t r = 0; r < repeats; ++r) sum += group[r * headElements + i];
        result[kvHead * headElements + i] = float(sum);
      }
    });
  }

  // softmax_grad(y, dy) -> y * (dy - sum(dy * y)) per row of the last dim
  void softmaxGrad() {
    int64_t cols = in(0).shape.back();
    const float *y = floats(0), *grad = floats(1);
    float *result = out(0).data;
    forEachRow(Tensor::elementsOf(in(0).shape) / cols, cols, [&](int64_t row) {
      const float *yRow = y + row * cols, *gradRow = grad + row * cols;
      double dot = 0;
      for (int64_t i = 0; i < cols; ++i) dot += double(yRow[i]) * gradRow[i];
      for (int64_t i = 0; i < cols; ++i) result[row * cols + i] = float(yRow[i] * (gradRow[i] - dot));
    });
  }

  // cross_entropy_grad(logits[B,S,V], ids[B,S]) -> [B,S,V]: (softmax(row) - onehot(next
  // id)) / (B * (S-1)) for s < S-1, zeros for the last position (it predicts nothing);
  // with_loss: and cross_entropy's loss of the same logits.
  void crossEntropyGrad() {
    if (results_.size() > 1) crossEntropyInto(out(1).data[0]);
    const Shape &shape = in(0).shape;
    int64_t seq = shape[1], vocab = shape[2];
    const float *logits = floats(0);
    const int32_t *ids = tokenIds(1);
    double predictions = double(shape[0] * (seq - 1));
    float *result = out(0).data;
    forEachRow(shape[0] * seq, vocab, [&](int64_t index) {
      int64_t b = index / seq, s = index % seq;
      const float *row = logits + index * vocab;
      float *gradRow = result + index * vocab;
      if (s == seq - 1) {
        std::fill(gradRow, gradRow + vocab, 0.0f);
        return;
      }
      int32_t target = targetOf(ids, b, s, seq, vocab);
      double normalizer = logSumExp(row, vocab);
      for (int64_t i = 0; i < vocab; ++i)
        gradRow[i] = float((std::exp(double(row[i]) - normalizer) - double(i == target)) / predictions);
    });
  }

  // flash_attention_grad(q, k, v, o, lse, do) (scale, causal) -> (dq, dk, dv). One task per
  // kv head: it owns that head's dk and dv and walks the query heads of its group, row by
  // row, rebuilding p_ij = exp(scale q_i·k_j - lse_i); no Sq x Sk buffer.
  void flashAttentionGrad() {
    const Shape &qShape = in(0).shape, &kShape = in(1).shape, &vShape = in(2).shape;
    int64_t batch = qShape[0], heads = qShape[1], querySeq = qShape[2], headDim = qShape[3];
    int64_t kvHeads = kShape[1], keySeq = kShape[2], valueDim = vShape[3], group = heads / kvHeads;
    double scaleFactor = op_.floatAttr("scale");
    bool causal = op_.intAttr("causal") != 0;
    const float *q = floats(0), *k = floats(1), *v = floats(2), *o = floats(3), *lse = floats(4), *dO = floats(5);
    float *dq = out(0).data, *dk = out(1).data, *dv = out(2).data;
    pool_.parallelFor(batch * kvHeads, 1, [&](int64_t begin, int64_t end) {
      std::vector<double> keyGrad(size_t(keySeq * headDim)), valueGrad(size_t(keySeq * valueDim));
      std::vector<double> queryGrad(static_cast<size_t>(headDim));
      for (int64_t kvIndex = begin; kvIndex < end; ++kvIndex) {
        int64_t b = kvIndex / kvHeads;
        const float *keys = k + kvIndex * keySeq * headDim, *values = v + kvIndex * keySeq * valueDim;
        std::fill(keyGrad.begin(), keyGrad.end(), 0.0);
        std::fill(valueGrad.begin(), valueGrad.end(), 0.0);
        for (int64_t head = (kvIndex % kvHeads) * group; head < (kvIndex % kvHeads + 1) * group; ++head)
          for (int64_t i = 0; i < querySeq; ++i) {
            int64_t row = (b * heads + head) * querySeq + i;
            const float *qRow = q + row * headDim, *oRow = o + row * valueDim, *dORow = dO + row * valueDim;
            double rowDot = 0;  // D_i = dO_i · O_i
            for (int64_t d = 0; d < valueDim; ++d) rowDot += double(dORow[d]) * oRow[d];
            std::fill(queryGrad.begin(), queryGrad.end(), 0.0);
            int64_t visible = causal ? std::min(keySeq, i + (keySeq - querySeq) + 1) : keySeq;
            for (int64_t j = 0; j < visible; ++j) {
              double score = 0, valueDot = 0;
              for (int64_t d = 0; d < headDim; ++d) score += double(qRow[d]) * keys[j * headDim + d];
              for (int64_t d = 0; d < valueDim; ++d) valueDot += double(dORow[d]) * values[j * valueDim + d];
              double p = std::exp(score * scaleFactor - double(lse[row]));
              double scoreGrad = p * (valueDot - rowDot) * scaleFactor;
              for (int64_t d = 0; d < valueDim; ++d) valueGrad[size_t(j * valueDim + d)] += p * dORow[d];
              for (int64_t d = 0; d < headDim; ++d) {
                queryGrad[size_t(d)] += scoreGrad * keys[j * headDim + d];
                keyGrad[size_t(j * headDim + d)] += scoreGrad * qRow[d];
              }
            }
            for (int64_t d = 0; d < headDim; ++d) dq[row * headDim + d] = float(queryGrad[size_t(d)]);
          }
        for (int64_t i = 0; i < keySeq * headDim; ++i) dk[kvIndex * keySeq * headDim + i] = float(keyGrad[size_t(i)]);
        for (int64_t i = 0; i < keySeq * valueDim; ++i)
          dv[kvIndex * keySeq * valueDim + i] = float(valueGrad[size_t(i)]);
      }
    });
  }

  // concat_grad(dy[R, ...]) (sizes) -> pieces of the given rows, in order: row-major, so
  // each piece is one contiguous run.
  void concatGrad() {
    const float *source = floats(0);
    for (size_t r = 0; r < results_.size(); ++r) {
      int64_t count = Tensor::elementsOf(out(r).shape);
      std::memcpy(out(r).data, source, size_t(count) * 4);
      source += count;
    }
  }

  // split_grad(d0[..., N0], d1[..., N1], ...) -> [..., N0 + N1 + ...], row by row
  void splitGrad() {
    int64_t width = out(0).shape.back(), rows = Tensor::elementsOf(out(0).shape) / width;
    float *result = out(0).data;
    forEachRow(rows, width, [&](int64_t row) {
      int64_t start = 0;
      for (size_t i = 0; i < operands_.size(); ++i) {
        int64_t pieceWidth = in(i).shape.back();
        std::memcpy(result + row * width + start, floats(i) + row * pieceWidth, size_t(pieceWidth) * 4);
        start += pieceWidth;
      }
    });
  }

  // global_norm(x0, x1, ...) -> sqrt of the sum of every element's square. Partial sums
  // over fixed chunks, added in order: the same result on any number of threads.
  void globalNorm() {
    double total = 0;
    for (size_t i = 0; i < operands_.size(); ++i) {
      const float *x = floats(i);
      int64_t count = Tensor::elementsOf(in(i).shape), chunks = (count + kElementGrain - 1) / kElementGrain;
      std::vector<double> partial(size_t(chunks), 0.0);
      pool_.parallelFor(chunks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t chunk = begin; chunk < end; ++chunk)
          for (int64_t e = chunk * kElementGrain; e < std::min(count, (chunk + 1) * kElementGrain); ++e)
            partial[size_t(chunk)] += double(x[e]) * x[e];
      });
      for (double sum : partial) total += sum;
    }
    out(0).data[0] = float(std::sqrt(total));
  }

  // adamw(grad[, grad_norm]): one AdamW step of the parameter's state (PyTorch's
  // torch.optim.AdamW; see tl.adamw in compiler/TlGradOps.td), in fp64 per element.
  void adamw() {
    if (!state_)
      fail("updates a parameter's optimizer state, which only a training step holds (Backend::trainStep)");
    int64_t count = Tensor::elementsOf(in(0).shape);
    if (int64_t(state_->weight.size()) != count || state_->firstMoment.size() != state_->weight.size() ||
        state_->secondMoment.size() != state_->weight.size())
      fail(fmt::format("the gradient has {} elements but the parameter's state holds {}", count,
                       state_->weight.size()));
    if (step_ < 1) fail(fmt::format("optimizer step {} must be 1 or more", step_));
    double lr = op_.floatAttr("lr"), beta1 = op_.floatAttr("beta1"), beta2 = op_.floatAttr("beta2");
    double eps = op_.floatAttr("eps"), decay = op_.floatAttr("weight_decay");
    double clip = 1.0;  // clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1
    if (operands_.size() == 2) clip = std::min(1.0, op_.floatAttr("max_grad_norm") / (double(floats(1)[0]) + 1e-6));
    double firstCorrection = 1.0 - std::pow(beta1, double(step_));
    double secondCorrection = 1.0 - std::pow(beta2, double(step_));
    const float *grad = floats(0);
    float *w = state_->weight.data(), *m = state_->firstMoment.data(), *v = state_->secondMoment.data();
    forEachElement(count, [&](int64_t i) {
      double g = double(grad[i]) * clip;
      double first = beta1 * m[i] + (1.0 - beta1) * g, second = beta2 * v[i] + (1.0 - beta2) * g * g;
      m[i] = float(first);
      v[i] = float(second);
      double decayed = double(w[i]) * (1.0 - lr * decay);
      w[i] = float(decayed - lr * (first / firstCorrection) / (std::sqrt(second / secondCorrection) + eps));
    });
  }

  // all_reduce(x0, x1, ...): the mean over the ranks of a world of one, each operand
  // itself. The backend exchanges the results with the other ranks (CpuBackend.cpp).
  void allReduce() {
    for (size_t i = 0; i < operands_.size(); ++i)
      if (out(i).data != floats(i))
        std::memcpy(out(i).data, floats(i), size_t(Tensor::elementsOf(in(i).shape)) * sizeof(float));
  }

  const OpRecord &op_;
  const std::vector<OpInput> &operands_;
  const std::vector<OpOutput> &results_;
  ThreadPool &pool_;
  const std::string &kernel_;
  ParameterState *state_;  // adamw: the parameter it updates
  int64_t step_;           // adamw: the optimizer step, from 1
};

} // namespace

void runOp(const OpRecord &op, const std::vector<OpInput> &operands,
           const std::vector<OpOutput> &results, ThreadPool &pool, const std::string &kernelName) {
  OpRunner(op, operands, results, pool, kernelName).run();
}

void runOptimizerOp(const OpRecord &op, const std::vector<OpInput> &operands, ParameterState &state,
                    int64_t step, ThreadPool &pool, const std::string &kernelName) {
  OpRunner(op, operands, {}, pool, kernelName, &state, step).run();
}

} // namespace tlc::cpu
