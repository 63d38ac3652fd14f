// The shape, attribute and operand rules of every tl op (see OpRules.h). The CPU
// reference semantics they describe are in CpuOps.cpp.
#include "runtime/OpRules.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "runtime/AttributeRanges.h"
#include "runtime/Checked.h"
#include "runtime/ElementwiseOps.h"
#include "runtime/Error.h"
#include "runtime/OpKind.h"
#include "runtime/Tensor.h"

namespace tlc {
namespace {

class OpRules {
public:
  OpRules(const OpRecord &op, const std::vector<Shape> &operands, bool unknownDims = false)
      : op_(op), in_(operands), unknownDims_(unknownDims) {}

  std::vector<Shape> infer() {
    // Every dimension is a count the math divides by or loops over: none may be zero.
    for (size_t i = 0; i < in_.size(); ++i)
      if (!checkedElementCount(sized(in_[i])) || std::count(in_[i].begin(), in_[i].end(), 0) != 0)
        fail(fmt::format("operand {} has shape {}; every dimension must be positive and the "
                         "tensor at most 2^40 elements",
                         i, str(in_[i])));
    std::vector<Shape> results = rule();
    for (const Shape &result : results)
      if (!checkedElementCount(sized(result)))
        fail(fmt::format("its result would have shape {}, more than 2^40 elements", str(result)));
    return results;
  }

private:
  // The op's rule, by its kind's method in runtime/Ops.def.
  std::vector<Shape> rule() {
    switch (op_.kind) {
#define TL_OP(name, method) \
  case OpKind::name: return method();
#include "runtime/Ops.def"
#undef TL_OP
    }
    fail(fmt::format("is no op kind ({})", int(op_.kind)));
  }

  [[noreturn]] void fail(const std::string &message) const { throw Error(message); }

  // ---- dims the compiler does not know yet (kUnknownDim, a `?`) ----------------------
  // A rule accepts any size for one, and a result dim computed from one is unknown.

  static bool known(int64_t dim) { return dim != kUnknownDim; }

  // Two dims that cannot be equal: both known and different.
  static bool differ(int64_t a, int64_t b) { return known(a) && known(b) && a != b; }

  static bool shapesDiffer(const Shape &a, const Shape &b) {
    if (a.size() != b.size()) return true;
    for (size_t i = 0; i < a.size(); ++i)
      if (differ(a[i], b[i])) return true;
    return false;
  }

  // Unknown dims as 1 where the element count is checked (it is checked again once known).
  Shape sized(Shape shape) const {
    if (unknownDims_) std::replace(shape.begin(), shape.end(), kUnknownDim, int64_t(1));
    return shape;
  }

  // shapeString, with an unknown dim as `?`.
  std::string str(const Shape &shape) const {
    if (!unknownDims_ || shape.empty()) return shapeString(shape);
    std::vector<std::string> dims;
    for (int64_t dim : shape) dims.push_back(known(dim) ? std::to_string(dim) : "?");
    return fmt::format("{}", fmt::join(dims, "x"));
  }

  void expectOperands(size_t count) const {
    if (in_.size() != count)
      fail(fmt::format("expects {} operand{}, got {}", count, count == 1 ? "" : "s", in_.size()));
  }

  void expectRank(size_t index, size_t rank, const char *layout) const {
    if (in_[index].size() != rank)
      fail(fmt::format("operand {} has shape {}, expected rank {} ({})", index,
                       str(in_[index]), rank, layout));
  }

