#include "compiler/codegen/KernelBuilder.h"

#include "compiler/TlDialect.h"
#include "compiler/codegen/Schedule.h"
#include "runtime/ElementwiseOps.h"
#include "runtime/Error.h"
#include "runtime/OpKind.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <utility>

namespace tlc::codegen {
namespace {

using Shape = std::vector<int64_t>;

Shape shapeOf(mlir::Value value) {
  auto shape = llvm::cast<mlir::RankedTensorType>(value.getType()).getShape();
  return {shape.begin(), shape.end()};
}

int64_t product(const Shape &shape, size_t begin = 0, size_t end = size_t(-1)) {
  int64_t count = 1;
  for (size_t i = begin; i < std::min(end, shape.size()); ++i) count *= shape[i];
  return count;
}

std::string opName(mlir::Operation *op) { return op->getName().stripDialect().str(); }

// The context every builder shares: the kernel, its arguments, and which IR ops it
// computes (pulled through) as opposed to values it reads from memory.
class KernelContext {
public:
  KernelContext(const Program &program, const Kernel &kernel, const ValueIds &idOf)
      : program_(program), kernel_(kernel), idOf_(idOf) {}

  [[noreturn]] void fail(const std::string &message) const {
    throw Error(fmt::format("code generation: kernel '{}': {}", kernel_.name, message));
  }

  void addComputed(mlir::Operation *op) {
    op->walk([&](mlir::Operation *nested) { computed_.insert(nested); });
  }
  bool isComputed(mlir::Value value) const {
    mlir::Operation *def = value.getDefiningOp();
    return def && computed_.contains(def);
  }

  // The argument holding `value`, or -1.
  int paramOf(mlir::Value value) const { return paramOfId(idOf_(value)); }
  int paramOfId(int id) const {
    for (size_t i = 0; i < kernel_.inputs.size(); ++i)
      if (kernel_.inputs[i] == id) return int(i);
    for (size_t i = 0; i < kernel_.outputs.size(); ++i)
      if (kernel_.outputs[i] == id) return int(kernel_.inputs.size() + i);
    return -1;
  }
  int requireParam(mlir::Value value, const char *what) const {
    int param = paramOf(value);
    if (param < 0) fail(fmt::format("its {} is neither computed in the kernel nor one of its arguments", what));
    return param;
  }

  std::vector<KernelParam> params() const {
    std::vector<KernelParam> params;
    for (int id : kernel_.inputs) params.push_back({id, program_.storageOf(id).dtype, false});
    for (int id : kernel_.outputs) params.push_back({id, program_.storageOf(id).dtype, true});
    return params;
  }

  const Kernel &kernel() const { return kernel_; }

private:
  const Program &program_;
  const Kernel &kernel_;
  const ValueIds &idOf_;
  llvm::DenseSet<mlir::Operation *> computed_;
};

// The value of `value` at a symbolic index, pulled back through the ops the kernel
// computes to loads of its arguments and reads of the GEMM accumulator.
class ElementPuller {
public:
  ElementPuller(const KernelContext &context, mlir::Value accumulator = {})
      : context_(context), accumulator_(accumulator) {}

  ElementRef at(mlir::Value value, const Index &index) {
    if (accumulator_ && value == accumulator_) {
      accumulatorRows_.push_back(Index(index.begin(), index.end() - 1));
      return ElementExpr::accumulator(index.back());
    }
    if (!context_.isComputed(value))
      return ElementExpr::load(context_.requireParam(value, "operand"), linearize(index, shapeOf(value)));
    mlir::Operation *op = value.getDefiningOp();
    std::string name = opName(op);
    if (const ElementwiseOp *elementwise = findElementwiseOp(name)) {
      std::vector<ElementRef> args;
      for (mlir::Value operand : op->getOperands()) args.push_back(at(operand, index));
      double attr = 0;
      if (std::string(elementwise->attribute) != "none") {
        auto value = op->getAttrOfType<mlir::FloatAttr>(elementwise->attribute);
        if (!value) context_.fail(fmt::format("'{}' has no attribute '{}'", name, elementwise->attribute));
        attr = value.getValueAsDouble();
      }
      return ElementExpr::apply(name, std::move(args), attr);
    }
    if (std::optional<std::pair<mlir::Value, Index>> inner = readFrom(op, value, index))
      return at(inner->first, inner->second);
    if (ElementRef computed = computedAt(op, value, index)) return computed;
    context_.fail(fmt::format("'tl.{}' cannot be computed element by element inside this kernel", name));
  }

  // Ops that move elements without computing: which element of which input `value` at
  // `index` is (std::nullopt for the other ops).
  static std::optional<std::pair<mlir::Value, Index>> readFrom(mlir::Operation *op, mlir::Value value,
                                                               const Index &index) {
    if (auto split = llvm::dyn_cast<tl::SplitOp>(op)) {
      unsigned result = llvm::cast<mlir::OpResult>(value).getResultNumber();
      int64_t start = 0;
      for (unsigned r = 0; r < result; ++r) start += split.getSizes()[r];
      Index inner = index;
      inner.back() = inner.back() + start;
      return std::make_pair(split.getInput(), inner);
    }
    if (auto heads = llvm::dyn_cast<tl::SplitHeadsOp>(op)) {
      int64_t headDim = shapeOf(value).back();
      Index inner(index.begin(), index.end() - 2);
      inner.push_back(index[index.size() - 2] * headDim + index.back());
      return std::make_pair(heads.getInput(), inner);
    }
    if (auto merge = llvm::dyn_cast<tl::MergeHeadsOp>(op)) {
      int64_t headDim = shapeOf(merge.getInput()).back();
      Index inner(index.begin(), index.end() - 1);
      inner.push_back(index.back().floorDiv(headDim));
      inner.push_back(index.back().mod(headDim));
      return std::make_pair(merge.getInput(), inner);
    }
    if (auto transpose = llvm::dyn_cast<tl::TransposeOp>(op)) {
      llvm::ArrayRef<int64_t> perm = transpose.getPerm();
      Index inner(index.size());
      for (size_t i = 0; i < perm.size(); ++i) inner[size_t(perm[i])] = index[i];
      return std::make_pair(transpose.getInput(), inner);
    }
    if (auto repeat = llvm::dyn_cast<tl::RepeatKvOp>(op)) {
      Index inner = index;
      inner[1] = index[1].floorDiv(int64_t(repeat.getRepeats()));
      return std::make_pair(repeat.getInput(), inner);
    }
    if (auto concat = llvm::dyn_cast<tl::ConcatGradOp>(op)) {
      unsigned result = llvm::cast<mlir::OpResult>(value).getResultNumber();
      int64_t start = 0;
      for (unsigned r = 0; r < result; ++r) start += concat.getSizes()[r];
      Index inner = index;
      inner[0] = inner[0] + start;
      return std::make_pair(concat.getGrad(), inner);
    }
    return std::nullopt;
  }

