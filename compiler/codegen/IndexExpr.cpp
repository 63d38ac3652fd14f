#include "compiler/codegen/IndexExpr.h"

#include "runtime/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <optional>

namespace tlc::codegen {

struct IndexExpr::Node {
  Kind kind = Kind::Constant;
  int64_t value = 0;          // Constant: the value; Mul/Div/Mod: the constant operand
  std::string name;           // Variable
  NodeRef lhs, rhs;           // Add: both; Mul/Div/Mod: lhs
  int64_t low = 0, high = 0;  // bounds over the variables' ranges
};

IndexExpr IndexExpr::make(Kind kind, const IndexExpr &lhs, const IndexExpr &rhs, int64_t value, int64_t low,
                          int64_t high) {
  auto node = std::make_shared<Node>();
  node->kind = kind;
  node->lhs = lhs.node_;
  node->rhs = rhs.node_;
  node->value = value;
  node->low = low;
  node->high = high;
  return IndexExpr(NodeRef(node));
}

IndexExpr IndexExpr::lhs() const { return IndexExpr(node_->lhs); }
IndexExpr IndexExpr::rhs() const { return IndexExpr(node_->rhs); }
IndexExpr::Kind IndexExpr::kind() const { return node_->kind; }
int64_t IndexExpr::operand() const { return node_->value; }

IndexExpr::IndexExpr(int64_t value) {
  auto node = std::make_shared<Node>();
  node->kind = Kind::Constant;
  node->value = node->low = node->high = value;
  node_ = node;
}

IndexExpr IndexExpr::variable(const std::string &name, int64_t extent) {
  auto node = std::make_shared<Node>();
  node->kind = Kind::Variable;
  node->name = name;
  node->low = 0;
  node->high = std::max<int64_t>(extent - 1, 0);
  return IndexExpr(NodeRef(node));
}

bool IndexExpr::isConstant() const { return node_->kind == Kind::Constant; }
int64_t IndexExpr::constant() const { return node_->value; }
int64_t IndexExpr::maxValue() const { return node_->high; }
int64_t IndexExpr::minValue() const { return node_->low; }

bool IndexExpr::uses(const std::string &name) const {
  switch (kind()) {
  case Kind::Constant: return false;
  case Kind::Variable: return node_->name == name;
  case Kind::Add: return lhs().uses(name) || rhs().uses(name);
  default: return lhs().uses(name);
  }
}

int64_t IndexExpr::period(const std::string &name) const {
  if (!uses(name)) return 1;
  switch (kind()) {
  case Kind::Constant:
  case Kind::Variable: return 1;
  case Kind::Add: return std::lcm(lhs().period(name), rhs().period(name));
  case Kind::Mul: return lhs().period(name);
  case Kind::Div:
  case Kind::Mod: return std::lcm(lhs().period(name), operand());
  }
  return 1;
}

namespace {
// On every aligned run x0 .. x0 + V - 1 of the variable, a subexpression g is affine:
// g(x0 + i) = g(x0) + slope * i; and g(x0) = residue (mod modulus) at every run start,
// whatever the other variables are (modulus 0: g(x0) is exactly `residue`).
struct RunForm {
  int64_t slope = 0, modulus = 1, residue = 0;
};
int64_t floorMod(int64_t a, int64_t m) { return m == 0 ? a : ((a % m) + m) % m; }
} // namespace

bool IndexExpr::alignedRuns(const std::string &name, int64_t vector) const {
  if (vector <= 1) return true;
  std::function<std::optional<RunForm>(const IndexExpr &)> form = [&](const IndexExpr &e) -> std::optional<RunForm> {
    switch (e.kind()) {
    case Kind::Constant: return RunForm{0, 0, e.constant()};
    case Kind::Variable:
      // The run variable starts runs at multiples of `vector`; another is any value.
      return e.node_->name == name ? RunForm{1, vector, 0} : RunForm{0, 1, 0};
    case Kind::Add: {
      auto a = form(e.lhs()), b = form(e.rhs());
      if (!a || !b) return std::nullopt;
      int64_t modulus = std::gcd(a->modulus, b->modulus);
      return RunForm{a->slope + b->slope, modulus, floorMod(a->residue + b->residue, modulus)};
    }
    case Kind::Mul: {
      auto a = form(e.lhs());
      if (!a) return std::nullopt;
      int64_t c = e.operand(), modulus = std::abs(a->modulus * c);
      return RunForm{a->slope * c, modulus, floorMod(a->residue * c, modulus)};
    }
    case Kind::Div:
    case Kind::Mod: {
      auto a = form(e.lhs());
      int64_t c = e.operand();
      if (!a || c <= 0 || e.lhs().minValue() < 0) return std::nullopt;  // floor = C division on non-negatives
      RunForm quotient;
      if (a->slope % c == 0) {
        quotient.slope = a->slope / c;  // floor((g0 + s i) / c) = floor(g0 / c) + (s / c) i
      } else if (a->slope > 0) {
        // The run stays inside one multiple of c when g0's largest possible remainder
        // plus the run's growth is below c; then the quotient is constant on the run.
        int64_t largest = a->modulus == 0 || a->modulus % c == 0 ? floorMod(a->residue, c)
                          : c % a->modulus == 0                 ? c - a->modulus + floorMod(a->residue, a->modulus)
                                                                : c - 1;
        if (largest + a->slope * (vector - 1) >= c) return std::nullopt;
        quotient.slope = 0;
      } else {
        return std::nullopt;
      }
      if (a->modulus == 0 || a->modulus % c == 0) {  // g0 = r + q t, so g0 / c = r / c + (q / c) t
        quotient.modulus = a->modulus / c;
        quotient.residue = floorMod(a->residue / c, quotient.modulus);
      }
      if (e.kind() == Kind::Div) return quotient;
      // g % c = g - c * (g / c).
      int64_t modulus = std::gcd(a->modulus, c * quotient.modulus);
      return RunForm{a->slope - c * quotient.slope, modulus, floorMod(a->residue - c * quotient.residue, modulus)};
    }
    }
    return std::nullopt;
  };
  std::optional<RunForm> f = form(*this);
  return f && f->slope == 1 && f->modulus % vector == 0 && f->residue % vector == 0;
}

IndexExpr operator+(const IndexExpr &a, const IndexExpr &b) {
  using Kind = IndexExpr::Kind;
  if (a.isConstant() && b.isConstant()) return IndexExpr(a.constant() + b.constant());
  if (a.isConstant() && a.constant() == 0) return b;
  if (b.isConstant() && b.constant() == 0) return a;
  // Constants gather on the right: (x + 3) + 4 = x + 7.
  if (a.isConstant()) return b + a;
  if (b.isConstant() && a.kind() == Kind::Add && a.rhs().isConstant())
    return a.lhs() + IndexExpr(a.rhs().constant() + b.constant());
  return IndexExpr::make(Kind::Add, a, b, 0, a.minValue() + b.minValue(), a.maxValue() + b.maxValue());
}

IndexExpr operator*(const IndexExpr &a, int64_t factor) {
  using Kind = IndexExpr::Kind;
  if (factor == 0) return IndexExpr(int64_t(0));
  if (factor == 1) return a;
  if (a.isConstant()) return IndexExpr(a.constant() * factor);
  if (a.kind() == Kind::Mul) return a.lhs() * (a.operand() * factor);
  if (a.kind() == Kind::Add) return a.lhs() * factor + a.rhs() * factor;
  return IndexExpr::make(Kind::Mul, a, IndexExpr(), factor, std::min(a.minValue() * factor, a.maxValue() * factor),
                         std::max(a.minValue() * factor, a.maxValue() * factor));
}

IndexExpr IndexExpr::floorDiv(int64_t divisor) const {
  if (divisor <= 0) throw Error(fmt::format("index arithmetic: division by {}", divisor));
  if (divisor == 1) return *this;
  if (minValue() < 0) throw Error("index arithmetic: division of a possibly negative index");
  if (isConstant()) return IndexExpr(constant() / divisor);
  if (maxValue() < divisor) return IndexExpr(int64_t(0));
  // (x * a) / d with d | a, and (x / a) / b = x / (a b).
  if (kind() == Kind::Mul && operand() % divisor == 0) return lhs() * (operand() / divisor);
  if (kind() == Kind::Div) return lhs().floorDiv(operand() * divisor);
  // (x * a + y) / a = x + y / a when y >= 0 (and = x when y < a), with a a multiple of the divisor.
  if (kind() == Kind::Add) {
    for (auto [big, small] : {std::pair{lhs(), rhs()}, std::pair{rhs(), lhs()}})
      if (big.kind() == Kind::Mul && big.operand() % divisor == 0 && small.minValue() >= 0)
        return big.lhs() * (big.operand() / divisor) + small.floorDiv(divisor);
  }
  return make(Kind::Div, *this, IndexExpr(), divisor, minValue() / divisor, maxValue() / divisor);
}

IndexExpr IndexExpr::mod(int64_t divisor) const {
  if (divisor <= 0) throw Error(fmt::format("index arithmetic: remainder by {}", divisor));
  if (divisor == 1) return IndexExpr(int64_t(0));
  if (minValue() < 0) throw Error("index arithmetic: remainder of a possibly negative index");
  if (isConstant()) return IndexExpr(constant() % divisor);
  if (maxValue() < divisor) return *this;
  if (kind() == Kind::Mul && operand() % divisor == 0) return IndexExpr(int64_t(0));
  // (x % (a b)) % a = x % a
  if (kind() == Kind::Mod && operand() % divisor == 0) return lhs().mod(divisor);
  // (x * a + y) % a = y % a, with a a multiple of the divisor
  if (kind() == Kind::Add) {
    for (auto [big, small] : {std::pair{lhs(), rhs()}, std::pair{rhs(), lhs()}})
      if (big.kind() == Kind::Mul && big.operand() % divisor == 0 && small.minValue() >= 0)
        return small.mod(divisor);
  }
  return make(Kind::Mod, *this, IndexExpr(), divisor, 0, std::min(maxValue(), divisor - 1));
}

IndexExpr IndexExpr::substitute(const std::string &name, const IndexExpr &value) const {
  switch (kind()) {
  case Kind::Constant: return *this;
  case Kind::Variable: return node_->name == name ? value : *this;
  case Kind::Add: return lhs().substitute(name, value) + rhs().substitute(name, value);
  case Kind::Mul: return lhs().substitute(name, value) * operand();
  case Kind::Div: return lhs().substitute(name, value).floorDiv(operand());
  case Kind::Mod: return lhs().substitute(name, value).mod(operand());
  }
  return *this;
}

int64_t IndexExpr::evaluate(const std::map<std::string, int64_t> &values) const {
  switch (kind()) {
  case Kind::Constant: return node_->value;
  case Kind::Variable: {
    auto found = values.find(node_->name);
    if (found == values.end()) throw Error(fmt::format("index arithmetic: no value for '{}'", node_->name));
    return found->second;
  }
  case Kind::Add: return lhs().evaluate(values) + rhs().evaluate(values);
  case Kind::Mul: return lhs().evaluate(values) * operand();
  case Kind::Div: return lhs().evaluate(values) / operand();
  case Kind::Mod: return lhs().evaluate(values) % operand();
  }
  return 0;
}

std::string IndexExpr::str() const {
  switch (kind()) {
  case Kind::Constant: return std::to_string(node_->value);
  case Kind::Variable: return node_->name;
  case Kind::Add: return lhs().str() + " + " + rhs().str();
  case Kind::Mul: {
    std::string inner = lhs().str();
    return (lhs().kind() == Kind::Add ? "(" + inner + ")" : inner) + " * " + std::to_string(operand());
  }
  case Kind::Div:
  case Kind::Mod: {
    bool simple = lhs().kind() == Kind::Variable || lhs().kind() == Kind::Constant;
    return (simple ? lhs().str() : "(" + lhs().str() + ")") + (kind() == Kind::Div ? " / " : " % ") +
           std::to_string(operand());
  }
  }
  return "0";
}

IndexExpr linearize(const Index &index, const std::vector<int64_t> &shape) {
  if (index.size() != shape.size())
    throw Error(fmt::format("index arithmetic: {} coordinates for a rank-{} tensor", index.size(), shape.size()));
  IndexExpr offset(int64_t(0));
  for (size_t i = 0; i < shape.size(); ++i) offset = offset * shape[i] + index[i];
  return offset;
}

Index delinearize(const IndexExpr &offset, const std::vector<int64_t> &shape) {
  Index index(shape.size());
  int64_t inner = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    IndexExpr coordinate = offset.floorDiv(inner);
    index[i] = i == 0 ? coordinate : coordinate.mod(shape[i]);
    inner *= shape[i];
  }
  return index;
}

bool isShiftedIdentity(const IndexExpr &expr, const std::string &name, int64_t extent, int64_t delta,
                       std::map<std::string, int64_t> at) {
  auto value = [&](int64_t x) {
    at[name] = x;
    return expr.evaluate(at);
  };
  int64_t period = expr.period(name), walked = std::min(period, extent);
  if (walked > (int64_t(1) << 16)) return false;
  for (int64_t x = 0; x < walked; ++x)
    if (value(x) != x + delta) return false;
  return extent <= period || value(period) == period + delta;
}

} // namespace tlc::codegen