  void expectMinRank(size_t index, size_t rank) const {
    if (in_[index].size() < rank)
      fail(fmt::format("operand {} has shape {}, expected rank {} or more", index,
                       str(in_[index]), rank));
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

  int64_t sum(int64_t a, int64_t b, const char *what) const {
    if (!known(a) || !known(b)) return kUnknownDim;
    std::optional<int64_t> result = checkedAdd(a, b);
    if (!result) fail(fmt::format("{} overflow", what));
    return *result;
  }

  int64_t product(int64_t a, int64_t b) const {
    if (!known(a) || !known(b)) return kUnknownDim;
    std::optional<int64_t> result = checkedMul(a, b);
    if (!result) fail(fmt::format("{} x {} overflows", a, b));
    return *result;
  }

  static Shape withLast(Shape shape, int64_t last) {
    shape.back() = last;
    return shape;
  }

  // ---- rules, one per op (semantics in CpuOps.cpp) --------------------------------

  // embedding(table[V, H], ids[B, S]) -> [B, S, H]
  std::vector<Shape> embedding() {
    expectOperands(2);
    expectRank(0, 2, "[vocab, hidden]");
    expectRank(1, 2, "token ids [batch, seq]");
    Shape result = in_[1];
    result.push_back(in_[0][1]);
    return {result};
  }

  // rmsnorm(x[..., H] [, gain[H]]) (eps) -> x's shape; without a gain (folded into the
  // next GEMM's weight) the rows are only normalized
  std::vector<Shape> rmsnorm() {
    if (in_.size() != 1) expectOperands(2);
    checkNormOperands();
    return {in_[0]};
  }

  void checkNormOperands() const {
    expectMinRank(0, 1);
    if (in_.size() > 1 && shapesDiffer(in_[1], Shape{in_[0].back()}))
      fail(fmt::format("gain has shape {}, expected {}", str(in_[1]), in_[0].back()));
    rangedFloat("eps", isValidEps, kEpsRange);
  }

  // Operand `index` (a cotangent) must have operand `like`'s shape.
  void expectSameShape(size_t index, size_t like) const {
    if (shapesDiffer(in_[index], in_[like]))
      fail(fmt::format("operand {} has shape {}, expected {} (the shape of operand {})", index,
                       str(in_[index]), str(in_[like]), like));
  }

  // linear(x[..., M, K], w[N, K]) -> [..., M, N]
  std::vector<Shape> linear() {
    expectOperands(2);
    expectMinRank(0, 2);
    expectRank(1, 2, "[out_features, in_features]");
    if (differ(in_[1][1], in_[0].back()))
      fail(fmt::format("x has shape {} but w has shape {}: inner dimensions differ",
                       str(in_[0]), str(in_[1])));
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
                       in_[0].size(), str(in_[0])));
    Shape result;
    for (int64_t axis : perm) result.push_back(in_[0][size_t(axis)]);
    return {result};
  }

  // split_heads(x[B, S, H*D]) (heads) -> [B, S, H, D]
  std::vector<Shape> splitHeads() {
    expectOperands(1);
    expectRank(0, 3, "[batch, seq, heads x head dim]");
    int64_t heads = op_.intAttr("heads"), width = in_[0].back();
    if (heads < 1 || (known(width) && width % heads != 0))
      fail(fmt::format("cannot split a last dim of {} into {} heads", width, heads));
    Shape result = withLast(in_[0], heads);
    result.push_back(known(width) ? width / heads : kUnknownDim);
    return {result};
  }

  // merge_heads(x[B, S, H, D]) -> [B, S, H*D], split_heads' inverse
  std::vector<Shape> mergeHeads() {
    expectOperands(1);
    expectRank(0, 4, "[batch, seq, heads, head dim]");
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
      Shape rows = in_[i];
      if (!rows.empty()) rows[0] = result[0];
      if (shapesDiffer(rows, result))
        fail(fmt::format("operand {} has shape {}, which cannot be concatenated with {}", i,
                         str(in_[i]), str(in_[0])));
      for (size_t d = 1; d < result.size(); ++d)
        if (!known(result[d])) result[d] = in_[i][d];
      result[0] = sum(result[0], in_[i][0], "the concatenated rows");
    }
    return {result};
  }

  // rope(x[B, S, H, D]) (theta, style) -> x's shape; rope_grad(dy) the same.
  std::vector<Shape> rope() {
    expectOperands(1);
    return ropeOf();
  }

  // rope_at(x[B, S, H, D], positions[B]) (theta, style) -> x's shape
  std::vector<Shape> ropeAt() {
    expectOperands(2);
    expectPositions(1, in_[0].empty() ? 0 : in_[0][0]);
    return ropeOf();
  }

  // Operand `index` holds one position per sequence of a batch of `batch`.
  void expectPositions(size_t index, int64_t batch) const {
    if (shapesDiffer(in_[index], Shape{batch}))
      fail(fmt::format("positions (operand {}) have shape {}, expected [{}]", index, str(in_[index]), batch));
  }

