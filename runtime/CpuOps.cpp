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
#include "runtime/Tensor.h"

namespace tlc::cpu {
namespace {

using Shape = std::vector<int64_t>;

int64_t elementCount(const Shape &shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

Shape withLast(Shape shape, int64_t last) {
  shape.back() = last;
  return shape;
}

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
        {"split_heads", &OpRunner::splitHeads},
        {"merge_heads", &OpRunner::mergeHeads},
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
    if (elementwiseOp) elementwise(*elementwiseOp);
    else (this->*found->second)();
  }

private:
  // ---- checks and attributes ------------------------------------------------------

  [[noreturn]] void fail(const std::string &message) const {
    throw Error(fmt::format("cpu backend: op '{}' in kernel '{}': {}", op_.op, kernel_, message));
  }

  void expectArity(size_t operands, size_t results) const {
    if (operands_.size() != operands || results_.size() != results)
      fail(fmt::format("expects {} operand{} and {} result{}, got {} and {}", operands,
                       operands == 1 ? "" : "s", results, results == 1 ? "" : "s", operands_.size(),
                       results_.size()));
  }

  const OpInput &in(size_t index) const { return operands_[index]; }
  const OpOutput &out(size_t index) const { return results_[index]; }

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

  void expectRank(size_t index, size_t rank, const char *layout) const {
    if (in(index).shape.size() != rank)
      fail(fmt::format("operand {} has shape {}, expected rank {} ({})", index,
                       shapeString(in(index).shape), rank, layout));
  }

  void expectMinRank(size_t index, size_t rank) const {
    if (in(index).shape.size() < rank)
      fail(fmt::format("operand {} has shape {}, expected rank {} or more", index,
                       shapeString(in(index).shape), rank));
  }

  void expectResultShape(size_t index, const Shape &expected) const {
    if (out(index).shape != expected)
      fail(fmt::format("result {} has shape {}, expected {}", index, shapeString(out(index).shape),
                       shapeString(expected)));
  }

  void expectSameShape(size_t a, size_t b) const {
    if (in(a).shape != in(b).shape)
      fail(fmt::format("operands {} and {} have shapes {} and {}, expected equal shapes", a, b,
                       shapeString(in(a).shape), shapeString(in(b).shape)));
  }

