// The parsed form of a template: expressions and statements, each remembering where it starts in
// the source so that errors can name a line and column.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace kiln::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // items
    kTuple,      // items
    kDict,       // items: key, value, key, value, ...
    kAttribute,  // object.name                 items[0] = object
    kItem,       // object[index]               items[0] = object, items[1] = index
    kSlice,      // object[a:b:c]               items[0] = object, items[1..3] = bounds (may be null)
    kCall,       // callee(args)                items[0] = callee, args
    kFilter,     // operand | name(args)        items[0] = operand (null in filter blocks), args
    kTest,       // operand is [not] name(args) items[0] = operand, args
    kUnary,      // op operand                  items[0]
    kBinary,     // left op right               items[0], items[1]
    kCompare,    // a op b op c ...             items, ops
    kCondition,  // then if cond else other     items[0] = then, items[1] = cond, items[2] = other or null
  };
  Kind kind;
  size_t offset = 0;
  Value value;                     // kLiteral
  std::string name;                // kName, kAttribute, kFilter, kTest; operator for kUnary/kBinary
  std::vector<ExprPtr> items;
  std::vector<ExprPtr> args;       // kCall, kFilter, kTest
  std::vector<std::string> arg_names;  // parallel to args: "" for positional
  std::vector<std::string> ops;    // kCompare
  bool negated = false;            // kTest
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // conditions[i] -> bodies[i]; else_body
    kFor,       // targets in expr [if filter]: body; else_body
    kSet,       // targets (or namespace attribute) = expr, or a block set capturing body
    kMacro,     // name(params = defaults): body
    kBreak,
    kContinue,
    kFilterBlock,  // {% filter f %} body: expr is the filter chain applied to the body's output
    kScope,        // a body rendered in place ({% generation %})
  };
  Kind kind;
  size_t offset = 0;
  std::string text;                  // kText; kSet namespace attribute name; kMacro name
  ExprPtr expr;                      // kOutput, kFor iterable, kSet value, kFilterBlock filter
  ExprPtr filter;                    // kFor condition; kSet block filter
  std::vector<std::string> targets;  // kFor / kSet names; kMacro parameter names
  bool target_is_tuple = false;
  std::vector<ExprPtr> conditions;   // kIf
  std::vector<Body> bodies;          // kIf
  std::vector<ExprPtr> defaults;     // kMacro: parallel to targets (null: required)
  Body body, else_body;
};

}  // namespace kiln::jinja