  // Ops whose element is computed from several of their input's (RoPE's pair, a kv
  // head's sum over its group) or with its position (the causal mask); null for others.
  ElementRef computedAt(mlir::Operation *op, mlir::Value value, const Index &index) {
    if (auto rope = llvm::dyn_cast<tl::RopeOp>(op))
      return rotated(rope.getInput(), index, rope.getThetaAttr().getValueAsDouble(), rope.getStyle(), false);
    if (auto rope = llvm::dyn_cast<tl::RopeAtOp>(op))
      return rotated(rope.getInput(), index, rope.getThetaAttr().getValueAsDouble(), rope.getStyle(), false,
                     rope.getPositions());
    if (auto rope = llvm::dyn_cast<tl::RopeGradOp>(op))
      return rotated(rope.getGrad(), index, rope.getThetaAttr().getValueAsDouble(), rope.getStyle(), true);
    if (auto repeat = llvm::dyn_cast<tl::RepeatKvGradOp>(op)) {
      // Each kv head: the sum of the query heads of its group, in order.
      int64_t repeats = int64_t(repeat.getRepeats());
      ElementRef sum;
      for (int64_t r = 0; r < repeats; ++r) {
        Index inner = index;
        inner[1] = index[1] * repeats + r;
        ElementRef term = at(repeat.getGrad(), inner);
        sum = sum ? ElementExpr::apply("add", {sum, term}, 0) : term;
      }
      return sum;
    }
    if (llvm::isa<tl::CausalMaskOp, tl::CausalMaskGradOp>(op)) {
      Shape shape = shapeOf(value);
      auto expr = std::make_shared<ElementExpr>();
      expr->kind = ElementExpr::Kind::CausalMask;
      expr->inverse = llvm::isa<tl::CausalMaskGradOp>(op);
      expr->args = {at(op->getOperand(0), index)};
      expr->row = index[index.size() - 2];
      expr->column = index.back();
      expr->shift = shape.back() - shape[shape.size() - 2];
      return expr;
    }
    return nullptr;
  }

  // RoPE of `input` at `index` ([B, S, H, D]): the pair holding it rotated by the
  // position's angle, or back by minus it (`inverse`, the VJP). With `positions`
  // (tl.rope_at) token s of sequence b is at positions[b] + s.
  ElementRef rotated(mlir::Value input, const Index &index, double theta, llvm::StringRef style, bool inverse,
                     mlir::Value positions = {}) {
    int64_t headDim = shapeOf(input).back();
    const IndexExpr &d = index.back();
    auto expr = std::make_shared<ElementExpr>();
    expr->kind = ElementExpr::Kind::Rope;
    expr->inverse = inverse;
    IndexExpr first, second;
    if (style == "adjacent") {
      expr->pair = d.floorDiv(2);
      first = expr->pair * 2;
      second = expr->pair * 2 + 1;
      expr->isSecond = d.mod(2);
    } else if (style == "half") {
      expr->pair = d.mod(headDim / 2);
      first = expr->pair;
      second = expr->pair + headDim / 2;
      expr->isSecond = d.floorDiv(headDim / 2);
    } else {
      context_.fail(fmt::format("rope style '{}' is not adjacent or half", style.str()));
    }
    Index firstIndex = index, secondIndex = index;
    firstIndex.back() = first;
    secondIndex.back() = second;
    expr->args = {at(input, firstIndex), at(input, secondIndex)};
    expr->position = index[1];
    if (positions) {
      expr->positions = context_.requireParam(positions, "positions");
      expr->sequence = index[0];
    }
    expr->theta = theta;
    expr->headDim = headDim;
    return expr;
  }

  // Every accumulator read must be of the row being computed: `row` linearizes the
  // leading coordinates back to the row variable m (checked at sample points).
  void checkAccumulatorRows(const Shape &leadShape, const IndexExpr &row, int64_t rows, int64_t columns) const {
    std::vector<int64_t> samples;
    for (int64_t m = 0; m < rows; m += std::max<int64_t>(1, rows / 2048)) samples.push_back(m);
    samples.push_back(rows - 1);
    for (const Index &lead : accumulatorRows_) {
      IndexExpr linear = linearize(lead, leadShape);
      for (int64_t m : samples)
        for (int64_t c : {int64_t(0), columns / 2, columns - 1})
          if (linear.evaluate({{"m", m}, {"c", c}, {"bt", 0}}) != row.evaluate({{"m", m}, {"bt", 0}}))
            context_.fail("an epilogue op reads the accumulator of another row");
    }
  }

private:
  const KernelContext &context_;
  mlir::Value accumulator_;
  std::vector<Index> accumulatorRows_;
};

// Where the element at `index` of a layout op's operand lands in its result: `index`
// relabeled through a head split, head merge or transpose. False for other ops.
bool relabelForward(mlir::Operation *op, Index &index) {
  if (auto transpose = llvm::dyn_cast<tl::TransposeOp>(op)) {
    Index out(index.size());
    for (size_t i = 0; i < index.size(); ++i) out[i] = index[size_t(transpose.getPerm()[i])];
    index = out;
  } else if (llvm::isa<tl::SplitHeadsOp>(op)) {
    int64_t headDim = shapeOf(op->getResult(0)).back();
    IndexExpr last = index.back();
    index.back() = last.floorDiv(headDim);
    index.push_back(last.mod(headDim));
  } else if (llvm::isa<tl::MergeHeadsOp>(op)) {
    int64_t headDim = shapeOf(op->getOperand(0)).back();
    IndexExpr last = index.back();
    index.pop_back();
    index.back() = index.back() * headDim + last;
  } else {
    return false;
  }
  return true;
}

// ---- generation's KV cache ------------------------------------------------------------

// Element `index` ([b, h, s, d] of the stored keys or values, `value`) of a
// tl.kv_cache_store, written into its layer of the cache [L, B, Hkv, T, D] at row s, or
// at the sequence's position positions[b] + s where the store has positions.
Store cacheStore(const KernelContext &context, tl::KvCacheStoreOp store, const Index &index, ElementRef value) {
  Shape cache = shapeOf(store.getCache());
  Store out;
  out.param = context.requireParam(store.getResult(), "cache");
  out.offset = linearize({IndexExpr(int64_t(store.getLayer())), index[0], index[1], index[2], index[3]}, cache);
  out.value = std::move(value);
  if (store.getPositions()) {
    out.cacheRow = {context.requireParam(store.getPositions(), "positions"), index[0], index[2]};
    out.stride = cache[4];
    out.context = cache[3];
  }
  return out;
}

// A stand-alone tl.kv_cache_store: an elementwise kernel over the stored keys or values,
// the cache's other rows untouched (it is written in place).
ElementwiseSpec buildCacheStore(KernelContext &context, tl::KvCacheStoreOp store) {
  Shape shape = shapeOf(store.getValue());
  ElementwiseSpec spec;
  spec.count = product(shape);
  Index index = delinearize(IndexExpr::variable("e", spec.count), shape);
  ElementPuller puller(context);
  spec.stores.push_back(cacheStore(context, store, index, puller.at(store.getValue(), index)));
  return spec;
}

// Decode attention over the cache (tl.cache_attention).
CacheAttentionSpec buildCacheAttention(KernelContext &context, tl::CacheAttentionOp attention) {
  CacheAttentionSpec spec;
  Shape q = shapeOf(attention.getQuery()), keys = shapeOf(attention.getKeys()), values = shapeOf(attention.getValues());
  spec.B = q[0];
  spec.H = q[1];
  spec.SQ = q[2];
  spec.D = q[3];
  spec.layers = keys[0];
  spec.HKV = keys[2];
  spec.context = keys[3];
  spec.DV = values[4];
  spec.layer = int64_t(attention.getLayer());
  spec.scale = attention.getScaleAttr().getValueAsDouble();
  spec.q = context.requireParam(attention.getQuery(), "query");
  spec.keys = context.requireParam(attention.getKeys(), "key cache");
  spec.values = context.requireParam(attention.getValues(), "value cache");
  spec.positions = context.requireParam(attention.getPositions(), "positions");
  spec.out = context.requireParam(attention.getResult(), "output");
  IndexExpr b = IndexExpr::variable("b", spec.B), h = IndexExpr::variable("h", spec.H),
            s = IndexExpr::variable("s", spec.SQ);
  spec.qRow = linearize({b, h, s, IndexExpr(0)}, q);
  spec.outRow = linearize({b, h, s, IndexExpr(0)}, shapeOf(attention.getResult()));
  return spec;
}

// ---- GEMMs --------------------------------------------------------------------------

// Where the accumulator's element (row m, column c of a group) lands in `value`: the
// layout ops on the path from the accumulator to `value`, applied forward. Returns the
// index, and the accumulator columns the group starts at and spans.
struct ForwardIndex {
  Index index;
  int64_t start = 0, width = 0;
};

class GemmBuilder {
public:
  GemmBuilder(KernelContext &context, mlir::Value accumulator, Shape leadShape)
      : context_(context), accumulator_(accumulator), leadShape_(std::move(leadShape)) {
    Shape accShape = shapeOf(accumulator);
    N_ = accShape.back();
    M_ = product(leadShape_);
  }

