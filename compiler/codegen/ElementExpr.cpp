#include "compiler/codegen/ElementExpr.h"

#include <functional>
#include <set>

namespace tlc::codegen {

ElementRef ElementExpr::load(int param, IndexExpr offset) {
  auto expr = std::make_shared<ElementExpr>();
  expr->kind = Kind::Load;
  expr->param = param;
  expr->offset = std::move(offset);
  return expr;
}

ElementRef ElementExpr::accumulator(IndexExpr column) {
  auto expr = std::make_shared<ElementExpr>();
  expr->kind = Kind::Accumulator;
  expr->column = std::move(column);
  return expr;
}

ElementRef ElementExpr::apply(std::string op, std::vector<ElementRef> args, double attr) {
  auto expr = std::make_shared<ElementExpr>();
  expr->kind = Kind::Apply;
  expr->op = std::move(op);
  expr->args = std::move(args);
  expr->attr = attr;
  return expr;
}

ElementRef substitute(const ElementRef &expr, const std::string &variable, const IndexExpr &value) {
  auto copy = std::make_shared<ElementExpr>(*expr);
  for (IndexExpr *index :
       {&copy->offset, &copy->column, &copy->row, &copy->isSecond, &copy->position, &copy->pair, &copy->sequence})
    *index = index->substitute(variable, value);
  for (ElementRef &arg : copy->args) arg = substitute(arg, variable, value);
  return copy;
}

std::vector<const ElementExpr *> leaves(const ElementRef &expr, ElementExpr::Kind kind) {
  std::vector<const ElementExpr *> found;
  std::set<const ElementExpr *> seen;
  std::function<void(const ElementExpr *)> walk = [&](const ElementExpr *node) {
    if (!seen.insert(node).second) return;
    if (node->kind == kind) found.push_back(node);
    for (const ElementRef &arg : node->args) walk(arg.get());
  };
  walk(expr.get());
  return found;
}

} // namespace tlc::codegen