  // A layer of a cache [L, B, Hkv, T, D] and rows [B, H, S, D] that fit it (H a multiple of Hkv).
  void expectCacheRows(size_t cache, size_t rows) const {
    expectRank(cache, 5, "[layers, batch, kv_heads, context, head_dim]");
    expectRank(rows, 4, "[batch, heads, seq, head_dim]");
    const Shape &c = in_[cache], &r = in_[rows];
    int64_t layer = op_.intAttr("layer");
    if (layer < 0 || (known(c[0]) && layer >= c[0]))
      fail(fmt::format("layer {} is not one of the cache's {}", layer, c[0]));
    bool grouped = !known(r[1]) || !known(c[2]) || r[1] % c[2] == 0;
    bool fits = !known(r[2]) || !known(c[3]) || r[2] <= c[3];
    if (differ(r[0], c[1]) || differ(r[3], c[4]) || !grouped || !fits)
      fail(fmt::format("rows {} do not fit the cache {}", str(r), str(c)));
  }

  // kv_cache_store(cache[L, B, Hkv, T, D], x[B, Hkv, S, D][, positions[B]]) (layer) -> the cache's shape
  std::vector<Shape> kvCacheStore() {
    if (in_.size() != 2 && in_.size() != 3) fail(fmt::format("expects 2 or 3 operands, got {}", in_.size()));
    expectCacheRows(0, 1);
    if (differ(in_[1][1], in_[0][2]))
      fail(fmt::format("rows {} have other than the cache's {} kv heads", str(in_[1]), in_[0][2]));
    if (in_.size() == 3) expectPositions(2, in_[0][1]);
    return {in_[0]};
  }

  // cache_attention(q[B, H, S, D], keys, values [L, B, Hkv, T, D], positions[B]) (layer, scale) -> q's shape
  std::vector<Shape> cacheAttention() {
    expectOperands(4);
    expectCacheRows(1, 0);
    expectSameShape(2, 1);
    expectPositions(3, in_[1][1]);
    rangedFloat("scale", isValidScale, kScaleRange);
    return {in_[0]};
  }