  IndexExpr row() const { return IndexExpr::variable("m", M_); }
  Index leadIndex() const { return delinearize(row(), leadShape_); }

  // Stores `stored` to argument `param`. A concatenation computed in the epilogue
  // (tl.split_grad: SwiGLU's d gate and d up) is stored piece by piece at its columns.
  void addOutput(mlir::Value stored, int param) {
    if (auto store = stored.getDefiningOp<tl::KvCacheStoreOp>(); store && context_.isComputed(stored)) {
      addCacheStore(store, param);
      return;
    }
    if (auto concat = stored.getDefiningOp<tl::SplitGradOp>(); concat && context_.isComputed(stored)) {
      int64_t column = 0;
      for (mlir::Value piece : concat.getPieces()) {
        addStore(piece, param, shapeOf(stored), column);
        column += shapeOf(piece).back();
      }
      return;
    }
    addStore(stored, param, shapeOf(stored), 0);
  }

  // Bands: accumulator ranges read at a fixed distance from the group's own columns
  // (the up half of a gate/up pair) become extra bands of the group's tiles.
  // A group whose columns are another's band and that reads nothing else (the up half,
  // saved for the backward beside SwiGLU's output) is stored from that group's tiles, so
  // its columns are not computed a second time.
  std::vector<GemmGroup> groups() {
    for (GemmGroup &group : groups_)
      for (int64_t delta : bandDeltas(group))
        if (delta >= 0 && std::find(group.bands.begin(), group.bands.end(), delta) == group.bands.end())
          group.bands.push_back(delta);
    for (size_t g = 0; g < groups_.size();) {
      auto host = std::find_if(groups_.begin(), groups_.end(), [&](const GemmGroup &other) {
        return &other != &groups_[g] && other.width == groups_[g].width && readsOnly(groups_[g], other.bands);
      });
      if (host == groups_.end()) {
        ++g;
        continue;
      }
      host->stores.insert(host->stores.end(), groups_[g].stores.begin(), groups_[g].stores.end());
      groups_.erase(groups_.begin() + g);
      g = 0;
    }
    return groups_;
  }

  int64_t M() const { return M_; }
  int64_t N() const { return N_; }

private:
  // The accumulator distance of each of the group's reads from its column c; -1 for a
  // read that is not c shifted (no band).
  static std::vector<int64_t> bandDeltas(const GemmGroup &group) {
    std::vector<int64_t> deltas;
    for (const Store &store : group.stores)
      for (const ElementExpr *leaf : leaves(store.value, ElementExpr::Kind::Accumulator)) {
        int64_t delta = leaf->column.evaluate({{"c", 0}, {"m", 0}});
        deltas.push_back(isShiftedIdentity(leaf->column, "c", group.width, delta, {{"m", 0}}) ? delta : -1);
      }
    return deltas;
  }
  // Whether every read of `group` lies in one of `bands`.
  static bool readsOnly(const GemmGroup &group, const std::vector<int64_t> &bands) {
    std::vector<int64_t> deltas = bandDeltas(group);
    return !deltas.empty() && llvm::all_of(deltas, [&](int64_t delta) { return llvm::is_contained(bands, delta); });
  }

  // `value` at the accumulator's row m and the group's column c, stored at its own index
  // shifted by `column` in the last dimension of an output of shape `out`.
  void addStore(mlir::Value value, int param, const Shape &out, int64_t column) {
    ForwardIndex forward = forwardIndex(value);
    ElementRef element = pull(value, forward);
    Index at = forward.index;
    at.back() = at.back() + column;
    groupOf(forward).stores.push_back({param, linearize(at, out), element});
  }

  // A tl.kv_cache_store computed in the epilogue: its keys or values go from the
  // accumulator into the cache (argument `param`), at each sequence's position.
  void addCacheStore(tl::KvCacheStoreOp store, int param) {
    ForwardIndex forward = forwardIndex(store.getValue());
    Store cached = cacheStore(context_, store, forward.index, pull(store.getValue(), forward));
    cached.param = param;
    groupOf(forward).stores.push_back(cached);
  }

  // `value` at its forward index, its accumulator reads checked to be of the row.
  ElementRef pull(mlir::Value value, const ForwardIndex &forward) {
    ElementPuller puller(context_, accumulator_);
    ElementRef element = puller.at(value, forward.index);
    puller.checkAccumulatorRows(leadShape_, row(), M_, forward.width);
    return element;
  }

  GemmGroup &groupOf(const ForwardIndex &forward) {
    for (GemmGroup &existing : groups_)
      if (existing.bands.front() == forward.start && existing.width == forward.width) return existing;
    groups_.push_back({forward.width, {forward.start}, {}});
    return groups_.back();
  }

