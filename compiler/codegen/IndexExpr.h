// Integer index arithmetic that generated kernels compute: how a kernel's loop
// coordinates (a GEMM row m and column c, an output element e) become element offsets
// through the layout ops it absorbed (splits, head splits and merges, transposes).
//
// Expressions are built symbolically with bounds on every variable, simplified as they
// are built (so (m / 128) % 1 never reaches a kernel), printed as C, and evaluated on the
// host to check what the emitter relies on ("8 consecutive columns are 8 consecutive
// elements").
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tlc::codegen {

class IndexExpr {
public:
  IndexExpr() : IndexExpr(int64_t(0)) {}
  IndexExpr(int64_t value);  // a constant
  // A loop variable taking values 0 .. extent - 1.
  static IndexExpr variable(const std::string &name, int64_t extent);

  friend IndexExpr operator+(const IndexExpr &a, const IndexExpr &b);
  friend IndexExpr operator-(const IndexExpr &a, int64_t b) { return a + IndexExpr(-b); }
  friend IndexExpr operator*(const IndexExpr &a, int64_t factor);
  IndexExpr floorDiv(int64_t divisor) const;
  IndexExpr mod(int64_t divisor) const;

  bool isConstant() const;
  int64_t constant() const;  // for a constant
  int64_t maxValue() const;  // bounds over every variable's range
  int64_t minValue() const;
  bool uses(const std::string &name) const;
  // The least P such that the expression at name + P is its value at name plus a
  // constant (the lcm of every divisor applied to `name`): properties along `name`
  // repeat with this period.
  int64_t period(const std::string &name) const;

  // Whether every aligned run of `vector` consecutive values of `name` (starting at a
  // multiple of `vector`) gives `vector` consecutive values starting at a multiple of
  // `vector`, for any values of the other variables. Decided from the expression's
  // structure; false also where it cannot tell (the caller may then check by sampling).
  bool alignedRuns(const std::string &name, int64_t vector) const;

  // Replaces variable `name` by `value` everywhere.
  IndexExpr substitute(const std::string &name, const IndexExpr &value) const;
  int64_t evaluate(const std::map<std::string, int64_t> &values) const;
  // C source; variables print as their names.
  std::string str() const;

private:
  enum class Kind { Constant, Variable, Add, Mul, Div, Mod };
  struct Node;
  using NodeRef = std::shared_ptr<const Node>;
  explicit IndexExpr(NodeRef node) : node_(std::move(node)) {}
  static IndexExpr make(Kind kind, const IndexExpr &lhs, const IndexExpr &rhs, int64_t value, int64_t low,
                        int64_t high);
  IndexExpr lhs() const;
  IndexExpr rhs() const;
  Kind kind() const;
  int64_t operand() const;  // the constant of Mul/Div/Mod
  NodeRef node_;
};

using Index = std::vector<IndexExpr>;

// Whether `expr` at name = x is x + delta for every x in 0 .. extent - 1, the other
// variables as in `at`. Decided over one period of `name` (the expression repeats from
// there, shifted by its value at the period less its value at 0), not value by value, so
// the work is bounded by the layout, not the extent; false where the period is too long
// to walk (callers then take the general path).
bool isShiftedIdentity(const IndexExpr &expr, const std::string &name, int64_t extent, int64_t delta,
                       std::map<std::string, int64_t> at = {});

// Row-major offset of `index` in a tensor of `shape`.
IndexExpr linearize(const Index &index, const std::vector<int64_t> &shape);
// The coordinates of linear position `offset` in a row-major tensor of `shape`.
Index delinearize(const IndexExpr &offset, const std::vector<int64_t> &shape);

} // namespace tlc::codegen
