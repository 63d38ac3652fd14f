#include "compiler/codegen/ElementCode.h"

#include "runtime/ElementwiseOps.h"
#include "runtime/Error.h"

#include <fmt/format.h>

#include <cmath>
#include <numeric>
#include <limits>

namespace tlc::codegen {

std::string indexCode(const IndexExpr &index) {
  if (index.maxValue() <= std::numeric_limits<int32_t>::max()) return index.str();
  // Each variable widened before any arithmetic.
  IndexExpr wide = index;
  for (const char *name : {"m", "c", "k", "n", "bt", "e", "b", "h", "s"})
    if (wide.uses(name)) wide = wide.substitute(name, IndexExpr::variable(fmt::format("(tl_i64){}", name), 1 << 30));
  return wide.str();
}

std::string floatLiteral(double value) {
  if (std::isnan(value)) return "tl_nan()";
  if (std::isinf(value)) return value > 0 ? "tl_inf()" : "-tl_inf()";
  std::string text = fmt::format("{:.9g}", value);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text + "f";
}

// Every combination of the sampled values of the other variables `index` uses.
static std::vector<std::map<std::string, int64_t>> samplePoints(const IndexExpr &index, const ChunkLoop &loop) {
  std::vector<std::map<std::string, int64_t>> points(1);
  for (const auto &[name, values] : loop.samples) {
    if (!index.uses(name)) continue;
    std::vector<std::map<std::string, int64_t>> more;
    for (const auto &point : points)
      for (int64_t value : values) {
        auto extended = point;
        extended[name] = value;
        more.push_back(extended);
      }
    points = more;
  }
  return points;
}

bool ElementCode::contiguous(const IndexExpr &offset, const ChunkLoop &loop) {
  if (loop.vector == 1) return true;
  if (loop.extent % loop.vector != 0) return false;
  if (offset.alignedRuns(loop.variable, loop.vector)) return true;
  std::vector<std::map<std::string, int64_t>> points = samplePoints(offset, loop);
  if (!offset.uses(loop.variable)) return false;
  // One period along the loop variable decides it, when a period's step keeps alignment.
  int64_t period = std::lcm(offset.period(loop.variable), int64_t(loop.vector)), span = loop.extent;
  if (period < loop.extent) {
    for (auto &point : points) {
      point[loop.variable] = 0;
      int64_t first = offset.evaluate(point);
      point[loop.variable] = period;
      if ((offset.evaluate(point) - first) % loop.vector != 0) return false;
    }
    span = period;
  }
  // Where the structure does not tell, sampling decides, within a bounded amount of work
  // (beyond it the loads stay scalar, which is always correct).
  if (span / loop.vector * int64_t(points.size()) > (1 << 16)) return false;
  for (auto &point : points)
    for (int64_t base = 0; base < span; base += loop.vector) {
      point[loop.variable] = base;
      int64_t first = offset.evaluate(point);
      if (first % loop.vector != 0) return false;
      for (int64_t i = 1; i < loop.vector; ++i) {
        point[loop.variable] = base + i;
        if (offset.evaluate(point) != first + i) return false;
      }
    }
  return true;
}

bool ElementCode::constantOverChunks(const IndexExpr &index, const ChunkLoop &loop) {
  if (loop.vector == 1 || !index.uses(loop.variable)) return true;
  if (loop.extent % loop.vector != 0) return false;
  // After one period along the loop variable the value only shifts by a constant, and a
  // period is whole chunks: one period decides it.
  int64_t span = std::min(std::lcm(index.period(loop.variable), int64_t(loop.vector)), loop.extent);
  std::vector<std::map<std::string, int64_t>> points = samplePoints(index, loop);
  if (span * int64_t(points.size()) > (1 << 16)) return false;
  for (auto &point : points)
    for (int64_t base = 0; base < span; base += loop.vector) {
      point[loop.variable] = base;
      int64_t first = index.evaluate(point);
      for (int64_t i = 1; i < loop.vector; ++i) {
        point[loop.variable] = base + i;
        if (index.evaluate(point) != first) return false;
      }
    }
  return true;
}

std::string ElementCode::ropeTable(double theta, int64_t headDim) {
  auto key = std::make_pair(theta, headDim);
  auto found = ropeTables_.find(key);
  if (found != ropeTables_.end()) return found->second;
  std::string name = fmt::format("{}_rope{}", kernel_, ropeTables_.size());  // unique in a persistent kernel
  // theta^(-2i / D) per pair i, as a float and the float of what that float misses.
  std::string values;
  for (int64_t i = 0; i < headDim / 2; ++i) {
    double frequency = std::pow(theta, -2.0 * double(i) / double(headDim));
    float hi = float(frequency), lo = float(frequency - double(hi));
    values += fmt::format("{}{}, {}", i ? ", " : "", floatLiteral(hi), floatLiteral(lo));
  }
  globals_ += fmt::format("// RoPE frequencies theta^(-2i/{}) for theta {}, as (hi, lo) float pairs.\n"
                          "__device__ const float {}[{}] = {{{}}};\n",
                          headDim, theta, name, headDim, values);
  ropeTables_.emplace(key, name);
  return name;
}

std::string ElementCode::chunk(const std::vector<Store> &stores, const ChunkLoop &loop, const std::string &indent) {
  return code(stores, {}, loop, indent);
}

std::string ElementCode::values(const ElementRef &value, const std::string &out, const ChunkLoop &loop,
                                const std::string &indent) {
  return code({}, {value, out}, loop, indent);
}

namespace {

// A chunk's values as C statements: `head` (vector loads before the element loop) and
// `body` (a const float per expression inside it, each element read once whichever store
// asks); value() returns the name holding an expression.
struct ChunkValues {
  ElementCode &code;
  const std::string &kernel;
  const ParamNames &params;
  const ChunkLoop &loop;
  std::string head, body;
  std::map<const ElementExpr *, std::string> names;
  std::map<std::pair<int, std::string>, std::string> loads;
  int temporaries = 0;