  ForwardIndex forwardIndex(mlir::Value stored) {
    // The path from the accumulator: at each op, the first operand that depends on it.
    std::vector<std::pair<mlir::Operation *, mlir::Value>> path;  // op and its result on the path
    for (mlir::Value value = stored; value != accumulator_;) {
      mlir::Operation *op = value.getDefiningOp();
      if (!op || !context_.isComputed(value)) context_.fail("an output does not derive from the GEMM's result");
      path.emplace_back(op, value);
      mlir::Value next;
      for (mlir::Value operand : op->getOperands())
        if (dependsOnAccumulator(operand)) {
          next = operand;
          break;
        }
      if (!next) context_.fail("an output does not derive from the GEMM's result");
      value = next;
    }
    std::reverse(path.begin(), path.end());
    ForwardIndex forward{leadIndex(), 0, N_};
    forward.index.push_back(IndexExpr::variable("c", N_));
    for (size_t step = 0; step < path.size(); ++step) {
      auto [op, result] = path[step];
      Index &index = forward.index;
      if (auto split = llvm::dyn_cast<tl::SplitOp>(op)) {
        if (step != 0) context_.fail("a split inside an epilogue must apply to the GEMM's result");
        unsigned r = llvm::cast<mlir::OpResult>(result).getResultNumber();
        forward.start = 0;
        for (unsigned i = 0; i < r; ++i) forward.start += split.getSizes()[i];
        forward.width = split.getSizes()[r];
        index.back() = IndexExpr::variable("c", forward.width);
      } else if (relabelForward(op, index)) {
        // a head split or merge, a transpose
      } else if (llvm::isa<tl::SplitGradOp>(op)) {
        context_.fail("a concatenation in a GEMM epilogue must be stored, not read");
      } else if (findElementwiseOp(opName(op)) || op->hasTrait<tl::OpTrait::EpilogueFusable>() ||
                 llvm::isa<tl::CausalMaskOp>(op)) {
        // same element (RoPE: its pair)
      } else {
        context_.fail(fmt::format("'tl.{}' cannot run in a GEMM epilogue", opName(op)));
      }
    }
    return forward;
  }

  bool dependsOnAccumulator(mlir::Value value) {
    if (value == accumulator_) return true;
    if (!context_.isComputed(value)) return false;
    auto found = depends_.find(value);
    if (found != depends_.end()) return found->second;
    bool result = llvm::any_of(value.getDefiningOp()->getOperands(),
                               [&](mlir::Value operand) { return dependsOnAccumulator(operand); });
    depends_[value] = result;
    return result;
  }

