// The shape, attribute and operand rules of every tl op (see OpRules.h). The CPU
// reference semantics they describe are in CpuOps.cpp.
#include "runtime/OpRules.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <unordered_map>

#include "runtime/AttributeRanges.h"
#include "runtime/Checked.h"
#include "runtime/ElementwiseOps.h"
#include "runtime/Error.h"
#include "runtime/Tensor.h"

namespace tlc {
namespace {

class OpRules {
public:
  OpRules(const OpRecord &op, const std::vector<Shape> &operands) : op_(op), in_(operands) {}

  using Rule = std::vector<Shape> (OpRules::*)();

  static const std::unordered_map<std::string, Rule> &rules() {
    static const std::unordered_map<std::string, Rule> table = {
        {"embedding", &OpRules::embedding},
        {"rmsnorm", &OpRules::rmsnorm},
        {"linear", &OpRules::linear},
        {"transpose", &OpRules::transpose},
        {"split_heads", &OpRules::splitHeads},
        {"merge_heads", &OpRules::mergeHeads},
        {"concat", &OpRules::concat},
        {"rope", &OpRules::rope},
        {"repeat_kv", &OpRules::repeatKv},
        {"batch_matmul", &OpRules::batchMatmul},
        {"causal_mask", &OpRules::causalMask},
        {"softmax", &OpRules::softmax},
        {"split", &OpRules::split},
        {"flash_attention", &OpRules::flashAttention},
        {"cross_entropy", &OpRules::crossEntropy},
    };
    return table;
  }

  std::vector<Shape> infer() {
    auto found = rules().find(op_.op);
    const ElementwiseOp *elementwiseOp = findElementwiseOp(op_.op);
    if (found == rules().end() && !elementwiseOp) throw Error(fmt::format("unknown op '{}'", op_.op));
    // Every dimension is a count the math divides by or loops over: none may be zero.
    for (size_t i = 0; i < in_.size(); ++i)
      if (!checkedElementCount(in_[i]) || std::count(in_[i].begin(), in_[i].end(), 0) != 0)
        fail(fmt::format("operand {} has shape {}; every dimension must be positive and the "
                         "tensor at most 2^40 elements",
                         i, shapeString(in_[i])));
    std::vector<Shape> results = elementwiseOp ? elementwise(*elementwiseOp) : (this->*found->second)();
    for (const Shape &result : results)
      if (!checkedElementCount(result))
        fail(fmt::format("its result would have shape {}, more than 2^40 elements",
                         shapeString(result)));
    return results;
  }

private:
  [[noreturn]] void fail(const std::string &message) const { throw Error(message); }

  void expectOperands(size_t count) const {
    if (in_.size() != count)
      fail(fmt::format("expects {} operand{}, got {}", count, count == 1 ? "" : "s", in_.size()));
  }

  void expectRank(size_t index, size_t rank, const char *layout) const {
    if (in_[index].size() != rank)
      fail(fmt::format("operand {} has shape {}, expected rank {} ({})", index,
                       shapeString(in_[index]), rank, layout));
  }

  void expectMinRank(size_t index, size_t rank) const {
    if (in_[index].size() < rank)
      fail(fmt::format("operand {} has shape {}, expected rank {} or more", index,
                       shapeString(in_[index]), rank));
  }

  // A float attribute within a range shared with the tl verifier (AttributeRanges.h).
  double rangedFloat(const char *key, bool (*valid)(double), const char *range) const {
    double value = op_.floatAttr(key);
    if (!valid(value)) fail(fmt::format("attribute '{}' is {}; it must be {}", key, value, range));
    return value;
  }

  void expectBool(const char *key) const {
    int64_t value = op_.intAttr(key);
    if (value != 0 && value != 1) fail(fmt::format("attribute '{}' is {}, expected 0 or 1", key, value));
  }

  int64_t product(int64_t a, int64_t b) const {
    std::optional<int64_t> result = checkedMul(a, b);
    if (!result) fail(fmt::format("{} x {} overflows", a, b));
    return *result;
  }

  static Shape withLast(Shape shape, int64_t last) {
    shape.back() = last;
    return shape;
  }

  // ---- rules, one per op (semantics in CpuOps.cpp) --------------------------------

  // embedding(table[V, H], ids[...]) -> [..., H]
  std::vector<Shape> embedding() {
    expectOperands(2);
    expectRank(0, 2, "[vocab, hidden]");
    Shape result = in_[1];
    result.push_back(in_[0][1]);
    return {result};
  }

  // rmsnorm(x[..., H], gain[H]) (eps) -> x's shape
  std::vector<Shape> rmsnorm() {
    expectOperands(2);
    expectMinRank(0, 1);
    if (in_[1] != Shape{in_[0].back()})
      fail(fmt::format("gain has shape {}, expected {}", shapeString(in_[1]), in_[0].back()));
    rangedFloat("eps", isValidEps, kEpsRange);
    return {in_[0]};
  }

