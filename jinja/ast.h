// The parsed template: expressions and statements, each knowing its template line.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace doppler::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // args = items
    kTuple,     // args = items
    kDict,      // args = key, value, key, value, ...
    kGetAttr,   // args[0] . name
    kGetItem,   // args[0] [ args[1] ]
    kSlice,     // args[0] [ args[1] : args[2] : args[3] ] (null parts omitted)
    kCall,      // args[0] ( args[1..], kwargs )
    kFilter,    // args[0] | name ( args[1..], kwargs ); args[0] null in {% filter %} blocks
    kTest,      // args[0] is [not] name ( args[1..] )
    kUnary,     // name ("-", "+", "not") args[0]
    kBinary,    // args[0] name args[1]: + - * / // % ** ~ and or
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ... (== != < > <= >= in "not in")
    kCond,      // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Param {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  enum class Kind {
    kText,        // text
    kOutput,      // {{ expr }}
    kIf,          // if expr: body else else_body (elif nests an kIf in else_body)
    kFor,         // for targets in expr [if cond]: body else else_body; recursive
    kSet,         // set targets = expr, or set targets[0].attr = expr
    kSetBlock,    // set targets[0] %} body {% endset, through the filter chain expr (may be null)
    kMacro,       // macro name(params) body
    kCallBlock,   // call(params) expr %} body: the body is `caller`
    kFilterBlock, // filter expr %} body
    kWith,        // with params %} body
    kBreak,
    kContinue,
    kGeneration,  // {% generation %} body: rendered as is
  };
  Kind kind;
  int line = 0;
  std::string text;
  std::string name;
  std::string attr;
  std::vector<std::string> targets;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<Param> params;
  Body body;
  Body else_body;
  bool recursive = false;
};

}  // namespace doppler::jinja