  std::string at(const IndexExpr &index) const { return indexCode(index); }
  std::string atBase(const IndexExpr &index) const {
    return indexCode(index.substitute(loop.variable, IndexExpr::variable(loop.base, loop.extent)));
  }

  std::string value(const ElementRef &expr) {
    auto found = names.find(expr.get());
    if (found != names.end()) return found->second;
    if (expr->kind == ElementExpr::Kind::Load) {
      auto loaded = loads.find({expr->param, expr->offset.str()});
      if (loaded != loads.end()) return names[expr.get()] = loaded->second;
    }
    std::string name = fmt::format("x{}", temporaries++);
    const std::string text = valueCode(expr, name);
    body += fmt::format("      const float {} = {};\n", name, text);
    names[expr.get()] = name;
    return name;
  }

  // The expression's C value (its operands named first); `name` is the one it will have.
  std::string valueCode(const ElementRef &expr, const std::string &name) {
    switch (expr->kind) {
    case ElementExpr::Kind::Load: {
      loads[{expr->param, expr->offset.str()}] = name;
      const std::string &param = params.names.at(size_t(expr->param));
      if (loop.vector > 1 && ElementCode::contiguous(expr->offset, loop)) {
        head += fmt::format("    float {}v[{}];\n    tl_ld8(p.{}, {}, {}v);\n", name, loop.vector, param,
                            atBase(expr->offset), name);
        return fmt::format("{}v[i]", name);
      }
      return fmt::format("tl_ld(p.{}, {})", param, at(expr->offset));
    }
    case ElementExpr::Kind::Accumulator: return loop.accumulator(*expr, "i");
    case ElementExpr::Kind::Apply: {
      const ElementwiseOp *op = findElementwiseOp(expr->op);
      if (!op || size_t(op->operands) != expr->args.size())
        throw Error(fmt::format("code generation: kernel '{}': '{}' is not an elementwise op of {} operands", kernel,
                                expr->op, expr->args.size()));
      std::string a = value(expr->args[0]), b = op->operands > 1 ? value(expr->args[1]) : "0.0f";
      return fmt::format("tl_{}<float>({}, {}, {})", expr->op, a, b, floatLiteral(expr->attr));
    }
    case ElementExpr::Kind::Rope: {
      std::string first = value(expr->args[0]), second = value(expr->args[1]);
      std::string table = code.ropeTable(expr->theta, expr->headDim);
      std::string position = at(expr->position);
      if (expr->positions >= 0)  // generation: the sequence's position, read at run time
        position = fmt::format("p.{}[{}] + ({})", params.names.at(size_t(expr->positions)), at(expr->sequence), position);
      body += fmt::format("      float {0}c, {0}s;\n"
                          "      tl_rope_cos_sin((float)({1}), {2}[2 * ({3})], {2}[2 * ({3}) + 1], {0}c, {0}s);\n",
                          name, position, table, at(expr->pair));
      return fmt::format("tl_rope({}, {}, ({}) != 0, {}c, {}{}s)", first, second, at(expr->isSecond), name,
                         expr->inverse ? "-" : "", name);
    }
    case ElementExpr::Kind::CausalMask: {
      std::string x = value(expr->args[0]);
      return fmt::format("({}) > ({}) + {} ? {} : {}", at(expr->column), at(expr->row), expr->shift,
                         expr->inverse ? "0.0f" : "-tl_inf()", x);
    }
    }
    return "";
  }