  KernelContext &context_;
  mlir::Value accumulator_;
  Shape leadShape_;
  int64_t M_ = 0, N_ = 0;
  std::vector<GemmGroup> groups_;
  llvm::DenseMap<mlir::Value, bool> depends_;
};

// A's element [m, k] (after the prologue): an RMSNorm over A's rows is kept apart so
// the GEMM can apply it on the fly; what remains is a plain read, or elementwise ops the
// GEMM computes as it loads A.
void buildOperandA(KernelContext &context, GemmSpec &gemm, mlir::Value a, const Shape &leadShape) {
  Index index = delinearize(IndexExpr::variable("m", gemm.M), leadShape);
  index.push_back(IndexExpr::variable("k", gemm.K));
  mlir::Value source = a;
  if (auto norm = a.getDefiningOp<tl::RMSNormOp>(); norm && context.isComputed(a)) {
    gemm.rowNorm = true;
    gemm.eps = norm.getEpsAttr().getValueAsDouble();
    if (norm.getGain()) {  // none once tl-fold-norm-gain has moved it into the weight
      ElementPuller puller(context);
      ElementRef gain = puller.at(norm.getGain(), {IndexExpr::variable("k", gemm.K)});
      if (gain->kind != ElementExpr::Kind::Load || gain->offset.str() != "k")
        context.fail("an RMSNorm gain in a GEMM prologue must be a weight read as it is");
      gemm.gain = gain->param;
    }
    source = norm.getInput();
  }
  ElementPuller puller(context);
  ElementRef element = puller.at(source, index);
  if (element->kind != ElementExpr::Kind::Load) {
    gemm.aValue = element;
    return;
  }
  gemm.a = element->param;
  gemm.aOffset = element->offset;
}

} // namespace

bool fitsGemmPrologue(mlir::Operation *op, PrologueUse use) {
  if (use == PrologueUse::rmsnormGain) return false;  // buildOperandA takes the gain as a load
  if (llvm::isa<tl::RMSNormOp>(op)) return use == PrologueUse::a;
  return op->getNumResults() == 1 && op->hasTrait<tl::OpTrait::PerElement>();
}

std::string whyNotGemmEpilogue(mlir::Operation *op) {
  auto pairsOf = [](mlir::Value input, llvm::StringRef style) -> std::string {
    const int64_t head = llvm::cast<mlir::ShapedType>(input.getType()).getShape().back();
    if (style != "half" || (head > 0 && kFixedTile % head == 0)) return "";
    return fmt::format("its rotated pairs (i, i + {}) of a head of {} columns do not share one of the {}-column "
                       "tiles every target's GEMM runs",
                       head / 2, head, kFixedTile);
  };
  if (auto rope = llvm::dyn_cast<tl::RopeOp>(op)) return pairsOf(rope.getInput(), rope.getStyle());
  if (auto rope = llvm::dyn_cast<tl::RopeAtOp>(op)) return pairsOf(rope.getInput(), rope.getStyle());
  if (auto rope = llvm::dyn_cast<tl::RopeGradOp>(op)) return pairsOf(rope.getGrad(), rope.getStyle());
  return "";
}

namespace {

GemmSpec buildLinear(KernelContext &context, tl::LinearOp linear, mlir::Operation *foldedSplit) {
  GemmSpec gemm;
  Shape inShape = shapeOf(linear.getInput());
  Shape lead(inShape.begin(), inShape.end() - 1);
  gemm.K = inShape.back();
  gemm.N = shapeOf(linear.getWeight())[0];
  gemm.M = product(lead);
  buildOperandA(context, gemm, linear.getInput(), lead);
  gemm.b = context.requireParam(linear.getWeight(), "weight");
  gemm.bOffset = IndexExpr::variable("n", gemm.N) * gemm.K + IndexExpr::variable("k", gemm.K);
  GemmBuilder builder(context, linear.getResult(), lead);
  if (foldedSplit) {
    context.addComputed(foldedSplit);
    for (mlir::Value piece : foldedSplit->getResults()) builder.addOutput(piece, context.requireParam(piece, "split"));
  } else {
    builder.addOutput(linear.getResult(), context.requireParam(linear.getResult(), "result"));
  }
  gemm.groups = builder.groups();
  return gemm;
}

// A fused linear's shape, A and B; returns A's leading shape (its rows).
Shape fusedOperands(KernelContext &context, tl::FusedLinearOp fused, GemmSpec &gemm);

// The groups of a fused GEMM's epilogue (a fused linear's, dX's) whose results are stored
// to the kernel's arguments; `lead`: the accumulator's leading shape.
template <class Fused> std::vector<GemmGroup> storedGroups(KernelContext &context, Fused fused, const Shape &lead) {
  GemmBuilder builder(context, fused.getEpilogue().front().getArgument(0), lead);
  for (auto [result, yielded] : llvm::zip(fused.getResults(), fused.epilogueYield().getValues()))
    builder.addOutput(yielded, context.requireParam(result, "result"));
  return builder.groups();
}

GemmSpec buildFusedLinear(KernelContext &context, tl::FusedLinearOp fused) {
  context.addComputed(fused);
  GemmSpec gemm;
  Shape lead = fusedOperands(context, fused, gemm);
  gemm.groups = storedGroups(context, fused, lead);
  return gemm;
}

// The GEMM inside a fused linear's prologue (tl-fuse-gemv-chains): its one output is the
// reader's A, kept on chip, so its one store goes to no argument (param -1).
GemmSpec buildChainProducer(KernelContext &context, tl::FusedLinearOp producer) {
  GemmSpec gemm;
  Shape lead = fusedOperands(context, producer, gemm);
  GemmBuilder builder(context, producer.getEpilogue().front().getArgument(0), lead);
  builder.addOutput(producer.epilogueYield().getValues()[0], -1);
  gemm.groups = builder.groups();
  if (gemm.groups.size() != 1 || gemm.groups[0].stores.size() != 1 || gemm.groups[0].width != shapeOf(producer.getResult(0)).back())
    context.fail("a GEMM in a prologue must compute its reader's A as one group of columns");
  return gemm;
}

Shape fusedOperands(KernelContext &context, tl::FusedLinearOp fused, GemmSpec &gemm) {
  mlir::Value a = fused.prologueYield().getValues()[0];
  Shape aShape = shapeOf(a);
  Shape lead(aShape.begin(), aShape.end() - 1);
  gemm.K = aShape.back();
  gemm.N = shapeOf(fused.getWeight())[0];
  gemm.M = product(lead);
  if (auto producer = a.getDefiningOp<tl::FusedLinearOp>(); producer && context.isComputed(a)) {
    if (shapeOf(producer.getResult(0)) != aShape)
      context.fail("a GEMM in a prologue must yield its reader's A as it is");
    gemm.producer = std::make_shared<const GemmSpec>(buildChainProducer(context, producer));
  } else {
    buildOperandA(context, gemm, a, lead);
  }
  gemm.b = context.requireParam(fused.getWeight(), "weight");
  gemm.bOffset = IndexExpr::variable("n", gemm.N) * gemm.K + IndexExpr::variable("k", gemm.K);
  return lead;
}

GemmSpec buildBatchMatmul(KernelContext &context, tl::BatchMatmulOp matmul) {
  GemmSpec gemm;
  Shape a = shapeOf(matmul.getLhs()), b = shapeOf(matmul.getRhs()), out = shapeOf(matmul.getResult());
  size_t rank = a.size();
  Shape batchShape(a.begin(), a.end() - 2);
  gemm.batch = product(batchShape);
  gemm.M = a[rank - 2];
  gemm.K = a[rank - 1];
  gemm.N = out[rank - 1];
  gemm.bKN = !matmul.getTransposeB();
  IndexExpr bt = IndexExpr::variable("bt", gemm.batch), m = IndexExpr::variable("m", gemm.M),
            k = IndexExpr::variable("k", gemm.K), n = IndexExpr::variable("n", gemm.N);
  auto withBatch = [&](IndexExpr x, IndexExpr y) {
    Index index = delinearize(bt, batchShape);
    index.push_back(x);
    index.push_back(y);
    return index;
  };
  gemm.a = context.requireParam(matmul.getLhs(), "lhs");
  gemm.aOffset = linearize(withBatch(m, k), a);
  gemm.b = context.requireParam(matmul.getRhs(), "rhs");
  gemm.bOffset = gemm.bKN ? linearize(withBatch(k, n), b) : linearize(withBatch(n, k), b);
  GemmGroup group{gemm.N, {0}, {}};
  group.stores.push_back({context.requireParam(matmul.getResult(), "result"),
                          linearize(withBatch(m, IndexExpr::variable("c", gemm.N)), out),
                          ElementExpr::accumulator(IndexExpr::variable("c", gemm.N))});
  gemm.groups = {group};
  return gemm;
}

// A GEMM [M, N] with B stored [K, N], its epilogue not yet set; A's element [m, k] is
// element aOffset of `a`.
GemmSpec gemmKN(KernelContext &context, int64_t M, int64_t N, int64_t K, mlir::Value a, IndexExpr aOffset,
                mlir::Value b) {
  GemmSpec gemm;
  gemm.M = M;
  gemm.N = N;
  gemm.K = K;
  gemm.a = context.requireParam(a, "gradient");
  gemm.aOffset = std::move(aOffset);
  gemm.b = context.requireParam(b, "operand B");
  gemm.bKN = true;
  gemm.bOffset = IndexExpr::variable("k", K) * N + IndexExpr::variable("n", N);
  return gemm;
}

// The same with one output [M, N], row-major, no epilogue.
GemmSpec plainGemmKN(KernelContext &context, int64_t M, int64_t N, int64_t K, mlir::Value a, IndexExpr aOffset,
                     mlir::Value b, mlir::Value result) {
  GemmSpec gemm = gemmKN(context, M, N, K, a, std::move(aOffset), b);
  IndexExpr m = IndexExpr::variable("m", M), c = IndexExpr::variable("c", N);
  GemmGroup group{N, {0}, {}};
  group.stores.push_back({context.requireParam(result, "result"), m * N + c, ElementExpr::accumulator(c)});
  gemm.groups = {group};
  return gemm;
}

// dX = dY · W: A is dY [M, N] as it is, B is the weight [N, K] read as [k, n].
GemmSpec buildLinearGradInput(KernelContext &context, tl::LinearGradInputOp op) {
  Shape weight = shapeOf(op.getWeight());
  int64_t K = weight[0], N = weight[1], M = product(shapeOf(op.getGrad())) / K;
  return plainGemmKN(context, M, N, K, op.getGrad(), IndexExpr::variable("m", M) * K + IndexExpr::variable("k", K),
                     op.getWeight(), op.getResult());
}

// RMSNorm's backward: its arguments, and d y's unless it is `accumulator` (the GEMM's tile,
// when the backward is a dX GEMM's epilogue).
RowSpec normGradRows(KernelContext &context, tl::RMSNormGradOp norm, mlir::Value accumulator = {}) {
  RowSpec spec;
  spec.kind = RowSpec::Kind::RmsNormGrad;
  spec.x = context.requireParam(norm.getInput(), "input");
  spec.gain = context.requireParam(norm.getGain(), "gain");
  if (norm.getGrad() != accumulator) spec.dy = context.requireParam(norm.getGrad(), "gradient");
  spec.y = context.requireParam(norm.getInputGrad(), "input gradient");
  spec.gainGrad = context.requireParam(norm.getGainGrad(), "gain gradient");
  if (norm.getResidual()) spec.residual = context.requireParam(norm.getResidual(), "residual");
  if (norm.getNormalized()) spec.normalized = context.requireParam(norm.getNormalized(), "normalized input");
  spec.eps = norm.getEpsAttr().getValueAsDouble();
  return spec;
}

// The same GEMM with the ops that read dX in its epilogue (tl.fused_linear_grad_input).
GemmSpec buildFusedLinearGradInput(KernelContext &context, tl::FusedLinearGradInputOp fused) {
  context.addComputed(fused);
  Shape grad = shapeOf(fused.getGrad()), weight = shapeOf(fused.getWeight());
  Shape lead(grad.begin(), grad.end() - 1);
  int64_t K = weight[0], N = weight[1], M = product(lead);
  GemmSpec gemm = gemmKN(context, M, N, K, fused.getGrad(),
                         IndexExpr::variable("m", M) * K + IndexExpr::variable("k", K), fused.getWeight());
  if (fused.isRowEpilogue()) {
    auto norm = llvm::dyn_cast<tl::RMSNormGradOp>(fused.rowEpilogueOp());
    if (!norm) context.fail(fmt::format("'{}' has no GEMM epilogue", fused.rowEpilogueOp()->getName().getStringRef().str()));
    mlir::Value accumulator = fused.getEpilogue().front().getArgument(0);
    if (norm.getGrad() != accumulator)
      context.fail("RMSNorm's backward in a GEMM epilogue must take the accumulator as its gradient");
    gemm.normGrad = normGradRows(context, norm, accumulator);
    gemm.groups = {GemmGroup{N, {0}, {}}};
    return gemm;
  }
  gemm.groups = storedGroups(context, fused, lead);
  return gemm;
}

// dW = dYᵀ · X, summed over the tokens: the GEMM's rows are dY's columns, its depth the
// tokens; A is dY read down its columns (stored [K, M]), B is X [tokens, K] read as [k, n].
GemmSpec buildLinearGradWeight(KernelContext &context, tl::LinearGradWeightOp op) {
  Shape grad = shapeOf(op.getGrad());
  int64_t M = grad.back(), N = shapeOf(op.getInput()).back(), K = product(grad) / M;
  return plainGemmKN(context, M, N, K, op.getGrad(), IndexExpr::variable("k", K) * M + IndexExpr::variable("m", M),
                     op.getInput(), op.getResult());
}

// ---- the others -----------------------------------------------------------------------

// The shapes, scale and rows of an attention over q, k, v with output `out`.
AttentionSpec attentionShape(KernelContext &context, mlir::Value query, mlir::Value key, mlir::Value value,
                             mlir::Value out, bool causal, double scale) {
  AttentionSpec spec;
  Shape q = shapeOf(query), k = shapeOf(key), v = shapeOf(value);
  spec.B = q[0];
  spec.H = q[1];
  spec.SQ = q[2];
  spec.D = q[3];
  spec.HKV = k[1];
  spec.SK = k[2];
  spec.DV = v[3];
  spec.causal = causal;
  spec.scale = scale;
  IndexExpr b = IndexExpr::variable("b", spec.B), h = IndexExpr::variable("h", spec.H),
            hkv = IndexExpr::variable("h", spec.HKV), sq = IndexExpr::variable("s", spec.SQ),
            sk = IndexExpr::variable("s", spec.SK);
  spec.q = context.requireParam(query, "query");
  spec.k = context.requireParam(key, "key");
  spec.v = context.requireParam(value, "value");
  spec.out = context.requireParam(out, "output");
  spec.qRow = linearize({b, h, sq, IndexExpr(0)}, q);
  spec.kRow = linearize({b, hkv, sk, IndexExpr(0)}, k);
  spec.vRow = linearize({b, hkv, sk, IndexExpr(0)}, v);
  spec.outRow = linearize({b, h, sq, IndexExpr(0)}, shapeOf(out));
  return spec;
}

AttentionSpec buildAttention(KernelContext &context, tl::FlashAttentionOp attention) {
  AttentionSpec spec = attentionShape(context, attention.getQuery(), attention.getKey(), attention.getValue(),
                                      attention.getResult(), attention.getCausal(),
                                      attention.getScaleAttr().getValueAsDouble());
  if (attention.getLse()) spec.lse = context.requireParam(attention.getLse(), "log-sum-exp");
  return spec;
}

AttentionGradSpec buildAttentionGrad(KernelContext &context, tl::FlashAttentionGradOp grad) {
  AttentionGradSpec spec;
  spec.forward = attentionShape(context, grad.getQuery(), grad.getKey(), grad.getValue(), grad.getOutput(),
                                grad.getCausal(), grad.getScaleAttr().getValueAsDouble());
  spec.forward.lse = context.requireParam(grad.getLse(), "log-sum-exp");
  spec.dout = context.requireParam(grad.getGrad(), "output gradient");
  spec.dq = context.requireParam(grad.getQueryGrad(), "query gradient");
  spec.dk = context.requireParam(grad.getKeyGrad(), "key gradient");
  spec.dv = context.requireParam(grad.getValueGrad(), "value gradient");
  spec.dqRows.row = spec.forward.qRow;
  spec.dkRows.row = spec.forward.kRow;
  spec.dvRows.row = spec.forward.vRow;
  return spec;
}

// Where a fused attention backward stores the gradient `grad` (an epilogue argument,
// [B, heads, S, D]): its one chain of readers (layout ops, at most one tl.rope_grad by
// sequence position) to a yielded value or a piece of a yielded
// concatenation, as the output argument (`param`) and the offset of row (b, h, s), its
// D columns contiguous after it.
GradRows fusedGradRows(KernelContext &context, tl::FusedFlashAttentionGradOp fused, mlir::BlockArgument grad,
                       int &param) {
  Shape shape = shapeOf(grad);
  IndexExpr d = IndexExpr::variable("d", shape[3]);
  Index index{IndexExpr::variable("b", shape[0]), IndexExpr::variable("h", shape[1]), IndexExpr::variable("s", shape[2]),
              d};
  GradRows rows;
  mlir::Value value = grad;
  while (true) {
    if (!value.hasOneUse()) context.fail("a gradient of a fused attention backward must have one reader");
    mlir::OpOperand &use = *value.getUses().begin();
    mlir::Operation *user = use.getOwner();
    if (auto concat = llvm::dyn_cast<tl::SplitGradOp>(user)) {
      for (unsigned i = 0; i < use.getOperandNumber(); ++i) index.back() = index.back() + shapeOf(concat.getPieces()[i]).back();
      value = concat.getResult();
      if (!value.hasOneUse() || !llvm::isa<tl::YieldOp>(*value.getUsers().begin()))
        context.fail("a concatenation in a fused attention backward must be yielded");
      continue;
    }
    if (llvm::isa<tl::YieldOp>(user)) {
      param = context.requireParam(fused.getResult(use.getOperandNumber()), "result");
      break;
    }
    if (relabelForward(user, index)) {
      // a head split or merge, a transpose
    } else if (auto rope = llvm::dyn_cast<tl::RopeGradOp>(user)) {
      // The pairs of column d at sequence position s, (2i, 2i+1) or (i, i + D/2): what the
      // store hook rotates, given columns c, c+1, c + D/2, c + D/2 + 1 together.
      if (rows.ropeTheta != 0 || index.size() != 4 || index[1].str() != "s" || index[3].str() != "d" ||
          shape[3] % 4 != 0)
        context.fail("a fused attention backward applies RoPE's inverse once, to pairs of its rows' columns (head "
                     "size a multiple of 4)");
      rows.ropeTheta = rope.getThetaAttr().getValueAsDouble();
      rows.ropeHalves = rope.getStyle() == "half";
    } else {
      context.fail(fmt::format("'tl.{}' cannot run in a fused attention backward's stores", opName(user)));
    }
    value = user->getResult(0);
  }
  IndexExpr offset = linearize(index, shapeOf(value));
  rows.row = offset.substitute("d", IndexExpr(0));
  for (int64_t b : {int64_t(0), shape[0] - 1})
    for (int64_t s : {int64_t(0), shape[2] - 1})
      for (int64_t h = 0; h < shape[1]; ++h)
        for (int64_t c = 0; c < shape[3]; ++c) {
          std::map<std::string, int64_t> at{{"b", b}, {"h", h}, {"s", s}, {"d", c}};
          if (offset.evaluate(at) != rows.row.evaluate(at) + c)
            context.fail("a fused attention backward must store each gradient row's columns contiguously");
        }
  return rows;
}

// Flash attention's backward storing its gradients through the epilogue's layout ops and
// RoPE inverse (tl.fused_flash_attention_grad).
AttentionGradSpec buildFusedAttentionGrad(KernelContext &context, tl::FusedFlashAttentionGradOp fused) {
  context.addComputed(fused);
  AttentionGradSpec spec;
  spec.forward = attentionShape(context, fused.getQuery(), fused.getKey(), fused.getValue(), fused.getOutput(),
                                fused.getCausal(), fused.getScaleAttr().getValueAsDouble());
  spec.forward.lse = context.requireParam(fused.getLse(), "log-sum-exp");
  spec.dout = context.requireParam(fused.getGrad(), "output gradient");
  mlir::Block &epilogue = fused.getEpilogue().front();
  spec.dqRows = fusedGradRows(context, fused, epilogue.getArgument(0), spec.dq);
  spec.dkRows = fusedGradRows(context, fused, epilogue.getArgument(1), spec.dk);
  spec.dvRows = fusedGradRows(context, fused, epilogue.getArgument(2), spec.dv);
  return spec;
}

RowSpec buildRows(KernelContext &context, mlir::Operation *op) {
  RowSpec spec;
  // The loss and its gradient read the same operands: logits [B, S, V] and the ids.
  auto crossEntropy = [&](RowSpec::Kind kind, auto loss) {
    spec.kind = kind;
    spec.x = context.requireParam(loss.getLogits(), "logits");
    spec.ids = context.requireParam(loss.getIds(), "ids");
    spec.y = context.requireParam(loss.getResult(), "result");
    Shape logits = shapeOf(loss.getLogits());
    spec.batch = logits[0];
    spec.seq = logits[1];
  };
  if (auto norm = llvm::dyn_cast<tl::RMSNormOp>(op)) {
    spec.kind = RowSpec::Kind::RmsNorm;
    spec.x = context.requireParam(norm.getInput(), "input");
    if (norm.getGain()) spec.gain = context.requireParam(norm.getGain(), "gain");
    spec.y = context.requireParam(norm.getResult(), "result");
    spec.eps = norm.getEpsAttr().getValueAsDouble();
  } else if (auto softmax = llvm::dyn_cast<tl::SoftmaxOp>(op)) {
    spec.kind = RowSpec::Kind::Softmax;
    spec.x = context.requireParam(softmax.getInput(), "input");
    spec.y = context.requireParam(softmax.getResult(), "result");
  } else if (auto embedding = llvm::dyn_cast<tl::EmbeddingOp>(op)) {
    spec.kind = RowSpec::Kind::Embedding;
    spec.x = context.requireParam(embedding.getTable(), "table");
    spec.ids = context.requireParam(embedding.getIds(), "ids");
    spec.y = context.requireParam(embedding.getResult(), "result");
  } else if (auto norm = llvm::dyn_cast<tl::RMSNormGradOp>(op)) {
    spec = normGradRows(context, norm);
  } else if (auto softmax = llvm::dyn_cast<tl::SoftmaxGradOp>(op)) {
    spec.kind = RowSpec::Kind::SoftmaxGrad;
    spec.x = context.requireParam(softmax.getResult(), "softmax");
    spec.dy = context.requireParam(softmax.getGrad(), "gradient");
    spec.y = context.requireParam(softmax.getInputGrad(), "input gradient");
  } else if (auto loss = llvm::dyn_cast<tl::CrossEntropyGradOp>(op)) {
    crossEntropy(RowSpec::Kind::CrossEntropyGrad, loss);
    if (loss.getLoss()) spec.loss = context.requireParam(loss.getLoss(), "loss");
  } else if (auto embedding = llvm::dyn_cast<tl::EmbeddingGradOp>(op)) {
    spec.kind = RowSpec::Kind::EmbeddingGrad;
    spec.dy = context.requireParam(embedding.getGrad(), "gradient");
    spec.ids = context.requireParam(embedding.getIds(), "ids");
    spec.y = context.requireParam(embedding.getResult(), "result");
    spec.tokens = product(shapeOf(embedding.getIds()));
  } else {
    crossEntropy(RowSpec::Kind::CrossEntropy, llvm::cast<tl::CrossEntropyOp>(op));
  }
  Shape shape = shapeOf(op->getResult(0));
  if (spec.kind == RowSpec::Kind::CrossEntropy) shape = shapeOf(op->getOperand(0));
  spec.cols = shape.back();
  spec.rows = product(shape) / std::max<int64_t>(spec.cols, 1);
  return spec;
}

// The optimizer kernel's ops, read off the Program kernel (its adamw ops are one kernel
// made of several IR ops, with the tl.concat_grad ops that split the merged weights'
// gradients into the pieces they read).
OptimizerSpec buildOptimizer(KernelContext &context, const Program &program) {
  OptimizerSpec spec;
  const Kernel &kernel = context.kernel();
  std::map<int, std::pair<int, int64_t>> pieces;  // a concat_grad result: its merged gradient's argument, offset
  for (const OpRecord &op : kernel.ops) {
    if (op.kind == OpKind::global_norm) {
      spec.kind = OptimizerSpec::Kind::GlobalNorm;
      for (int id : op.operands) {
        spec.grads.push_back(context.paramOfId(id));
        spec.offsets.push_back(0);
        spec.counts.push_back(program.value(id).numElements());
      }
      spec.norm = context.paramOfId(op.results.at(0));
      continue;
    }
    if (op.kind == OpKind::concat_grad) {
      for (int id : op.results) pieces[id] = {context.paramOfId(op.operands.at(0)), pieceOffset(program, op, id)};
      continue;
    }
    if (op.kind != OpKind::adamw) context.fail(fmt::format("'tl.{}' in the optimizer's kernel", opKindName(op.kind)));
    auto piece = pieces.find(op.operands.at(0));
    spec.grads.push_back(piece != pieces.end() ? piece->second.first : context.paramOfId(op.operands[0]));
    spec.offsets.push_back(piece != pieces.end() ? piece->second.second : 0);
    spec.pieces += piece != pieces.end();
    spec.counts.push_back(program.value(op.operands[0]).numElements());
    if (op.operands.size() == 2) {
      int norm = context.paramOfId(op.operands[1]);
      if (spec.gradNorm >= 0 && spec.gradNorm != norm) context.fail("the updates read different gradient norms");
      spec.gradNorm = norm;
      spec.maxGradNorm = op.floatAttr("max_grad_norm");
    }
    double values[] = {op.floatAttr("lr"), op.floatAttr("beta1"), op.floatAttr("beta2"), op.floatAttr("eps"),
                       op.floatAttr("weight_decay")};
    if (spec.grads.size() > 1 && (values[0] != spec.lr || values[1] != spec.beta1 || values[2] != spec.beta2 ||
                                  values[3] != spec.eps || values[4] != spec.weightDecay))
      context.fail("the updates have different AdamW hyperparameters");
    spec.lr = values[0];
    spec.beta1 = values[1];
    spec.beta2 = values[2];
    spec.eps = values[3];
    spec.weightDecay = values[4];
  }
  for (int param : spec.grads)
    if (param < 0) context.fail("a gradient is not one of the kernel's arguments");
  return spec;
}

// An elementwise kernel: `op` (one op, or a tl.fused_elementwise and its chain) is
// computed in registers and each of `values` stored as the kernel's result of the same
// index in `results`, element by element over its own shape. A concatenation computed
// here (tl.split_grad) is stored piece by piece at its columns, never joined.
ElementwiseSpec buildElementwise(KernelContext &context, mlir::Operation *op, mlir::ValueRange results,
                                 mlir::ValueRange values) {
  context.addComputed(op);
  ElementwiseSpec spec;
  ElementPuller puller(context);
  for (auto [result, value] : llvm::zip(results, values)) {
    int param = context.requireParam(result, "result");
    Shape out = shapeOf(result);
    llvm::SmallVector<std::pair<mlir::Value, int64_t>> pieces{{value, 0}};  // and their first columns
    if (auto concat = value.getDefiningOp<tl::SplitGradOp>(); concat && context.isComputed(value)) {
      pieces.clear();
      int64_t column = 0;
      for (mlir::Value piece : concat.getPieces()) {
        pieces.push_back({piece, column});
        column += shapeOf(piece).back();
      }
    }
    for (auto [piece, column] : pieces) {
      Shape shape = shapeOf(piece);
      int64_t count = product(shape);
      IndexExpr e = IndexExpr::variable("e", count);
      Index index = delinearize(e, shape);
      Store store{param, e, puller.at(piece, index)};
      if (shape != out) {
        index.back() = index.back() + column;
        store.offset = linearize(index, out);
      }
      // Results smaller than the loop (pieces of a split) are written where e is inside them.
      store.limit = count;
      spec.stores.push_back(store);
      spec.count = std::max(spec.count, count);
    }
  }
  for (Store &store : spec.stores)
    if (store.limit == spec.count) store.limit = -1;
  return spec;
}

} // namespace

KernelSpec buildKernelSpec(const Program &program, const Kernel &kernel, const KernelRoot &root,
                           const ValueIds &idOf) {
  KernelSpec spec;
  spec.entry = kernel.name;
  if (llvm::isa<tl::AllReduceOp>(root.op)) {
    spec.collective = true;
    return spec;
  }
  KernelContext context(program, kernel, idOf);
  spec.params = context.params();
  spec.chained = root.chained;
  mlir::Operation *op = root.op;
  if (auto linear = llvm::dyn_cast<tl::LinearOp>(op)) spec.body = buildLinear(context, linear, root.foldedSplit);
  else if (auto fused = llvm::dyn_cast<tl::FusedLinearOp>(op)) spec.body = buildFusedLinear(context, fused);
  else if (auto matmul = llvm::dyn_cast<tl::BatchMatmulOp>(op)) spec.body = buildBatchMatmul(context, matmul);
  else if (auto attention = llvm::dyn_cast<tl::FlashAttentionOp>(op)) spec.body = buildAttention(context, attention);
  else if (auto attention = llvm::dyn_cast<tl::CacheAttentionOp>(op)) spec.body = buildCacheAttention(context, attention);
  else if (auto store = llvm::dyn_cast<tl::KvCacheStoreOp>(op)) spec.body = buildCacheStore(context, store);
  else if (auto grad = llvm::dyn_cast<tl::FlashAttentionGradOp>(op)) spec.body = buildAttentionGrad(context, grad);
  else if (auto grad = llvm::dyn_cast<tl::FusedFlashAttentionGradOp>(op))
    spec.body = buildFusedAttentionGrad(context, grad);
  else if (auto grad = llvm::dyn_cast<tl::LinearGradInputOp>(op)) spec.body = buildLinearGradInput(context, grad);
  else if (auto grad = llvm::dyn_cast<tl::FusedLinearGradInputOp>(op))
    spec.body = buildFusedLinearGradInput(context, grad);
  else if (auto grad = llvm::dyn_cast<tl::LinearGradWeightOp>(op)) spec.body = buildLinearGradWeight(context, grad);
  else if (auto chain = llvm::dyn_cast<tl::FusedElementwiseOp>(op))
    spec.body = buildElementwise(context, chain, chain.getResults(), chain.bodyYield().getValues());
  else if (llvm::isa<tl::AdamWOp, tl::GlobalNormOp>(op)) spec.body = buildOptimizer(context, program);
  else if (llvm::isa<tl::RMSNormOp, tl::SoftmaxOp, tl::EmbeddingOp, tl::CrossEntropyOp, tl::RMSNormGradOp,
                     tl::SoftmaxGradOp, tl::CrossEntropyGradOp, tl::EmbeddingGradOp>(op))
    spec.body = buildRows(context, op);
  else spec.body = buildElementwise(context, op, op->getResults(), op->getResults());
  if (root.foldedSplit && !llvm::isa<tl::LinearOp>(op))
    context.fail("only a linear's result can be split by its own kernel");
  return spec;
}

} // namespace tlc::codegen