  // linear(x[..., K], w[N, K]) -> [..., N]
  std::vector<Shape> linear() {
    expectOperands(2);
    expectMinRank(0, 1);
    expectRank(1, 2, "[out_features, in_features]");
    if (in_[1][1] != in_[0].back())
      fail(fmt::format("x has shape {} but w has shape {}: inner dimensions differ",
                       shapeString(in_[0]), shapeString(in_[1])));
    return {withLast(in_[0], in_[1][0])};
  }

  // transpose(x) (perm) -> out.shape[i] = x.shape[perm[i]]
  std::vector<Shape> transpose() {
    expectOperands(1);
    Shape perm = op_.intsAttr("perm");
    Shape sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    bool isPermutation = perm.size() == in_[0].size();
    for (size_t i = 0; isPermutation && i < sorted.size(); ++i)
      isPermutation = sorted[i] == int64_t(i);
    if (!isPermutation)
      fail(fmt::format("perm [{}] is not a permutation of the {} dims of {}", fmt::join(perm, ", "),
                       in_[0].size(), shapeString(in_[0])));
    Shape result;
    for (int64_t axis : perm) result.push_back(in_[0][size_t(axis)]);
    return {result};
  }

  // split_heads(x[..., H*D]) (heads) -> [..., H, D]
  std::vector<Shape> splitHeads() {
    expectOperands(1);
    expectMinRank(0, 1);
    int64_t heads = op_.intAttr("heads"), width = in_[0].back();
    if (heads < 1 || width % heads != 0)
      fail(fmt::format("cannot split a last dim of {} into {} heads", width, heads));
    Shape result = withLast(in_[0], heads);
    result.push_back(width / heads);
    return {result};
  }

  // merge_heads(x[..., H, D]) -> [..., H*D]
  std::vector<Shape> mergeHeads() {
    expectOperands(1);
    expectMinRank(0, 2);
    Shape result(in_[0].begin(), in_[0].end() - 1);
    result.back() = product(result.back(), in_[0].back());
    return {result};
  }

  // concat(x0, x1, ...) along dim 0; the other dims agree.
  std::vector<Shape> concat() {
    if (in_.empty()) fail("expects one or more operands");
    expectMinRank(0, 1);
    Shape result = in_[0];
    for (size_t i = 1; i < in_.size(); ++i) {
      if (in_[i].size() != result.size() ||
          !std::equal(in_[i].begin() + 1, in_[i].end(), result.begin() + 1))
        fail(fmt::format("operand {} has shape {}, which cannot be concatenated with {}", i,
                         shapeString(in_[i]), shapeString(in_[0])));
      std::optional<int64_t> rows = checkedAdd(result[0], in_[i][0]);
      if (!rows) fail("the concatenated rows overflow");
      result[0] = *rows;
    }
    return {result};
  }

  // rope(x[B, S, H, D]) (theta, style) -> x's shape
  std::vector<Shape> rope() {
    expectOperands(1);
    expectRank(0, 4, "[batch, seq, heads, head_dim]");
    if (in_[0][3] % 2) fail(fmt::format("head dim {} must be even", in_[0][3]));
    rangedFloat("theta", isValidRopeTheta, kRopeThetaRange);
    const std::string &style = op_.stringAttr("style");
    if (style != "adjacent" && style != "half")
      fail(fmt::format("style '{}' is not 'adjacent' or 'half'", style));
    return {in_[0]};
  }

  // repeat_kv(x[B, Hkv, S, D]) (repeats) -> [B, Hkv * repeats, S, D]
  std::vector<Shape> repeatKv() {
    expectOperands(1);
    expectRank(0, 4, "[batch, kv_heads, seq, head_dim]");
    int64_t repeats = op_.intAttr("repeats");
    if (repeats < 1) fail(fmt::format("repeats {} must be positive", repeats));
    Shape result = in_[0];
    result[1] = product(result[1], repeats);
    return {result};
  }

  // batch_matmul(a[..., M, K], b[..., N, K] or [..., K, N]) (transpose_b) -> [..., M, N]
  std::vector<Shape> batchMatmul() {
    expectOperands(2);
    expectMinRank(0, 2);
    expectMinRank(1, 2);
    expectBool("transpose_b");
    bool transposedB = op_.intAttr("transpose_b") != 0;
    const Shape &a = in_[0], &b = in_[1];
    size_t rank = a.size();
    if (b.size() != rank || !std::equal(a.begin(), a.end() - 2, b.begin()))
      fail(fmt::format("a {} and b {} must have the same rank and leading dims", shapeString(a),
                       shapeString(b)));
    int64_t bK = transposedB ? b[rank - 1] : b[rank - 2];
    if (bK != a[rank - 1])
      fail(fmt::format("a {} and b {} (transpose_b = {}) have different inner dimensions",
                       shapeString(a), shapeString(b), int(transposedB)));
    return {withLast(a, transposedB ? b[rank - 2] : b[rank - 1])};
  }

