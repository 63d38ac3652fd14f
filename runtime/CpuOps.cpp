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
#include <unordered_map>

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
           const std::vector<OpOutput> &results, ThreadPool &pool, const std::string &kernel)
      : op_(op), operands_(operands), results_(results), pool_(pool), kernel_(kernel) {}

  void run() {
    using Method = void (OpRunner::*)();
    static const std::unordered_map<std::string, Method> methods = {
        {"embedding", &OpRunner::embedding},
        {"rmsnorm", &OpRunner::rmsnorm},
        {"linear", &OpRunner::linear},
        {"transpose", &OpRunner::transpose},
        {"split_heads", &OpRunner::copyReshaped},
        {"merge_heads", &OpRunner::copyReshaped},
        {"concat", &OpRunner::concat},
        {"rope", &OpRunner::rope},
        {"repeat_kv", &OpRunner::repeatKv},
        {"batch_matmul", &OpRunner::batchMatmul},
        {"causal_mask", &OpRunner::causalMask},
        {"softmax", &OpRunner::softmax},
        {"split", &OpRunner::split},
        {"flash_attention", &OpRunner::flashAttention},
        {"cross_entropy", &OpRunner::crossEntropy},
    };
    auto found = methods.find(op_.op);
    const ElementwiseOp *elementwiseOp = findElementwiseOp(op_.op);
    if (found == methods.end() && !elementwiseOp)
      throw Error(fmt::format("cpu backend: unknown op '{}' in kernel '{}'", op_.op, kernel_));
    if (operands_.size() != op_.operands.size() || results_.size() != op_.results.size())
      fail(fmt::format("given {} operands and {} results, but the op record lists {} and {}",
                       operands_.size(), results_.size(), op_.operands.size(), op_.results.size()));
    for (const OpInput &operand : operands_)
      if (!operand.data && !operand.ids) fail("an operand has no data");
    for (const OpOutput &result : results_)
      if (!result.data) fail("a result has no buffer");
    checkShapes();
    if (elementwiseOp) elementwise(*elementwiseOp);
    else (this->*found->second)();
  }

