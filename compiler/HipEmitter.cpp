#include "compiler/HipEmitter.h"

#include "compiler/Targets.h"
#include "runtime/Error.h"
#include "runtime/Tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <sys/stat.h>

namespace tlc {
namespace {

using Shape = std::vector<int64_t>;

int64_t product(const Shape &shape, size_t begin = 0, size_t end = size_t(-1)) {
  int64_t count = 1;
  for (size_t i = begin; i < std::min(end, shape.size()); ++i) count *= shape[i];
  return count;
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int kThreads = 256;     // TL_THREADS in the prelude
constexpr int kTile = 64;         // TL_BM, TL_BN
constexpr int kFlashKeys = 256;   // keys per online-softmax step (one per thread)
constexpr int kFlashMaxDim = 1024;

const char *cType(DType dtype) {
  switch (dtype) {
  case DType::F32: return "float";
  case DType::BF16: return "tl_bf16";
  case DType::I32: return "int";
  }
  return "float";
}

// A literal that reads back as the same double.
std::string literal(double value) { return fmt::format("{:.17g}", value); }

// Where a value lives inside the kernel: a pointer expression and its element type.
struct Buf {
  std::string ptr;
  DType dtype = DType::F32;
  bool local = false;
};

class KernelEmitter {
public:
  KernelEmitter(const Program &program, const Kernel &kernel) : program_(program), kernel_(kernel) {}

  std::string emit(const std::string &entry) {
    std::vector<std::string> params;
    for (size_t i = 0; i < kernel_.inputs.size(); ++i) {
      int id = kernel_.inputs[i];
      const Value &value = program_.value(id);
      std::string name = fmt::format("in{}", i);
      bind(id, {name, value.dtype, false}, name);
      params.push_back(fmt::format("const {} *__restrict__ {}", cType(value.dtype), name));
      signature_.push_back(fmt::format("{}: {}[{}]", name, dtypeName(value.dtype), shapeString(value.shape)));
    }
    for (size_t i = 0; i < kernel_.outputs.size(); ++i) {
      int id = kernel_.outputs[i];
      const Value &value = program_.value(id);
      std::string name = fmt::format("out{}", i);
      bind(id, {name, value.dtype, false}, name);
      params.push_back(fmt::format("{} *{}", cType(value.dtype), name));
      signature_.push_back(fmt::format("{}: {}[{}]", name, dtypeName(value.dtype), shapeString(value.shape)));
    }
    params.push_back("float *__restrict__ ws");
    params.push_back("unsigned *bar");

    for (size_t i = 0; i < kernel_.ops.size(); ++i) emitOp(i);  // may consume the ops it folds
    closePhase();

    std::ostringstream out;
    out << fmt::format("// {}: {} op{} in {} phase{}{}.\n", entry, kernel_.ops.size(),
                       kernel_.ops.size() == 1 ? "" : "s", phases_.size(), phases_.size() == 1 ? "" : "s",
                       phases_.size() > 1 ? " separated by grid-wide barriers" : "");
    out << "//   reads/writes: " << fmt::format("{}", fmt::join(signature_, ", ")) << "\n";
    for (const std::string &line : description_) out << "//   " << line << "\n";
    out << "extern \"C\" __global__ void __launch_bounds__(TL_THREADS)\n" << entry << "("
        << fmt::format("{}", fmt::join(params, ", ")) << ") {\n";
    if (usesSmem_) out << "  __shared__ float tl_smem[" << smemFloats_ << "];\n";
    out << "  __shared__ float tl_red[TL_THREADS / 32];\n";
    out << "  (void)tl_red; (void)ws; (void)bar;\n";
    for (const std::string &line : locals_) out << "  " << line << "\n";
    for (size_t p = 0; p < phases_.size(); ++p) {
      if (p) out << "  tl_grid_sync(bar);\n";
      out << phases_[p];
    }
    out << "}\n";
    return out.str();
  }

  int64_t gridBlocks() const { return gridBlocks_; }
  int phases() const { return int(phases_.size()); }
  int64_t workspaceBytes() const { return workspaceFloats_ * 4; }

private:
  // ---- values ---------------------------------------------------------------------

  void bind(int id, Buf buf, const std::string &role) {
    bufs_[id] = std::move(buf);
    roles_[id] = role;
  }

  const Buf &buf(int id) {
    auto found = bufs_.find(id);
    if (found != bufs_.end()) return found->second;
    const Value &value = program_.value(id);
    if (value.storage != Storage::Local)
      fail(fmt::format("value '{}' ({}) is neither a kernel input or output nor a Local", value.name,
                       storageName(value.storage)));
    std::string name = fmt::format("t{}", localCount_++);
    locals_.push_back(fmt::format("float *{} = ws + {};  // {}[{}]", name, workspaceFloats_, dtypeName(DType::F32),
                                  shapeString(value.shape)));
    workspaceFloats_ += ceilDiv(value.numElements(), 64) * 64;  // 256-byte aligned
    bind(id, {name, DType::F32, true}, name);
    return bufs_[id];
  }

  // fp32 scratch in the workspace, not tied to a value.
  std::string scratch(int64_t floats) {
    std::string name = fmt::format("t{}", localCount_++);
    locals_.push_back(fmt::format("float *{} = ws + {};  // scratch", name, workspaceFloats_));
    workspaceFloats_ += ceilDiv(floats, 64) * 64;
    return name;
  }

  const Shape &shape(int id) const { return program_.value(id).shape; }
  std::string role(int id) {
    buf(id);
    return roles_[id];
  }
  std::string ld(int id, const std::string &index) { return fmt::format("tl_ld({}, {})", buf(id).ptr, index); }
  std::string st(int id, const std::string &index, const std::string &value) {
    return fmt::format("tl_st({}, {}, {});", buf(id).ptr, index, value);
  }

  [[noreturn]] void fail(const std::string &message) const {
    throw Error(fmt::format("hip emitter: kernel '{}': {}", kernel_.name, message));
  }

  // ---- phases ---------------------------------------------------------------------

  // An op reading a value computed in the open phase starts a new phase.
  void needs(const std::vector<int> &operands) {
    for (int id : operands)
      if (producedInPhase_.count(id)) {
        closePhase();
        return;
      }
  }
  void closePhase() {
    if (current_.empty()) return;
    phases_.push_back(current_);
    current_.clear();
    producedInPhase_.clear();
  }
  void produced(const std::vector<int> &results) { producedInPhase_.insert(results.begin(), results.end()); }
  void code(const std::string &text) { current_ += text; }
  void work(int64_t blocks) { gridBlocks_ = std::max(gridBlocks_, std::max<int64_t>(blocks, 1)); }

  void describe(const OpRecord &op, const std::string &extra = "") {
    std::vector<std::string> operands, results;
    for (int id : op.operands) operands.push_back(role(id));
    for (int id : op.results) results.push_back(role(id));
    description_.push_back(fmt::format("{}: {}({}) -> {}{}", phases_.size() + 1, op.op, fmt::join(operands, ", "),
                                       fmt::join(results, ", "), extra.empty() ? "" : "  " + extra));
  }

  std::string elementLoop(int64_t count, const std::string &body) {
    work(ceilDiv(count, kThreads));
    return fmt::format("  for (tl_i64 e = (tl_i64)blockIdx.x * TL_THREADS + threadIdx.x; e < {}; "
                       "e += (tl_i64)gridDim.x * TL_THREADS) {{\n{}  }}\n",
                       count, body);
  }
  std::string rowLoop(int64_t rows, const std::string &body) {
    work(rows);
    return fmt::format("  for (tl_i64 row = blockIdx.x; row < {}; row += gridDim.x) {{\n{}  }}\n", rows, body);
  }

  // ---- ops ------------------------------------------------------------------------

  void emitOp(size_t &index) {
    const OpRecord &op = kernel_.ops[index];
    const std::string &name = op.op;
    // Reshapes of Locals are free: the result is the same fp32 buffer.
    if ((name == "split_heads" || name == "merge_heads") && op.results.size() == 1 && op.operands.size() == 1 &&
        program_.value(op.results[0]).storage == Storage::Local) {
      const Buf &source = buf(op.operands[0]);
      bind(op.results[0], source, roles_[op.operands[0]]);
      if (producedInPhase_.count(op.operands[0])) producedInPhase_.insert(op.results[0]);
      return;
    }
    needs(op.operands);
    if (name == "linear" || name == "batch_matmul") {
      gemm(op, index);
      return;
    }
    for (int id : op.results) buf(id);  // results get names before the description
    describe(op, attrText(op));
    if (name == "embedding") embedding(op);
    else if (name == "rmsnorm") rmsnorm(op);
    else if (name == "softmax") softmax(op);
    else if (name == "flash_attention") flashAttention(op);
    else if (name == "cross_entropy") crossEntropy(op);
    else if (name == "scale" || name == "silu") unary(op);
    else if (name == "add" || name == "mul" || name == "swiglu") binary(op);
    else if (name == "causal_mask") causalMask(op);
    else if (name == "rope") rope(op);
    else if (name == "transpose") transpose(op);
    else if (name == "repeat_kv") repeatKv(op);
    else if (name == "split_heads" || name == "merge_heads") copy(op);
    else if (name == "concat") concat(op);
    else if (name == "split") split(op);
    else fail(fmt::format("no GPU code for op '{}'", name));
    produced(op.results);
  }

  static std::string attrText(const OpRecord &op) {
    std::vector<std::string> parts;
    for (const auto &[key, value] : op.attrs) {
      if (auto *i = std::get_if<int64_t>(&value)) parts.push_back(fmt::format("{}={}", key, *i));
      else if (auto *d = std::get_if<double>(&value)) parts.push_back(fmt::format("{}={}", key, *d));
      else if (auto *s = std::get_if<std::string>(&value)) parts.push_back(fmt::format("{}={}", key, *s));
      else if (auto *v = std::get_if<std::vector<int64_t>>(&value))
        parts.push_back(fmt::format("{}=[{}]", key, fmt::join(*v, ",")));
    }
    return parts.empty() ? "" : fmt::format("({})", fmt::join(parts, ", "));
  }

  void expectCount(const OpRecord &op, size_t operands, size_t results) const {
    if (op.operands.size() != operands || op.results.size() != results)
      fail(fmt::format("op '{}' has {} operands and {} results, expected {} and {}", op.op, op.operands.size(),
                       op.results.size(), operands, results));
  }

  // How many later ops read `id`, and whether it leaves the kernel.
  bool usedOnlyBy(int id, size_t consumer) const {
    if (std::find(kernel_.outputs.begin(), kernel_.outputs.end(), id) != kernel_.outputs.end()) return false;
    for (size_t i = 0; i < kernel_.ops.size(); ++i) {
      if (i == consumer) continue;
      const auto &operands = kernel_.ops[i].operands;
      if (std::find(operands.begin(), operands.end(), id) != operands.end()) return false;
    }
    return true;
  }

  // linear / batch_matmul through tl_gemm, with the elementwise ops that directly consume
  // its result folded into the store (the epilogue).
  void gemm(const OpRecord &op, size_t &index) {
    expectCount(op, 2, 1);
    const Shape &a = shape(op.operands[0]), &b = shape(op.operands[1]);
    int64_t batch = 1, M, N, K;
    bool transposedB = true;
    std::string aIndex, bIndex;
    if (op.op == "linear") {
      K = a.back();
      M = product(a) / K;
      N = b[0];
      if (b.size() != 2 || b[1] != K) fail("linear: weight shape does not match the input");
      aIndex = fmt::format("m * {} + k", K);
      bIndex = fmt::format("n * {} + k", K);
    } else {
      size_t rank = a.size();
      transposedB = op.intAttr("transpose_b") != 0;
      M = a[rank - 2];
      K = a[rank - 1];
      N = transposedB ? b[rank - 2] : b[rank - 1];
      batch = product(a, 0, rank - 2);
      aIndex = fmt::format("(bt * {} + m) * {} + k", M, K);
      bIndex = transposedB ? fmt::format("(bt * {} + n) * {} + k", N, K) : fmt::format("(bt * {} + k) * {} + n", K, N);
    }
    // The epilogue: elementwise ops on the accumulator, in order, while each consumes the
    // previous result alone and its other operand is already in memory.
    int chain = op.results[0];
    std::string value = "v";
    std::vector<std::string> steps;
    std::vector<const OpRecord *> folded;
    size_t next = index + 1;
    for (; next < kernel_.ops.size(); ++next) {
      const OpRecord &consumer = kernel_.ops[next];
      static const std::set<std::string> foldable = {"add", "mul", "swiglu", "silu", "scale"};
      if (!foldable.count(consumer.op) || consumer.results.size() != 1) break;
      if (std::find(consumer.operands.begin(), consumer.operands.end(), chain) == consumer.operands.end()) break;
      if (!usedOnlyBy(chain, next) || shape(consumer.results[0]) != shape(chain)) break;
      bool ok = true;
      for (int id : consumer.operands)
        if (id != chain && (producedInPhase_.count(id) || shape(id) != shape(chain))) ok = false;
      if (std::count(consumer.operands.begin(), consumer.operands.end(), chain) != 1) ok = false;
      if (!ok) break;
      auto operand = [&](size_t i) {
        return consumer.operands[i] == chain ? value : ld(consumer.operands[i], "e");
      };
      std::string expr;
      if (consumer.op == "add") expr = fmt::format("{} + {}", operand(0), operand(1));
      else if (consumer.op == "mul") expr = fmt::format("{} * {}", operand(0), operand(1));
      else if (consumer.op == "swiglu") expr = fmt::format("tl_silu({}) * {}", operand(0), operand(1));
      else if (consumer.op == "silu") expr = fmt::format("tl_silu({})", operand(0));
      else expr = fmt::format("(float)((double){} * {})", operand(0), literal(consumer.floatAttr("factor")));
      steps.push_back(fmt::format("      v = {};\n", expr));
      folded.push_back(&consumer);
      chain = consumer.results[0];
    }
    // A folded accumulator never reaches memory.
    if (!folded.empty()) bind(op.results[0], {"acc", DType::F32, true}, "acc");
    describe(op, fmt::format("[batch {}, M {}, N {}, K {}{}]", batch, M, N, K, transposedB ? "" : ", b not transposed"));
    for (const OpRecord *consumer : folded) {
      for (int id : consumer->results) buf(id);
      description_.push_back(fmt::format("   + epilogue: {}", describeInline(*consumer)));
    }
    usesSmem_ = true;
    smemFloats_ = std::max<int64_t>(smemFloats_, 2 * 16 * (kTile + 4));
    std::string body;
    body += "  {\n";
    body += fmt::format("    auto loadA = [=](tl_i64 bt, tl_i64 m, tl_i64 k) {{ (void)bt; return {}; }};\n",
                        ld(op.operands[0], aIndex));
    body += fmt::format("    auto loadB = [=](tl_i64 bt, tl_i64 n, tl_i64 k) {{ (void)bt; return {}; }};\n",
                        ld(op.operands[1], bIndex));
    body += "    auto store = [=](tl_i64 bt, tl_i64 m, tl_i64 n, float v) {\n";
    body += fmt::format("      const tl_i64 e = (bt * {} + m) * {} + n;\n", M, N);
    for (const std::string &step : steps) body += step;
    body += "      " + st(chain, "e", "v") + "\n    };\n";
    body += fmt::format("    tl_gemm({}, {}, {}, {}, loadA, loadB, store, tl_smem);\n  }}\n", batch, M, N, K);
    code(body);
    work(batch * ceilDiv(M, kTile) * ceilDiv(N, kTile));
    produced(op.results);
    for (const OpRecord *consumer : folded) produced(consumer->results);
    index = next - 1;
  }

  std::string describeInline(const OpRecord &op) {
    std::vector<std::string> operands;
    for (int id : op.operands) operands.push_back(role(id));
    std::vector<std::string> results;
    for (int id : op.results) results.push_back(role(id));
    return fmt::format("{}({}) -> {}", op.op, fmt::join(operands, ", "), fmt::join(results, ", "));
  }

  void embedding(const OpRecord &op) {
    expectCount(op, 2, 1);
    int64_t hidden = shape(op.operands[0])[1];
    int64_t count = product(shape(op.results[0]));
    if (buf(op.operands[1]).dtype != DType::I32 || buf(op.operands[1]).local) fail("embedding ids must be i32 in memory");
    code(elementLoop(count, fmt::format("    const tl_i64 token = e / {0}, c = e % {0};\n"
                                        "    const tl_i64 id = {1}[token];\n"
                                        "    {2}\n",
                                        hidden, buf(op.operands[1]).ptr,
                                        st(op.results[0], "e", ld(op.operands[0], fmt::format("id * {} + c", hidden))))));
  }

  void rmsnorm(const OpRecord &op) {
    expectCount(op, 2, 1);
    int64_t hidden = shape(op.operands[0]).back(), rows = product(shape(op.operands[0])) / hidden;
    std::string x = ld(op.operands[0], fmt::format("row * {} + i", hidden));
    code(rowLoop(rows, fmt::format("    float sum = 0.0f;\n"
                                   "    for (tl_i64 i = threadIdx.x; i < {0}; i += TL_THREADS) {{ const float x = {1}; sum += x * x; }}\n"
                                   "    sum = tl_block_sum(sum, tl_red);\n"
                                   "    const float inverse = 1.0f / sqrtf(sum / {0}.0f + {2}f);\n"
                                   "    for (tl_i64 i = threadIdx.x; i < {0}; i += TL_THREADS)\n"
                                   "      {3}\n",
                                   hidden, x, literal(op.floatAttr("eps")),
                                   st(op.results[0], fmt::format("row * {} + i", hidden),
                                      fmt::format("{} * inverse * {}", x, ld(op.operands[1], "i"))))));
  }

  void softmax(const OpRecord &op) {
    expectCount(op, 1, 1);
    int64_t cols = shape(op.operands[0]).back(), rows = product(shape(op.operands[0])) / cols;
    std::string x = ld(op.operands[0], fmt::format("row * {} + i", cols));
    code(rowLoop(rows, fmt::format("    float best = -tl_inf();\n"
                                   "    for (tl_i64 i = threadIdx.x; i < {0}; i += TL_THREADS) best = fmaxf(best, {1});\n"
                                   "    best = tl_block_max(best, tl_red);\n"
                                   "    float sum = 0.0f;\n"
                                   "    for (tl_i64 i = threadIdx.x; i < {0}; i += TL_THREADS) sum += expf({1} - best);\n"
                                   "    sum = tl_block_sum(sum, tl_red);\n"
                                   "    for (tl_i64 i = threadIdx.x; i < {0}; i += TL_THREADS)\n"
                                   "      {2}\n",
                                   cols, x, st(op.results[0], fmt::format("row * {} + i", cols), fmt::format("expf({} - best) / sum", x)))));
  }

  void flashAttention(const OpRecord &op) {
    expectCount(op, 3, 1);
    const Shape &q = shape(op.operands[0]), &k = shape(op.operands[1]), &v = shape(op.operands[2]);
    if (q.size() != 4 || k.size() != 4 || v.size() != 4) fail("flash_attention expects rank-4 q, k, v");
    int64_t B = q[0], H = q[1], Sq = q[2], D = q[3], Hkv = k[1], Sk = k[2], Dv = v[3];
    if (Hkv < 1 || H % Hkv) fail("flash_attention: heads must be a multiple of kv heads");
    if (D > kFlashMaxDim || Dv > kThreads)
      fail(fmt::format("flash_attention: head dims {} / {} exceed {} / {}", D, Dv, kFlashMaxDim, kThreads));
    bool causal = op.intAttr("causal") != 0;
    usesSmem_ = true;
    smemFloats_ = std::max<int64_t>(smemFloats_, kFlashMaxDim + kFlashKeys);
    std::string body = fmt::format(
        "    // one (batch, head, query) row per block; online softmax over {10} keys at a time\n"
        "    const tl_i64 i = row % {2}, head = (row / {2}) % {1}, b = row / ({2} * {1});\n"
        "    const tl_i64 kvHead = b * {4} + head / {5};\n"
        "    float *qs = tl_smem, *ps = tl_smem + {11};\n"
        "    __syncthreads();\n"
        "    for (tl_i64 d = threadIdx.x; d < {3}; d += TL_THREADS) qs[d] = {6};\n"
        "    __syncthreads();\n"
        "    const tl_i64 visible = {7};\n"
        "    float best = -tl_inf(), total = 0.0f, acc = 0.0f;\n"
        "    for (tl_i64 j0 = 0; j0 < visible; j0 += {10}) {{\n"
        "      const tl_i64 j = j0 + threadIdx.x;\n"
        "      float s = -tl_inf();\n"
        "      if (j < visible) {{\n"
        "        float dot = 0.0f;\n"
        "        for (tl_i64 d = 0; d < {3}; ++d) dot = fmaf(qs[d], {8}, dot);\n"
        "        s = dot * {9}f;\n"
        "      }}\n"
        "      const float newBest = fmaxf(best, tl_block_max(s, tl_red));\n"
        "      const float p = j < visible ? expf(s - newBest) : 0.0f;\n"
        "      ps[threadIdx.x] = p;\n"
        "      const float correction = expf(best - newBest);\n"
        "      total = total * correction + tl_block_sum(p, tl_red);\n"
        "      if (threadIdx.x < {12}) {{\n"
        "        const tl_i64 keys = visible - j0 < {10} ? visible - j0 : {10};\n"
        "        float sum = 0.0f;\n"
        "        for (tl_i64 jj = 0; jj < keys; ++jj) sum = fmaf(ps[jj], {13}, sum);\n"
        "        acc = acc * correction + sum;\n"
        "      }}\n"
        "      best = newBest;\n"
        "      __syncthreads();\n"
        "    }}\n"
        "    if (threadIdx.x < {12}) {14}\n",
        B, H, Sq, D, Hkv, H / Hkv, ld(op.operands[0], fmt::format("row * {} + d", D)),
        causal ? fmt::format("i + {} + 1 < {} ? i + {} + 1 : {}", Sk - Sq, Sk, Sk - Sq, Sk) : std::to_string(Sk),
        ld(op.operands[1], fmt::format("(kvHead * {} + j) * {} + d", Sk, D)), literal(op.floatAttr("scale")),
        kFlashKeys, kFlashMaxDim, Dv, ld(op.operands[2], fmt::format("(kvHead * {} + j0 + jj) * {} + threadIdx.x", Sk, Dv)),
        st(op.results[0], fmt::format("row * {} + threadIdx.x", Dv), "visible ? acc / total : tl_nan()"));
    code(rowLoop(B * H * Sq, body));
  }

  void crossEntropy(const OpRecord &op) {
    expectCount(op, 2, 1);
    const Shape &logits = shape(op.operands[0]);
    if (logits.size() != 3) fail("cross_entropy expects logits [batch, seq, vocab]");
    int64_t B = logits[0], S = logits[1], V = logits[2], predictions = B * (S - 1);
    if (buf(op.operands[1]).dtype != DType::I32 || buf(op.operands[1]).local) fail("cross_entropy ids must be i32 in memory");
    std::string losses = scratch(std::max<int64_t>(predictions, 1));
    std::string x = ld(op.operands[0], "base + c");
    if (predictions > 0)
      code(rowLoop(predictions, fmt::format("    const tl_i64 b = row / {0}, s = row % {0}, base = (b * {1} + s) * {2};\n"
                                            "    const tl_i64 target = {3}[b * {1} + s + 1];\n"
                                            "    float best = -tl_inf();\n"
                                            "    for (tl_i64 c = threadIdx.x; c < {2}; c += TL_THREADS) best = fmaxf(best, {4});\n"
                                            "    best = tl_block_max(best, tl_red);\n"
                                            "    float sum = 0.0f;\n"
                                            "    for (tl_i64 c = threadIdx.x; c < {2}; c += TL_THREADS) sum += expf({4} - best);\n"
                                            "    sum = tl_block_sum(sum, tl_red);\n"
                                            "    if (threadIdx.x == 0) {5}[row] = best + logf(sum) - {6};\n",
                                            S - 1, S, V, buf(op.operands[1]).ptr, x, losses,
                                            ld(op.operands[0], "base + target"))));
    closePhase();
    description_.push_back(fmt::format("{}:   mean of the {} row losses (one thread, in order)", phases_.size() + 1, predictions));
    code(fmt::format("  if (blockIdx.x == 0 && threadIdx.x == 0) {{\n"
                     "    double total = 0.0;\n"
                     "    for (tl_i64 row = 0; row < {0}; ++row) total += {1}[row];\n"
                     "    {2}\n"
                     "  }}\n",
                     predictions, losses, st(op.results[0], "0", predictions > 0 ? fmt::format("(float)(total / {})", predictions) : "tl_nan()")));
  }

  void unary(const OpRecord &op) {
    expectCount(op, 1, 1);
    std::string x = ld(op.operands[0], "e");
    std::string value = op.op == "silu" ? fmt::format("tl_silu({})", x)
                                        : fmt::format("(float)((double){} * {})", x, literal(op.floatAttr("factor")));
    code(elementLoop(product(shape(op.results[0])), "    " + st(op.results[0], "e", value) + "\n"));
  }

  void binary(const OpRecord &op) {
    expectCount(op, 2, 1);
    if (shape(op.operands[0]) != shape(op.operands[1])) fail(fmt::format("{}: operand shapes differ", op.op));
    std::string a = ld(op.operands[0], "e"), b = ld(op.operands[1], "e");
    std::string value = op.op == "add"   ? fmt::format("{} + {}", a, b)
                        : op.op == "mul" ? fmt::format("{} * {}", a, b)
                                         : fmt::format("tl_silu({}) * {}", a, b);
    code(elementLoop(product(shape(op.results[0])), "    " + st(op.results[0], "e", value) + "\n"));
  }

  void causalMask(const OpRecord &op) {
    expectCount(op, 1, 1);
    const Shape &s = shape(op.operands[0]);
    int64_t rows = s[s.size() - 2], cols = s.back();
    code(elementLoop(product(s), fmt::format("    const tl_i64 col = e % {0}, r = (e / {0}) % {1};\n"
                                             "    {2}\n",
                                             cols, rows,
                                             st(op.results[0], "e", fmt::format("col > r + {} ? -tl_inf() : {}", cols - rows, ld(op.operands[0], "e"))))));
  }

  void rope(const OpRecord &op) {
    expectCount(op, 1, 1);
    const Shape &s = shape(op.operands[0]);
    if (s.size() != 4 || s[3] % 2) fail("rope expects [batch, seq, heads, even head_dim]");
    int64_t S = s[1], H = s[2], D = s[3], pairs = D / 2;
    std::string style = op.stringAttr("style");
    if (style != "adjacent" && style != "half") fail(fmt::format("rope style '{}' is not adjacent or half", style));
    bool adjacent = style == "adjacent";
    code(elementLoop(
        product(s),
        fmt::format("    const tl_i64 d = e % {0}, pos = (e / {1}) % {2}, base = e - d;\n"
                    "    const tl_i64 pair = {3};\n"
                    "    const tl_i64 first = base + {4}, second = base + {5};\n"
                    "    const double angle = (double)pos * pow({6}, -2.0 * (double)pair / {0}.0);\n"
                    "    const double c = cos(angle), sn = sin(angle);\n"
                    "    const double a = {7}, b = {8};\n"
                    "    {9}\n",
                    D, H * D, S, adjacent ? "d / 2" : fmt::format("d % {}", pairs), adjacent ? "2 * pair" : "pair",
                    adjacent ? "2 * pair + 1" : fmt::format("pair + {}", pairs), literal(op.floatAttr("theta")),
                    ld(op.operands[0], "first"), ld(op.operands[0], "second"),
                    st(op.results[0], "e", "(float)(e == first ? a * c - b * sn : a * sn + b * c)"))));
  }

  void transpose(const OpRecord &op) {
    expectCount(op, 1, 1);
    const Shape &in = shape(op.operands[0]);
    std::vector<int64_t> perm = op.intsAttr("perm");
    size_t rank = in.size();
    if (perm.size() != rank) fail("transpose: perm does not match the rank");
    Shape inStrides(rank, 1);
    for (size_t i = rank; i-- > 1;) inStrides[i - 1] = inStrides[i] * in[i];
    std::string body = "    tl_i64 rest = e, source = 0;\n";
    for (size_t dim = rank; dim-- > 0;) {
      int64_t extent = in[size_t(perm[dim])];
      body += fmt::format("    source += (rest % {}) * {}; rest /= {};\n", extent, inStrides[size_t(perm[dim])], extent);
    }
    body += "    " + st(op.results[0], "e", ld(op.operands[0], "source")) + "\n";
    code(elementLoop(product(in), body));
  }

  void repeatKv(const OpRecord &op) {
    expectCount(op, 1, 1);
    const Shape &in = shape(op.operands[0]);
    int64_t repeats = op.intAttr("repeats"), kvHeads = in[1], inner = in[2] * in[3];
    code(elementLoop(product(shape(op.results[0])),
                     fmt::format("    const tl_i64 inner = e % {0}, bh = e / {0}, h = bh % {1}, b = bh / {1};\n"
                                 "    {2}\n",
                                 inner, kvHeads * repeats,
                                 st(op.results[0], "e", ld(op.operands[0], fmt::format("(b * {} + h / {}) * {} + inner", kvHeads, repeats, inner))))));
  }

  void copy(const OpRecord &op) {
    expectCount(op, 1, 1);
    code(elementLoop(product(shape(op.results[0])), "    " + st(op.results[0], "e", ld(op.operands[0], "e")) + "\n"));
  }

  void concat(const OpRecord &op) {
    std::string body;
    int64_t start = 0;
    for (size_t i = 0; i < op.operands.size(); ++i) {
      int64_t count = product(shape(op.operands[i]));
      body += fmt::format("    {}if (e < {}) {}\n", i ? "else " : "", start + count,
                          st(op.results[0], "e", ld(op.operands[i], fmt::format("e - {}", start))));
      start += count;
    }
    code(elementLoop(start, body));
  }

  void split(const OpRecord &op) {
    int64_t width = shape(op.operands[0]).back(), start = 0;
    for (size_t r = 0; r < op.results.size(); ++r) {
      int64_t size = shape(op.results[r]).back();
      code(elementLoop(product(shape(op.results[r])),
                       fmt::format("    {}\n", st(op.results[r], "e",
                                                  ld(op.operands[0], fmt::format("(e / {}) * {} + {} + e % {}", size, width, start, size))))));
      start += size;
    }
  }

  const Program &program_;
  const Kernel &kernel_;
  std::map<int, Buf> bufs_;
  std::map<int, std::string> roles_;
  std::vector<std::string> signature_, description_, locals_, phases_;
  std::string current_;
  std::set<int> producedInPhase_;
  int localCount_ = 0;
  int64_t workspaceFloats_ = 0, gridBlocks_ = 1, smemFloats_ = 0;
  bool usesSmem_ = false;
};

uint64_t fnv1a(const std::string &text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

} // namespace

std::string emitHipKernel(const Program &program, const Kernel &kernel, const std::string &entry) {
  KernelEmitter emitter(program, kernel);
  return hipPrelude() + "\n" + emitter.emit(entry);
}

void emitHipKernels(Program &program) {
  std::map<std::string, std::string> sourceOf;  // entry -> source
  program.workspaceBytes = 0;
  for (Kernel &kernel : program.kernels) {
    KernelEmitter emitter(program, kernel);
    std::string entry = kernel.name;
    std::string body = emitter.emit(entry);
    auto found = sourceOf.find(entry);
    if (found != sourceOf.end() && found->second != body) {
      // Same name, different code: keep names unique per distinct computation.
      KernelEmitter again(program, kernel);
      entry = fmt::format("{}_{:08x}", kernel.name, uint32_t(fnv1a(body)));
      body = again.emit(entry);
    }
    sourceOf.emplace(entry, body);
    kernel.entry = entry;
    kernel.source = hipPrelude() + "\n" + body;
    kernel.gridBlocks = emitter.gridBlocks();
    kernel.blockThreads = kThreads;
    kernel.phases = emitter.phases();
    kernel.workspaceBytes = emitter.workspaceBytes();
    program.workspaceBytes = std::max(program.workspaceBytes, kernel.workspaceBytes);
  }
}

int writeHipSources(const Program &program, const std::string &directory) {
  ::mkdir(directory.c_str(), 0777);
  std::set<std::string> written;
  for (const Kernel &kernel : program.kernels) {
    if (kernel.entry.empty() || !written.insert(kernel.entry).second) continue;
    std::string path = directory + "/" + kernel.entry + ".hip";
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << kernel.source;
    if (!file) throw Error(fmt::format("cannot write '{}'", path));
  }
  return int(written.size());
}

} // namespace tlc