  // causal_mask(x[..., R, C]): every row keeps at least one column, so C >= R.
  std::vector<Shape> causalMask() {
    expectOperands(1);
    expectMinRank(0, 2);
    int64_t rows = in_[0][in_[0].size() - 2], cols = in_[0].back();
    if (cols < rows)
      fail(fmt::format("scores {} have fewer columns than rows: a row would be masked entirely",
                       shapeString(in_[0])));
    return {in_[0]};
  }

  std::vector<Shape> softmax() {
    expectOperands(1);
    expectMinRank(0, 1);
    return {in_[0]};
  }

  // The ops of runtime/ElementwiseOps.def: equal shapes, no broadcasting; a float
  // attribute (scale's factor) must be zero or a normal f32, like tl.scale's.
  std::vector<Shape> elementwise(const ElementwiseOp &op) {
    expectOperands(size_t(op.operands));
    if (op.operands == 2 && in_[0] != in_[1])
      fail(fmt::format("operands 0 and 1 have shapes {} and {}, expected equal shapes",
                       shapeString(in_[0]), shapeString(in_[1])));
    if (std::string(op.attribute) != "none") rangedFloat(op.attribute, isValidScale, kScaleRange);
    return {in_[0]};
  }

  // split(x[..., N]) (sizes) -> one result per size, slicing the last dim.
  std::vector<Shape> split() {
    expectOperands(1);
    expectMinRank(0, 1);
    Shape sizes = op_.intsAttr("sizes");
    if (sizes.empty()) fail("attribute 'sizes' is empty");
    int64_t total = 0;
    for (int64_t size : sizes) {
      std::optional<int64_t> sum = checkedAdd(total, size);
      if (size < 1 || !sum) fail(fmt::format("sizes [{}] must be positive", fmt::join(sizes, ", ")));
      total = *sum;
    }
    if (total != in_[0].back())
      fail(fmt::format("sizes [{}] add up to {}, but the last dim of {} is {}",
                       fmt::join(sizes, ", "), total, shapeString(in_[0]), in_[0].back()));
    std::vector<Shape> results;
    for (int64_t size : sizes) results.push_back(withLast(in_[0], size));
    return results;
  }

  // flash_attention(q[B,H,Sq,D], k[B,Hkv,Sk,D], v[B,Hkv,Sk,Dv]) (scale, causal)
  // -> [B,H,Sq,Dv]; causal needs Sk >= Sq so every query sees a key.
  std::vector<Shape> flashAttention() {
    expectOperands(3);
    expectRank(0, 4, "[batch, heads, seq, head_dim]");
    expectRank(1, 4, "[batch, kv_heads, seq, head_dim]");
    expectRank(2, 4, "[batch, kv_heads, seq, head_dim]");
    const Shape &q = in_[0], &k = in_[1], &v = in_[2];
    if (k[0] != q[0] || k[3] != q[3] || v[0] != q[0] || v[1] != k[1] || v[2] != k[2] ||
        q[1] % k[1] != 0)
      fail(fmt::format("q {}, k {}, v {} do not fit together (heads must be a multiple of "
                       "kv heads)",
                       shapeString(q), shapeString(k), shapeString(v)));
    rangedFloat("scale", isValidScale, kScaleRange);
    expectBool("causal");
    if (op_.intAttr("causal") && k[2] < q[2])
      fail(fmt::format("causal attention with {} keys for {} queries: a query would see no key",
                       k[2], q[2]));
    return {{q[0], q[1], q[2], v[3]}};
  }

  // cross_entropy(logits[B, S, V], ids[B, S]) -> scalar
  std::vector<Shape> crossEntropy() {
    expectOperands(2);
    expectRank(0, 3, "[batch, seq, vocab]");
    Shape ids{in_[0][0], in_[0][1]};
    if (in_[1] != ids)
      fail(fmt::format("ids have shape {}, expected {}", shapeString(in_[1]), shapeString(ids)));
    return {Shape{}};
  }

  const OpRecord &op_;
  const std::vector<Shape> &in_;
};

} // namespace

bool isKnownOp(const std::string &op) {
  return OpRules::rules().count(op) != 0 || findElementwiseOp(op) != nullptr;
}

bool isTokenIdOperand(const std::string &op, size_t operand) {
  return operand == 1 && (op == "embedding" || op == "cross_entropy");
}

std::vector<Shape> inferResultShapes(const OpRecord &op, const std::vector<Shape> &operandShapes) {
  return OpRules(op, operandShapes).infer();
}

} // namespace tlc