private:
  // ---- checks and attributes ------------------------------------------------------

  [[noreturn]] void fail(const std::string &message) const {
    throw Error(fmt::format("cpu backend: op '{}' in kernel '{}': {}", op_.op, kernel_, message));
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

  // rmsnorm(x[..., H], gain[H]) -> x / sqrt(mean(x^2) + eps) * gain
  void rmsnorm() {
    int64_t hidden = in(0).shape.back();
    double eps = op_.floatAttr("eps");
    const float *x = floats(0), *gain = floats(1);
    float *result = out(0).data;
    forEachRow(Tensor::elementsOf(in(0).shape) / hidden, hidden, [&](int64_t row) {
      const float *xRow = x + row * hidden;
      double sumOfSquares = 0;
      for (int64_t i = 0; i < hidden; ++i) sumOfSquares += double(xRow[i]) * double(xRow[i]);
      double inverseRms = 1.0 / std::sqrt(sumOfSquares / double(hidden) + eps);
      for (int64_t i = 0; i < hidden; ++i)
        result[row * hidden + i] = float(double(xRow[i]) * inverseRms * double(gain[i]));
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
  void rope() {
    int64_t batch = in(0).shape[0], seq = in(0).shape[1], heads = in(0).shape[2],
            headDim = in(0).shape[3];
    double theta = op_.floatAttr("theta");
    bool adjacent = op_.stringAttr("style") == "adjacent";
    int64_t pairs = headDim / 2;
    std::vector<double> cosines(size_t(seq * pairs)), sines(size_t(seq * pairs));
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t i = 0; i < pairs; ++i) {
        double angle = double(s) * std::pow(theta, -2.0 * double(i) / double(headDim));
        cosines[size_t(s * pairs + i)] = std::cos(angle);
        sines[size_t(s * pairs + i)] = std::sin(angle);
      }
    const float *x = floats(0);
    float *result = out(0).data;
    forEachRow(batch * seq, heads * headDim, [&](int64_t token) {
      int64_t s = token % seq;
      for (int64_t h = 0; h < heads; ++h) {
        int64_t base = (token * heads + h) * headDim;
        for (int64_t i = 0; i < pairs; ++i) {
          int64_t first = base + (adjacent ? 2 * i : i);
          int64_t second = base + (adjacent ? 2 * i + 1 : i + pairs);
          double a = x[first], b = x[second];
          double c = cosines[size_t(s * pairs + i)], sn = sines[size_t(s * pairs + i)];
          result[first] = float(a * c - b * sn);
          result[second] = float(a * sn + b * c);
        }
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
  void causalMask() {
    const Shape &shape = in(0).shape;
    int64_t rows = shape[shape.size() - 2], cols = shape.back();
    const float *x = floats(0);
    float *result = out(0).data;
    forEachRow(Tensor::elementsOf(shape) / cols, cols, [&](int64_t line) {
      int64_t row = line % rows;
      for (int64_t col = 0; col < cols; ++col)
        result[line * cols + col] = col > row + (cols - rows)
                                        ? -std::numeric_limits<float>::infinity()
                                        : x[line * cols + col];
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
  void elementwise(const ElementwiseOp &op) {
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
            double maximum = -std::numeric_limits<double>::infinity();
            for (int64_t j = 0; j < visible; ++j) {
              double dot = 0;
              for (int64_t d = 0; d < headDim; ++d)
                dot += double(qRow[d]) * double(keys[j * headDim + d]);
              scores[size_t(j)] = dot * scaleFactor;
              maximum = std::max(maximum, scores[size_t(j)]);
            }
            std::fill(accumulator.begin(), accumulator.end(), 0.0);
            double sum = 0;
            for (int64_t j = 0; j < visible; ++j) {
              double weight = std::exp(scores[size_t(j)] - maximum);
              sum += weight;
              for (int64_t d = 0; d < valueDim; ++d)
                accumulator[size_t(d)] += weight * double(values[j * valueDim + d]);
            }
            for (int64_t d = 0; d < valueDim; ++d)
              result[row * valueDim + d] = float(accumulator[size_t(d)] / sum);
          }
        });
  }

  // cross_entropy(logits[B,S,V], ids[B,S]) -> 0-d: mean over b and s < S-1 of
  // logsumexp(logits[b,s,:]) - logits[b,s,ids[b,s+1]]. NaN when S == 1 (no targets).
  void crossEntropy() {
    const Shape &shape = in(0).shape;
    int64_t batch = shape[0], seq = shape[1], vocab = shape[2];
    const float *logits = floats(0);
    const int32_t *ids = tokenIds(1);
    int64_t predictions = batch * (seq - 1);
    std::vector<double> losses(size_t(std::max<int64_t>(0, predictions)));
    forEachRow(predictions, vocab, [&](int64_t index) {
      int64_t b = index / (seq - 1), s = index % (seq - 1);
      const float *row = logits + (b * seq + s) * vocab;
      int32_t target = ids[b * seq + s + 1];
      if (target < 0 || target >= vocab)
        fail(fmt::format("target id {} at position {} is out of range for vocab {}", target,
                         b * seq + s + 1, vocab));
      double maximum = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < vocab; ++i) maximum = std::max(maximum, double(row[i]));
      double sum = 0;
      for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(row[i]) - maximum);
      losses[size_t(index)] = maximum + std::log(sum) - double(row[target]);
    });
    // Summed in order, so the loss does not depend on the thread count.
    double total = 0;
    for (double loss : losses) total += loss;
    out(0).data[0] = predictions > 0 ? float(total / double(predictions))
                                     : std::numeric_limits<float>::quiet_NaN();
  }

  const OpRecord &op_;
  const std::vector<OpInput> &operands_;
  const std::vector<OpOutput> &results_;
  ThreadPool &pool_;
  const std::string &kernel_;
};

} // namespace

void runOp(const OpRecord &op, const std::vector<OpInput> &operands,
           const std::vector<OpOutput> &results, ThreadPool &pool, const std::string &kernelName) {
  OpRunner(op, operands, results, pool, kernelName).run();
}

} // namespace tlc::cpu