  std::vector<Shape> ropeOf() {
    expectRank(0, 4, "[batch, seq, heads, head_dim]");
    if (known(in_[0][3]) && in_[0][3] % 2) fail(fmt::format("head dim {} must be even", in_[0][3]));
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

  // batch_matmul(a[B..., M, K], b[B..., N, K] or [B..., K, N]) (transpose_b) -> [B..., M, N]
  std::vector<Shape> batchMatmul() {
    expectOperands(2);
    expectMinRank(0, 3);
    expectMinRank(1, 3);
    expectBool("transpose_b");
    bool transposedB = op_.intAttr("transpose_b") != 0;
    const Shape &a = in_[0], &b = in_[1];
    size_t rank = a.size();
    Shape batch(a.begin(), a.end() - 2), bBatch(b.begin(), b.end() - 2);
    if (b.size() != rank || shapesDiffer(batch, bBatch))
      fail(fmt::format("a {} and b {} must have the same rank and leading dims", str(a),
                       str(b)));
    int64_t bK = transposedB ? b[rank - 1] : b[rank - 2];
    if (differ(bK, a[rank - 1]))
      fail(fmt::format("a {} and b {} (transpose_b = {}) have different inner dimensions",
                       str(a), str(b), int(transposedB)));
    Shape result = withLast(a, transposedB ? b[rank - 2] : b[rank - 1]);
    for (size_t d = 0; d + 2 < rank; ++d)
      if (!known(result[d])) result[d] = b[d];
    return {result};
  }

  // causal_mask(x[..., R, C]): every row keeps at least one column, so C >= R.
  std::vector<Shape> causalMask() {
    expectOperands(1);
    expectMinRank(0, 2);
    int64_t rows = in_[0][in_[0].size() - 2], cols = in_[0].back();
    if (known(cols) && known(rows) && cols < rows)
      fail(fmt::format("scores {} have fewer columns than rows: a row would be masked entirely",
                       str(in_[0])));
    return {in_[0]};
  }

  std::vector<Shape> softmax() {
    expectOperands(1);
    expectMinRank(0, 1);
    return {in_[0]};
  }

  // The ops of runtime/ElementwiseOps.def: equal shapes, no broadcasting; a float
  // attribute (scale's factor) must be zero or a normal f32, like tl.scale's.
  std::vector<Shape> elementwise() {
    const ElementwiseOp &op = *findElementwiseOp(op_.kind);
    expectOperands(size_t(op.operands));
    if (op.operands == 2 && shapesDiffer(in_[0], in_[1]))
      fail(fmt::format("operands 0 and 1 have shapes {} and {}, expected equal shapes",
                       str(in_[0]), str(in_[1])));
    if (std::string(op.attribute) != "none") rangedFloat(op.attribute, isValidScale, kScaleRange);
    Shape result = in_[0];
    for (size_t d = 0; op.operands == 2 && d < result.size(); ++d)
      if (!known(result[d])) result[d] = in_[1][d];
    return {result};
  }

  // split(x[..., N]) (sizes) -> one result per size, slicing the last dim.
  std::vector<Shape> split() {
    expectOperands(1);
    expectMinRank(0, 1);
    std::vector<Shape> results;
    for (int64_t size : positiveSizes(in_[0].back(), "the last dim")) results.push_back(withLast(in_[0], size));
    return results;
  }

  // Attribute 'sizes': positive, adding up to `total` (operand 0's `dim`).
  Shape positiveSizes(int64_t total, const char *dim) const {
    Shape sizes = op_.intsAttr("sizes");
    if (sizes.empty()) fail("attribute 'sizes' is empty");
    int64_t added = 0;
    for (int64_t size : sizes) {
      std::optional<int64_t> next = checkedAdd(added, size);
      if (size < 1 || !next) fail(fmt::format("sizes [{}] must be positive", fmt::join(sizes, ", ")));
      added = *next;
    }
    if (known(total) && added != total)
      fail(fmt::format("sizes [{}] add up to {}, but {} of {} is {}", fmt::join(sizes, ", "), added, dim,
                       str(in_[0]), total));
    return sizes;
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
                       str(q), str(k), str(v)));
    rangedFloat("scale", isValidScale, kScaleRange);
    expectBool("causal");
    if (op_.intAttr("causal") && k[2] < q[2])
      fail(fmt::format("causal attention with {} keys for {} queries: a query would see no key",
                       k[2], q[2]));
    if (!withLogSumExp()) return {{q[0], q[1], q[2], v[3]}};
    return {{q[0], q[1], q[2], v[3]}, {q[0], q[1], q[2]}};
  }

  // flash_attention's optional second result, the log-sum-exp per query row [B, H, Sq].
  bool withLogSumExp() const {
    if (!op_.attrs.count("with_lse")) return false;
    expectBool("with_lse");
    return op_.intAttr("with_lse") != 0;
  }

  // cross_entropy(logits[B, S, V], ids[B, S]) -> scalar
  std::vector<Shape> crossEntropy() {
    expectOperands(2);
    expectRank(0, 3, "[batch, seq, vocab]");
    expectIdsOf(0);
    return {Shape{}};
  }

  // Operand 1 holds the token ids of operand `tokens` ([B, S, ...]): shape [B, S].
  void expectIdsOf(size_t tokens) const {
    Shape ids{in_[tokens][0], in_[tokens][1]};
    if (shapesDiffer(in_[1], ids))
      fail(fmt::format("ids have shape {}, expected {}", str(in_[1]), str(ids)));
  }

  // ---- the backward and the optimizer ------------------------------------------------

  // embedding_grad(dy[B, S, H], ids[B, S]) (rows) -> [rows, H]
  std::vector<Shape> embeddingGrad() {
    expectOperands(2);
    expectRank(0, 3, "[batch, seq, hidden]");
    expectIdsOf(0);
    int64_t rows = op_.intAttr("rows");
    if (rows < 1) fail(fmt::format("rows {} must be positive", rows));
    return {{rows, in_[0][2]}};
  }

  // rmsnorm_grad(x[..., H], gain[H], dy[..., H] [, residual[..., H]]) (eps [, with_normalized])
  //   -> (dx, dgain [, x̂ g])
  std::vector<Shape> rmsnormGrad() {
    if (in_.size() != 4) expectOperands(3);
    checkNormOperands();
    expectSameShape(2, 0);
    if (in_.size() == 4) expectSameShape(3, 0);
    if (!op_.attrs.count("with_normalized")) return {in_[0], in_[1]};
    expectBool("with_normalized");
    if (op_.intAttr("with_normalized") == 0) return {in_[0], in_[1]};
    return {in_[0], in_[1], in_[0]};
  }

  // linear_grad_input(dy[..., M, N], w[N, K]) -> [..., M, K]
  std::vector<Shape> linearGradInput() {
    expectOperands(2);
    expectMinRank(0, 2);
    expectRank(1, 2, "[out_features, in_features]");
    if (differ(in_[1][0], in_[0].back()))
      fail(fmt::format("dy has shape {} but w has shape {}: out_features differ", str(in_[0]),
                       str(in_[1])));
    return {withLast(in_[0], in_[1][1])};
  }

  // linear_grad_weight(dy[..., M, N], x[..., M, K]) -> [N, K], summed over the leading dims
  std::vector<Shape> linearGradWeight() {
    expectOperands(2);
    expectMinRank(0, 2);
    Shape tokens = in_[1];
    if (!tokens.empty()) tokens.back() = in_[0].back();
    if (shapesDiffer(tokens, in_[0]))
      fail(fmt::format("dy {} and x {} must agree in every dim but the last", str(in_[0]),
                       str(in_[1])));
    return {{in_[0].back(), in_[1].back()}};
  }

  std::vector<Shape> ropeGrad() { return rope(); }

  std::vector<Shape> causalMaskGrad() { return causalMask(); }

  // repeat_kv_grad(dy[B, Hkv * repeats, S, D]) (repeats) -> [B, Hkv, S, D]
  std::vector<Shape> repeatKvGrad() {
    expectOperands(1);
    expectRank(0, 4, "[batch, heads, seq, head_dim]");
    int64_t repeats = op_.intAttr("repeats");
    if (repeats < 1 || (known(in_[0][1]) && in_[0][1] % repeats != 0))
      fail(fmt::format("{} heads are not a positive multiple of repeats {}", in_[0][1], repeats));
    Shape result = in_[0];
    if (known(result[1])) result[1] /= repeats;
    return {result};
  }

  // softmax_grad(y, dy) -> y's shape
  std::vector<Shape> softmaxGrad() {
    expectOperands(2);
    expectMinRank(0, 1);
    expectSameShape(1, 0);
    return {in_[0]};
  }

  // cross_entropy_grad(logits[B, S, V], ids[B, S]) (with_loss) -> logits' shape [, scalar
  // loss]; S >= 2 (a target each)
  std::vector<Shape> crossEntropyGrad() {
    crossEntropy();
    if (known(in_[0][1]) && in_[0][1] < 2)
      fail(fmt::format("a sequence of {} token predicts nothing: it needs 2 or more", in_[0][1]));
    if (!op_.attrs.count("with_loss")) return {in_[0]};
    expectBool("with_loss");
    if (op_.intAttr("with_loss") == 0) return {in_[0]};
    return {in_[0], Shape{}};
  }

  // flash_attention_grad(q, k, v, o, lse[B, H, Sq], do) (scale, causal) -> (dq, dk, dv)
  std::vector<Shape> flashAttentionGrad() {
    expectOperands(6);
    std::vector<Shape> forward = in_;
    forward.resize(3);
    OpRecord attention = op_;
    attention.attrs.erase("with_lse");
    std::vector<Shape> out = OpRules(attention, forward).flashAttention();
    expectSameShape(3, 0);
    expectSameShape(5, 0);
    if (in_[3] != out[0]) fail("the output's shape differs from the attention's");
    Shape lse{in_[0][0], in_[0][1], in_[0][2]};
    if (in_[4] != lse)
      fail(fmt::format("lse has shape {}, expected {}", str(in_[4]), str(lse)));
    return {in_[0], in_[1], in_[2]};
  }

  // concat_grad(dy[R, ...]) (sizes: rows) -> one piece per size, cut along dim 0
  std::vector<Shape> concatGrad() {
    expectOperands(1);
    expectMinRank(0, 1);
    std::vector<Shape> pieces;
    for (int64_t rows : positiveSizes(in_[0][0], "dim 0")) {
      pieces.push_back(in_[0]);
      pieces.back()[0] = rows;
    }
    return pieces;
  }

  // split_grad(d0[..., N0], d1[..., N1], ...) -> [..., N0 + N1 + ...]
  std::vector<Shape> splitGrad() {
    if (in_.empty()) fail("expects one or more operands");
    expectMinRank(0, 1);
    Shape result = in_[0];
    for (size_t i = 1; i < in_.size(); ++i) {
      Shape columns = in_[i];
      if (!columns.empty()) columns.back() = result.back();
      if (shapesDiffer(columns, result))
        fail(fmt::format("operand {} has shape {}, which cannot be joined with {}", i, str(in_[i]),
                         str(in_[0])));
      for (size_t d = 0; d + 1 < result.size(); ++d)
        if (!known(result[d])) result[d] = in_[i][d];
      result.back() = sum(result.back(), in_[i].back(), "the joined widths");
    }
    return {result};
  }

  // global_norm(x0, x1, ...) -> scalar
  std::vector<Shape> globalNorm() {
    if (in_.empty()) fail("expects one or more operands");
    return {Shape{}};
  }

  // adamw(grad[, grad_norm[]]) (key, lr, beta1, beta2, eps, weight_decay[, max_grad_norm])
  // -> nothing: it updates the parameter's state in place.
  std::vector<Shape> adamw() {
    if (in_.size() != 1 && in_.size() != 2) fail(fmt::format("expects 1 or 2 operands, got {}", in_.size()));
    if (op_.stringAttr("key").empty()) fail("attribute 'key' is empty");
    rangedFloat("lr", isValidPositive, kPositiveRange);
    rangedFloat("beta1", isValidBeta, kBetaRange);
    rangedFloat("beta2", isValidBeta, kBetaRange);
    rangedFloat("eps", isValidPositive, kPositiveRange);
    rangedFloat("weight_decay", isValidWeightDecay, kWeightDecayRange);
    bool clipped = op_.attrs.count("max_grad_norm") != 0;
    if (clipped != (in_.size() == 2))
      fail("clipping needs both the grad_norm operand and attribute 'max_grad_norm'");
    if (clipped) {
      rangedFloat("max_grad_norm", isValidPositive, kPositiveRange);
      if (!in_[1].empty()) fail(fmt::format("grad_norm has shape {}, expected a scalar", str(in_[1])));
    }
    return {};
  }

  // all_reduce(x0, x1, ...) (bucket) -> each operand's shape: its mean over the ranks.
  std::vector<Shape> allReduce() {
    if (in_.empty()) fail("expects one or more operands");
    if (op_.intAttr("bucket") < 0) fail(fmt::format("attribute 'bucket' is {}; it must be 0 or more", op_.intAttr("bucket")));
    return in_;
  }

  const OpRecord &op_;
  const std::vector<Shape> &in_;
  bool unknownDims_;
};

} // namespace

bool isTokenIdOperand(OpKind kind, size_t operand) {
  switch (kind) {
  case OpKind::rope_at: return operand == 1;
  case OpKind::kv_cache_store: return operand == 2;
  case OpKind::cache_attention: return operand == 3;
  case OpKind::embedding:
  case OpKind::cross_entropy:
  case OpKind::embedding_grad:
  case OpKind::cross_entropy_grad: return operand == 1;
  default: return false;
  }
}

std::optional<int64_t> rowsIndexedByIds(OpKind kind, const std::vector<Shape> &operands,
                                        const std::vector<Shape> &results) {
  switch (kind) {
  case OpKind::embedding: return operands[0][0];
  case OpKind::embedding_grad: return results[0][0];
  case OpKind::cross_entropy:
  case OpKind::cross_entropy_grad: return operands[0][2];
  default: return std::nullopt;
  }
}

std::vector<Shape> inferResultShapes(const OpRecord &op, const std::vector<Shape> &operandShapes) {
  return OpRules(op, operandShapes).infer();
}

std::vector<Shape> inferResultShapesWithUnknownDims(const OpRecord &op, const std::vector<Shape> &operandShapes) {
  return OpRules(op, operandShapes, /*unknownDims=*/true).infer();
}

} // namespace tlc