  // Store s's writes of the chunk's r<s>[], after the element loop: 8 at a time where the
  // chunk is contiguous (and a KV cache row does not change within it), else one by one.
  std::string store(const Store &store, size_t s) const {
    const std::string &param = params.names.at(size_t(store.param)), &var = loop.variable;
    // A KV cache row at a run-time position: the offset's run-time part, and where it fits.
    auto cacheRow = [&](auto &&index) -> std::pair<std::string, std::string> {
      if (!store.cacheRow.atRunTime()) return {"", ""};
      std::string position = fmt::format("p.{}[{}]", params.names.at(size_t(store.cacheRow.param)),
                                         index(store.cacheRow.sequence));
      return {fmt::format(" + (tl_i64){} * {}", position, store.stride),
              fmt::format("{} + ({}) < {}", position, index(store.cacheRow.token), store.context)};
    };
    bool rowPerChunk = !store.cacheRow.atRunTime() ||
                       (store.stride % loop.vector == 0 && ElementCode::constantOverChunks(store.cacheRow.sequence, loop) &&
                        ElementCode::constantOverChunks(store.cacheRow.token, loop));
    if (loop.vector > 1 && loop.extent % loop.vector == 0 && ElementCode::contiguous(store.offset, loop) && rowPerChunk) {
      auto [shift, fits] = cacheRow([&](const IndexExpr &index) { return atBase(index); });
      std::string write = fmt::format("tl_st8(p.{}, {}{}, r{});", param, atBase(store.offset), shift, s);
      return fits.empty() ? "    " + write + "\n" : fmt::format("    if ({}) {}\n", fits, write);
    }
    auto [shift, fits] = cacheRow([&](const IndexExpr &index) { return at(index); });
    return fmt::format("    for (int i = 0; i < {}; ++i) {{\n      const auto {} = {} + i;\n"
                       "      if ({}{} < {}) tl_st(p.{}, {}{}, r{}[i]);\n    }}\n",
                       loop.vector, var, loop.base, fits.empty() ? "" : fits + " && ", var, loop.extent, param,
                       at(store.offset), shift, s);
  }
};

// Code written at an indent of two, moved to `indent` (pragmas stay at the line's start).
std::string reindent(const std::string &out, const std::string &indent) {
  std::string indented;
  for (size_t start = 0; start < out.size();) {
    size_t end = out.find('\n', start);
    std::string line = out.substr(start, end - start);
    indented += (line.rfind("#pragma", 0) == 0 ? "" : indent) + line.substr(line.rfind("#pragma", 0) == 0 ? 0 : 2) + "\n";
    start = end + 1;
  }
  return indented;
}

} // namespace

std::string ElementCode::code(const std::vector<Store> &stores, const Into &into, const ChunkLoop &loop,
                              const std::string &indent) {
  ChunkValues chunk{*this, kernel_, params_, loop};
  std::vector<std::string> results;
  for (const Store &store : stores) results.push_back(chunk.value(store.value));
  std::string intoResult = into.value ? chunk.value(into.value) : "";

  // The chunk starts on a multiple of its width: lets the compiler see that neighbours
  // share a RoPE pair (one sine and cosine for both).
  const std::string &var = loop.variable;
  std::string out = "  {\n" + (loop.vector > 1 ? fmt::format("    __builtin_assume({} % {} == 0);\n", loop.base, loop.vector) : "") + chunk.head;
  for (size_t s = 0; s < stores.size(); ++s) out += fmt::format("    float r{}[{}];\n", s, loop.vector);
  out += fmt::format("#pragma unroll\n    for (int i = 0; i < {}; ++i) {{\n      const auto {} = {} + i;\n      (void){};\n",
                     loop.vector, var, loop.base, var);
  out += chunk.body;
  for (size_t s = 0; s < stores.size(); ++s) out += fmt::format("      r{}[i] = {};\n", s, results[s]);
  if (into.value) out += fmt::format("      {}[i] = {};\n", into.array, intoResult);
  out += "    }\n";
  for (size_t s = 0; s < stores.size(); ++s) out += chunk.store(stores[s], s);
  return reindent(out + "  }\n", indent);
}

} // namespace tlc::codegen