  template <typename F> auto withContext(F get) const {
    try {
      return get();
    } catch (const Error &error) {
      throw Error(fmt::format("cpu backend: kernel '{}': {}", kernel_, error.what()));
    }
  }
  int64_t intAttr(const char *key) const {
    return withContext([&] { return op_.intAttr(key); });
  }
  double floatAttr(const char *key) const {
    return withContext([&] { return op_.floatAttr(key); });
  }
  std::string stringAttr(const char *key) const {
    return withContext([&] { return op_.stringAttr(key); });
  }
  Shape intsAttr(const char *key) const {
    return withContext([&] { return op_.intsAttr(key); });
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

  // ---- ops ------------------------------------------------------------------------

  // embedding(table[V,H], ids[...]) -> [..., H]: out[t, :] = table[ids[t], :]
  void embedding() {
    expectArity(2, 1);
    expectRank(0, 2, "[vocab, hidden]");
    const float *table = floats(0);
    const int32_t *ids = tokenIds(1);
    int64_t rows = in(0).shape[0], hidden = in(0).shape[1];
    Shape expected = in(1).shape;
    expected.push_back(hidden);
    expectResultShape(0, expected);
    float *result = out(0).data;
    forEachRow(elementCount(in(1).shape), hidden, [&](int64_t token) {
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
    expectArity(2, 1);
    expectMinRank(0, 1);
    int64_t hidden = in(0).shape.back();
    if (in(1).shape != Shape{hidden})
      fail(fmt::format("gain has shape {}, expected {}", shapeString(in(1).shape), hidden));
    expectResultShape(0, in(0).shape);
    double eps = floatAttr("eps");
    const float *x = floats(0), *gain = floats(1);
    float *result = out(0).data;
    forEachRow(elementCount(in(0).shape) / hidden, hidden, [&](int64_t row) {
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
    expectArity(2, 1);
    expectMinRank(0, 1);
    expectRank(1, 2, "[out_features, in_features]");
    int64_t K = in(0).shape.back(), N = in(1).shape[0];
    if (in(1).shape[1] != K)
      fail(fmt::format("x has shape {} but w has shape {}: inner dimensions differ",
                       shapeString(in(0).shape), shapeString(in(1).shape)));
    expectResultShape(0, withLast(in(0).shape, N));
    matmulTransposedB(floats(0), floats(1), out(0).data, 1, elementCount(in(0).shape) / K, N, K, 0,
                      pool_);
  }

  // transpose(x) (perm) -> out.shape[i] = x.shape[perm[i]]
  void transpose() {
    expectArity(1, 1);
    Shape perm = intsAttr("perm");
    const Shape &inShape = in(0).shape;
    size_t rank = inShape.size();
    Shape sortedPerm = perm;
    std::sort(sortedPerm.begin(), sortedPerm.end());
    bool isPermutation = perm.size() == rank;
    for (size_t i = 0; isPermutation && i < rank; ++i) isPermutation = sortedPerm[i] == int64_t(i);
    if (!isPermutation)
      fail(fmt::format("perm [{}] is not a permutation of the {} dims of {}", fmt::join(perm, ", "),
                       rank, shapeString(inShape)));
    Shape outShape(rank), inStrides(rank, 1);
    for (size_t i = rank; i-- > 1;) inStrides[i - 1] = inStrides[i] * inShape[i];
    for (size_t i = 0; i < rank; ++i) outShape[i] = inShape[size_t(perm[i])];
    expectResultShape(0, outShape);
    if (rank == 0) {
      out(0).data[0] = floats(0)[0];
      return;
    }
    // Element strides in x for each output dimension; output rows are walked in order.
    Shape strideOfOutDim(rank);
    for (size_t i = 0; i < rank; ++i) strideOfOutDim[i] = inStrides[size_t(perm[i])];
    int64_t rowLength = outShape.back(), innerStride = strideOfOutDim.back();
    const float *x = floats(0);
    float *result = out(0).data;
    forEachRow(elementCount(outShape) / rowLength, rowLength, [&](int64_t row) {
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
  void copyReshaped(const Shape &expected) {
    expectResultShape(0, expected);
    std::memcpy(out(0).data, floats(0), size_t(elementCount(expected)) * 4);
  }

  // split_heads(x[B, S, H*D]) (heads) -> [B, S, H, D]; a View between kernels, a copy here.
  void splitHeads() {
    expectArity(1, 1);
    expectMinRank(0, 1);
    int64_t heads = intAttr("heads"), width = in(0).shape.back();
    if (heads < 1 || width % heads != 0)
      fail(fmt::format("cannot split a last dim of {} into {} heads", width, heads));
    Shape expected = withLast(in(0).shape, heads);
    expected.push_back(width / heads);
    copyReshaped(expected);
  }

  // merge_heads(x[B, S, H, D]) -> [B, S, H*D]
  void mergeHeads() {
    expectArity(1, 1);
    expectMinRank(0, 2);
    Shape expected(in(0).shape.begin(), in(0).shape.end() - 1);
    expected.back() *= in(0).shape.back();
    copyReshaped(expected);
  }

  // concat(x0, x1, ...) along dim 0; the other dims must agree.
  void concat() {
    if (operands_.empty() || results_.size() != 1)
      fail("expects one or more operands and 1 result");
    Shape expected = in(0).shape;
    if (expected.empty()) fail("operands must have rank 1 or more");
    expected[0] = 0;
    for (size_t i = 0; i < operands_.size(); ++i) {
      if (in(i).shape.size() != expected.size() ||
          !std::equal(in(i).shape.begin() + 1, in(i).shape.end(), expected.begin() + 1))
        fail(fmt::format("operand {} has shape {}, which cannot be concatenated with {}", i,
                         shapeString(in(i).shape), shapeString(in(0).shape)));
      expected[0] += in(i).shape[0];
    }
    expectResultShape(0, expected);
    float *destination = out(0).data;
    for (size_t i = 0; i < operands_.size(); ++i) {
      int64_t count = elementCount(in(i).shape);
      std::memcpy(destination, floats(i), size_t(count) * 4);
      destination += count;
    }
  }

  // rope(x[B, S, H, D]) (theta, style): rotates pairs by angle s * theta^(-2i/D).
  void rope() {
    expectArity(1, 1);
    expectRank(0, 4, "[batch, seq, heads, head_dim]");
    expectResultShape(0, in(0).shape);
    int64_t batch = in(0).shape[0], seq = in(0).shape[1], heads = in(0).shape[2],
            headDim = in(0).shape[3];
    if (headDim % 2) fail(fmt::format("head dim {} must be even", headDim));
    double theta = floatAttr("theta");
    std::string style = stringAttr("style");
    bool adjacent = style == "adjacent";
    if (!adjacent && style != "half")
      fail(fmt::format("style '{}' is not 'adjacent' or 'half'", style));
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
    expectArity(1, 1);
    expectRank(0, 4, "[batch, kv_heads, seq, head_dim]");
    int64_t repeats = intAttr("repeats");
    if (repeats < 1) fail(fmt::format("repeats {} must be positive", repeats));
    Shape outShape = in(0).shape;
    outShape[1] *= repeats;
    expectResultShape(0, outShape);
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
    expectArity(2, 1);
    expectMinRank(0, 2);
    expectMinRank(1, 2);
    bool transposedB = intAttr("transpose_b") != 0;
    const Shape &aShape = in(0).shape, &bShape = in(1).shape;
    size_t rank = aShape.size();
    if (bShape.size() != rank || !std::equal(aShape.begin(), aShape.end() - 2, bShape.begin()))
      fail(fmt::format("a {} and b {} must have the same rank and leading dims",
                       shapeString(aShape), shapeString(bShape)));
    int64_t M = aShape[rank - 2], K = aShape[rank - 1];
    int64_t bK = transposedB ? bShape[rank - 1] : bShape[rank - 2];
    int64_t N = transposedB ? bShape[rank - 2] : bShape[rank - 1];
    if (bK != K)
      fail(fmt::format("a {} and b {} (transpose_b = {}) have different inner dimensions",
                       shapeString(aShape), shapeString(bShape), int(transposedB)));
    Shape outShape = aShape;
    outShape[rank - 1] = N;
    expectResultShape(0, outShape);
    int64_t batch = elementCount(aShape) / (M * K);
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
    expectArity(1, 1);
    expectMinRank(0, 2);
    expectResultShape(0, in(0).shape);
    const Shape &shape = in(0).shape;
    int64_t rows = shape[shape.size() - 2], cols = shape.back();
    const float *x = floats(0);
    float *result = out(0).data;
    forEachRow(elementCount(shape) / cols, cols, [&](int64_t line) {
      int64_t row = line % rows;
      for (int64_t col = 0; col < cols; ++col)
        result[line * cols + col] = col > row + (cols - rows)
                                        ? -std::numeric_limits<float>::infinity()
                                        : x[line * cols + col];
    });
  }

  // softmax(x) over the last dim: max-subtracted, fp64 sum.
  void softmax() {
    expectArity(1, 1);
    expectMinRank(0, 1);
    expectResultShape(0, in(0).shape);
    int64_t cols = in(0).shape.back();
    const float *x = floats(0);
    float *result = out(0).data;
    forEachRow(elementCount(in(0).shape) / cols, cols, [&](int64_t row) {
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
    expectArity(size_t(op.operands), 1);
    if (op.operands == 2) expectSameShape(0, 1);
    expectResultShape(0, in(0).shape);
    double attr = std::string(op.attribute) == "none" ? 0.0 : floatAttr(op.attribute);
    const float *a = floats(0), *b = op.operands == 2 ? floats(1) : nullptr;
    float *result = out(0).data;
    forEachElement(elementCount(in(0).shape), [&](int64_t i) {
      result[i] = float(op.apply(double(a[i]), b ? double(b[i]) : 0.0, attr));
    });
  }

  // split(x[..., N]) (sizes) -> one result per size, slicing the last dim in order.
  void split() {
    Shape sizes = intsAttr("sizes");
    expectArity(1, sizes.size());
    expectMinRank(0, 1);
    int64_t width = in(0).shape.back(), total = 0;
    for (int64_t size : sizes) total += size;
    if (total != width)
      fail(fmt::format("sizes [{}] add up to {}, but the last dim of {} is {}",
                       fmt::join(sizes, ", "), total, shapeString(in(0).shape), width));
    for (size_t r = 0; r < sizes.size(); ++r) expectResultShape(r, withLast(in(0).shape, sizes[r]));
    const float *x = floats(0);
    forEachRow(elementCount(in(0).shape) / width, width, [&](int64_t row) {
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
    expectArity(3, 1);
    expectRank(0, 4, "[batch, heads, seq, head_dim]");
    expectRank(1, 4, "[batch, kv_heads, seq, head_dim]");
    expectRank(2, 4, "[batch, kv_heads, seq, head_dim]");
    const Shape &qShape = in(0).shape, &kShape = in(1).shape, &vShape = in(2).shape;
    int64_t batch = qShape[0], heads = qShape[1], querySeq = qShape[2], headDim = qShape[3];
    int64_t kvHeads = kShape[1], keySeq = kShape[2], valueDim = vShape[3];
    if (kShape[0] != batch || kShape[3] != headDim || vShape[0] != batch || vShape[1] != kvHeads ||
        vShape[2] != keySeq || kvHeads < 1 || heads % kvHeads != 0)
      fail(fmt::format("q {}, k {}, v {} do not fit together (heads must be a multiple of "
                       "kv heads)",
                       shapeString(qShape), shapeString(kShape), shapeString(vShape)));
    expectResultShape(0, {batch, heads, querySeq, valueDim});
    double scaleFactor = floatAttr("scale");
    bool causal = intAttr("causal") != 0;
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
            // With causal masking key j is visible when j <= i + (Sk - Sq).
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
              result[row * valueDim + d] = visible ? float(accumulator[size_t(d)] / sum)
                                                   : std::numeric_limits<float>::quiet_NaN();
          }
        });
  }

  // cross_entropy(logits[B,S,V], ids[B,S]) -> 0-d: mean over b and s < S-1 of
  // logsumexp(logits[b,s,:]) - logits[b,s,ids[b,s+1]]. NaN when S == 1 (no targets).
  void crossEntropy() {
    expectArity(2, 1);
    expectRank(0, 3, "[batch, seq, vocab]");
    const Shape &shape = in(0).shape;
    int64_t batch = shape[0], seq = shape[1], vocab = shape[2];
    if (in(1).shape != Shape{batch, seq})
      fail(fmt::format("ids have shape {}, expected {}", shapeString(in(1).shape),
                       shapeString({batch, seq})));
    if (elementCount(out(0).shape) != 1)
      fail(fmt::format("result has shape {}, expected a scalar", shapeString(out(0).shape)));
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
