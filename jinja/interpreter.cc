// Renders a parsed template: scopes, statements, expressions with Python's semantics, macros,
// calls, loops and the global functions, within the limits of RenderOptions.
#include <algorithm>
#include <cmath>
#include <deque>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "jinja/builtins.h"
#include "jinja/parser.h"
#include "jinja/template.h"

namespace doppler::jinja {

// A macro, the body of a {% call %} block (`caller`), or a global function.
struct Callable {
  enum class Kind { kMacro, kCaller, kGlobal };
  Kind kind;
  const Stmt* stmt = nullptr;  // the macro or call block
  int scope = 0;               // the frame the body's names resolve in, after its own
  std::string name;            // a global's name
};

namespace {

#define JINJA_TRY(lhs, expr)                 \
  auto lhs##_or = (expr);                    \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto& lhs = *lhs##_or

#define JINJA_CHECK(expr)                         \
  if (absl::Status _s = (expr); !_s.ok()) return _s

enum class Flow { kNormal, kBreak, kContinue };

constexpr const char* kGlobals[] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};

class Renderer {
 public:
  Renderer(const RenderOptions& o, const Dict& vars) : opt_(o) {
    frames_.push_back(Frame{{}, -1});
    for (const auto& [k, v] : vars) Assign(k, v);
  }

  absl::StatusOr<std::string> Run(const Body& body) {
    std::string out;
    out_ = &out;
    Flow flow;
    JINJA_CHECK(ExecBody(body, &flow));
    return out;
  }

 private:
  struct Frame {
    std::vector<std::pair<std::string, Value>> vars;
    int parent;
  };
  struct LoopContext {
    const Stmt* stmt;
    int depth;
  };

  // --- errors and limits

  static absl::Status Fail(int line, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("template line ", line, ": ", what));
  }
  // A template's own refusal (raise_exception, FailedPrecondition) already names its line.
  static absl::Status AtLine(int line, const absl::Status& s) {
    if (s.ok() || absl::IsFailedPrecondition(s) || absl::StartsWith(s.message(), "template line ")) return s;
    return absl::Status(s.code(), absl::StrCat("template line ", line, ": ", s.message()));
  }
  static absl::Status UndefinedError(int line, const Value& v) {
    const std::string& what = v.undefined_name();
    return Fail(line, what.empty() ? "a value is undefined" : what);
  }
  absl::Status Limit(int line, absl::string_view what) const {
    return absl::ResourceExhaustedError(absl::StrCat("template line ", line, ": ", what));
  }

  // Accounts for a value built by an operation: its size and nesting.
  absl::Status Built(int line, const Value& v) {
    size_t size = 0;
    if (v.is_string()) size = v.as_string().size();
    if (v.is_list()) size = v.as_list().size() * sizeof(Value);
    if (v.is_dict()) size = v.as_dict().size() * (sizeof(Value) + 32);
    if (size > opt_.max_output_bytes) return Limit(line, absl::StrCat("a value of more than ", opt_.max_output_bytes, " bytes"));
    produced_ += size;
    if (produced_ > opt_.max_bytes_produced) {
      return Limit(line, absl::StrCat("the template built more than ", opt_.max_bytes_produced, " bytes of values"));
    }
    if (v.depth() > opt_.max_value_depth) return Limit(line, absl::StrCat("lists or dicts nested deeper than ", opt_.max_value_depth));
    return absl::OkStatus();
  }

  absl::Status Append(int line, const std::string& text) {
    if (out_->size() + text.size() > opt_.max_output_bytes) {
      return Limit(line, absl::StrCat("output longer than ", opt_.max_output_bytes, " bytes"));
    }
    out_->append(text);
    return absl::OkStatus();
  }

  // --- scopes

  void Assign(const std::string& name, Value v) {
    for (auto& [k, old] : frames_.back().vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    frames_.back().vars.emplace_back(name, std::move(v));
  }

  const Value* Lookup(const std::string& name) const {
    for (int i = static_cast<int>(frames_.size()) - 1; i >= 0; i = frames_[static_cast<size_t>(i)].parent) {
      for (const auto& [k, v] : frames_[static_cast<size_t>(i)].vars) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }

  int Top() const { return static_cast<int>(frames_.size()) - 1; }
  void Push(int parent) { frames_.push_back(Frame{{}, parent}); }

  Value Global(const std::string& name) {
    for (const char* g : kGlobals) {
      if (name != g) continue;
      auto it = globals_.find(name);
      if (it == globals_.end()) {
        callables_.push_back(Callable{Callable::Kind::kGlobal, nullptr, 0, name});
        it = globals_.emplace(name, &callables_.back()).first;
      }
      return Value(it->second);
    }
    return Value::Undefined(absl::StrCat("'", name, "' is undefined"));
  }

  // Renders body into a string of its own (macro bodies, block sets, filter blocks).
  absl::StatusOr<std::string> Capture(const Body& body) {
    std::string text;
    std::string* saved = out_;
    out_ = &text;
    Flow flow;
    absl::Status s = ExecBody(body, &flow);
    out_ = saved;
    if (!s.ok()) return s;
    return text;
  }

  // --- statements

  absl::Status ExecBody(const Body& body, Flow* flow) {
    *flow = Flow::kNormal;
    for (const auto& s : body) {
      JINJA_CHECK(Exec(*s, flow));
      if (*flow != Flow::kNormal) return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  // Evaluation nests (expressions within statements within macro calls ...) at most
  // max_nesting deep, which bounds the stack.
  absl::Status Exec(const Stmt& s, Flow* flow) {
    if (nesting_ >= opt_.max_nesting) return Limit(s.line, absl::StrCat("evaluation nested deeper than ", opt_.max_nesting));
    ++nesting_;
    absl::Status st = ExecStatement(s, flow);
    --nesting_;
    return st;
  }

  absl::StatusOr<Value> Eval(const Expr& e) {
    if (nesting_ >= opt_.max_nesting) return Limit(e.line, absl::StrCat("evaluation nested deeper than ", opt_.max_nesting));
    ++nesting_;
    absl::StatusOr<Value> v = EvalExpression(e);
    --nesting_;
    return v;
  }

  absl::Status ExecStatement(const Stmt& s, Flow* flow) {
    switch (s.kind) {
      case Stmt::Kind::kText: return Append(s.line, s.text);
      case Stmt::Kind::kOutput: {
        JINJA_TRY(v, Eval(*s.expr));
        return Append(s.line, ToStr(v));
      }
      case Stmt::Kind::kIf: {
        JINJA_TRY(c, Eval(*s.expr));
        return ExecBody(c.Truthy() ? s.body : s.else_body, flow);
      }
      case Stmt::Kind::kFor: {
        JINJA_TRY(iterable, Eval(*s.expr));
        if (!iterable.is_undefined() && !iterable.is_list() && !iterable.is_dict() && !iterable.is_string()) {
          return Fail(s.line, absl::StrCat("'", TypeName(iterable), "' object is not iterable"));
        }
        return RunLoop(s, iterable, 0);
      }
      case Stmt::Kind::kSet: return Set(s);
      case Stmt::Kind::kSetBlock: {
        JINJA_TRY(text, Capture(s.body));
        Value v(std::move(text));
        if (s.expr) {
          JINJA_TRY(filtered, EvalFilter(*s.expr, &v));
          v = std::move(filtered);
        }
        Assign(s.targets[0], std::move(v));
        return absl::OkStatus();
      }
      case Stmt::Kind::kMacro:
        callables_.push_back(Callable{Callable::Kind::kMacro, &s, Top(), s.name});
        Assign(s.name, Value(&callables_.back()));
        return absl::OkStatus();
      case Stmt::Kind::kCallBlock: {
        callables_.push_back(Callable{Callable::Kind::kCaller, &s, Top(), "caller"});
        JINJA_TRY(v, EvalCall(*s.expr, Value(&callables_.back())));
        return Append(s.line, ToStr(v));
      }
      case Stmt::Kind::kFilterBlock: {
        JINJA_TRY(text, Capture(s.body));
        Value input(std::move(text));
        JINJA_TRY(v, EvalFilter(*s.expr, &input));
        return Append(s.line, ToStr(v));
      }
      case Stmt::Kind::kWith: {
        std::vector<std::pair<std::string, Value>> values;
        for (const Param& p : s.params) {
          JINJA_TRY(v, Eval(*p.default_value));
          values.emplace_back(p.name, v);
        }
        const size_t saved = frames_.size();
        Push(Top());
        for (auto& [k, v] : values) Assign(k, std::move(v));
        absl::Status st = ExecBody(s.body, flow);
        frames_.resize(saved);
        return st;
      }
      case Stmt::Kind::kBreak: *flow = Flow::kBreak; return absl::OkStatus();
      case Stmt::Kind::kContinue: *flow = Flow::kContinue; return absl::OkStatus();
      case Stmt::Kind::kGeneration: return ExecBody(s.body, flow);
    }
    return absl::OkStatus();
  }

  // Binds a loop's targets to one item (unpacking tuples).
  absl::Status BindTargets(const Stmt& s, const std::vector<std::string>& targets, const Value& item) {
    if (targets.size() == 1) {
      Assign(targets[0], item);
      return absl::OkStatus();
    }
    if (!item.is_list() || item.as_list().size() != targets.size()) {
      return Fail(s.line, absl::StrCat("cannot unpack ", TypeName(item), " into ", targets.size(), " names"));
    }
    for (size_t i = 0; i < targets.size(); ++i) Assign(targets[i], item.as_list()[i]);
    return absl::OkStatus();
  }

  absl::Status Set(const Stmt& s) {
    JINJA_TRY(v, Eval(*s.expr));
    if (!s.attr.empty()) {
      const Value* ns = Lookup(s.targets[0]);
      if (ns == nullptr || !ns->is_namespace()) {
        return Fail(s.line, absl::StrCat("cannot assign attribute on non-namespace object '", s.targets[0], "'"));
      }
      Dict& attrs = ns->as_namespace()->attrs;
      for (auto& [k, old] : attrs) {
        if (k == s.attr) {
          old = v;
          return absl::OkStatus();
        }
      }
      attrs.emplace_back(s.attr, v);
      return absl::OkStatus();
    }
    if (s.targets.size() == 1) {
      Assign(s.targets[0], v);
      return absl::OkStatus();
    }
    if (!v.is_list() || v.as_list().size() != s.targets.size()) {
      return Fail(s.line, absl::StrCat("cannot unpack ", TypeName(v), " into ", s.targets.size(), " names"));
    }
    for (size_t i = 0; i < s.targets.size(); ++i) Assign(s.targets[i], v.as_list()[i]);
    return absl::OkStatus();
  }

  absl::Status Iteration(int line) {
    if (++iterations_ > opt_.max_loop_iterations) {
      return Limit(line, absl::StrCat("more than ", opt_.max_loop_iterations, " loop iterations"));
    }
    return absl::OkStatus();
  }

  // One for loop (or a recursive loop() call at depth > 0) over iterable, into out_.
  absl::Status RunLoop(const Stmt& s, const Value& iterable, int depth) {
    JINJA_TRY(all, Iterate(iterable));
    const size_t saved = frames_.size();
    Push(Top());
    List items;
    if (s.cond) {  // the filter runs before the loop: loop.length counts what passes
      for (const Value& item : all) {
        JINJA_CHECK(Iteration(s.line));
        JINJA_CHECK(BindTargets(s, s.targets, item));
        absl::StatusOr<Value> keep = Eval(*s.cond);
        if (!keep.ok()) {
          frames_.resize(saved);
          return keep.status();
        }
        if (keep->Truthy()) items.push_back(item);
      }
    } else {
      items = std::move(all);
    }
    loops_.push_back(LoopContext{&s, depth});
    absl::Status st = absl::OkStatus();
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n && st.ok(); ++i) {
      st = Iteration(s.line);
      if (!st.ok()) break;
      const Value& item = items[static_cast<size_t>(i)];
      frames_.back().vars.clear();  // each iteration starts from the enclosing scope's names
      Dict loop = {{"index", Value(i + 1)},
                   {"index0", Value(i)},
                   {"revindex", Value(n - i)},
                   {"revindex0", Value(n - i - 1)},
                   {"first", Value(i == 0)},
                   {"last", Value(i == n - 1)},
                   {"length", Value(n)},
                   {"depth", Value(int64_t{depth} + 1)},
                   {"depth0", Value(int64_t{depth})},
                   {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::Undefined("there is no previous item")},
                   {"nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::Undefined("there is no next item")}};
      Assign("loop", Value::MakeDict(std::move(loop)));
      st = BindTargets(s, s.targets, item);
      if (!st.ok()) break;
      Flow flow;
      st = ExecBody(s.body, &flow);
      if (flow == Flow::kBreak) break;
    }
    loops_.pop_back();
    frames_.resize(saved);
    if (st.ok() && items.empty() && !s.else_body.empty()) {
      Flow flow;
      st = ExecBody(s.else_body, &flow);
    }
    return st;
  }

  // --- expressions

  absl::StatusOr<Value> EvalExpression(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.literal;
      case Expr::Kind::kName: {
        if (const Value* v = Lookup(e.name)) return *v;
        return Global(e.name);
      }
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        List items;
        for (const ExprPtr& a : e.args) {
          JINJA_TRY(v, Eval(*a));
          items.push_back(std::move(v));
        }
        Value v = Value::MakeList(std::move(items), e.kind == Expr::Kind::kTuple);
        JINJA_CHECK(Built(e.line, v));
        return v;
      }
      case Expr::Kind::kDict: {
        Dict items;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          JINJA_TRY(k, Eval(*e.args[i]));
          JINJA_TRY(v, Eval(*e.args[i + 1]));
          if (!k.is_string()) return Fail(e.line, "dict keys must be strings");
          auto it = std::find_if(items.begin(), items.end(), [&](const auto& kv) { return kv.first == k.as_string(); });
          if (it != items.end()) {
            it->second = std::move(v);
          } else {
            items.emplace_back(k.as_string(), std::move(v));
          }
        }
        Value v = Value::MakeDict(std::move(items));
        JINJA_CHECK(Built(e.line, v));
        return v;
      }
      case Expr::Kind::kGetAttr: {
        JINJA_TRY(obj, Eval(*e.args[0]));
        if (obj.is_undefined()) return UndefinedError(e.line, obj);
        return GetItem(obj, Value(e.name));
      }
      case Expr::Kind::kGetItem: {
        JINJA_TRY(obj, Eval(*e.args[0]));
        JINJA_TRY(key, Eval(*e.args[1]));
        if (obj.is_undefined()) return UndefinedError(e.line, obj);
        return GetItem(obj, key);
      }
      case Expr::Kind::kSlice: return Slice(e);
      case Expr::Kind::kCall: return EvalCall(e, Value());
      case Expr::Kind::kFilter: return EvalFilter(e, nullptr);
      case Expr::Kind::kTest: {
        JINJA_TRY(v, Eval(*e.args[0]));
        JINJA_TRY(args, EvalArgs(e, 1));
        absl::StatusOr<bool> r = ApplyTest(e.name, v, args);
        if (!r.ok()) return AtLine(e.line, r.status());
        return Value(*r != e.negated);
      }
      case Expr::Kind::kUnary: {
        JINJA_TRY(v, Eval(*e.args[0]));
        if (e.name == "not") return Value(!v.Truthy());
        if (v.is_undefined()) return UndefinedError(e.line, v);
        if (!v.is_number()) return Fail(e.line, absl::StrCat("bad operand type for unary ", e.name, ": '", TypeName(v), "'"));
        if (e.name == "+") return v.is_float() ? v : Value(v.as_int());
        if (v.is_float()) return Value(-v.as_double());
        if (v.as_int() == INT64_MIN) return Fail(e.line, "integer overflow");
        return Value(-v.as_int());
      }
      case Expr::Kind::kBinary: {
        JINJA_TRY(a, Eval(*e.args[0]));
        if (e.name == "and") return a.Truthy() ? Eval(*e.args[1]) : a;
        if (e.name == "or") return a.Truthy() ? a : Eval(*e.args[1]);
        JINJA_TRY(b, Eval(*e.args[1]));
        absl::StatusOr<Value> r = BinaryOp(e.name, a, b, opt_.max_output_bytes);
        if (!r.ok()) return AtLine(e.line, r.status());
        JINJA_CHECK(Built(e.line, *r));
        return r;
      }
      case Expr::Kind::kCompare: {
        JINJA_TRY(left, Eval(*e.args[0]));
        Value a = left;
        for (size_t i = 0; i < e.ops.size(); ++i) {
          JINJA_TRY(b, Eval(*e.args[i + 1]));
          absl::StatusOr<bool> holds = CompareOp(e.ops[i], a, b);
          if (!holds.ok()) return AtLine(e.line, holds.status());
          if (!*holds) return Value(false);
          a = b;
        }
        return Value(true);
      }
      case Expr::Kind::kCond: {
        JINJA_TRY(c, Eval(*e.args[0]));
        if (c.Truthy()) return Eval(*e.args[1]);
        if (e.args[2]) return Eval(*e.args[2]);
        return Value::Undefined("the conditional expression had no else");
      }
    }
    return Fail(e.line, "unknown expression");
  }

  absl::StatusOr<Args> EvalArgs(const Expr& e, size_t first) {
    Args a;
    a.max_size = opt_.max_output_bytes;
    for (size_t i = first; i < e.args.size(); ++i) {
      JINJA_TRY(v, Eval(*e.args[i]));
      a.pos.push_back(std::move(v));
    }
    for (const auto& [k, x] : e.kwargs) {
      JINJA_TRY(v, Eval(*x));
      a.kw.emplace_back(k, std::move(v));
    }
    return a;
  }

  // A filter expression; input replaces the innermost (missing) operand in {% filter %} and
  // {% set %} blocks.
  absl::StatusOr<Value> EvalFilter(const Expr& e, const Value* input) {
    Value v;
    if (e.args[0] == nullptr) {
      v = *input;
    } else if (e.args[0]->kind == Expr::Kind::kFilter) {
      JINJA_TRY(inner, EvalFilter(*e.args[0], input));
      v = std::move(inner);
    } else {
      JINJA_TRY(x, Eval(*e.args[0]));
      v = std::move(x);
    }
    JINJA_TRY(args, EvalArgs(e, 1));
    absl::StatusOr<Value> r = ApplyFilter(e.name, v, args);
    if (!r.ok()) return AtLine(e.line, r.status());
    JINJA_CHECK(Built(e.line, *r));
    return r;
  }

  absl::StatusOr<Value> Slice(const Expr& e) {
    JINJA_TRY(obj, Eval(*e.args[0]));
    if (obj.is_undefined()) return UndefinedError(e.line, obj);
    int64_t bounds[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int i = 0; i < 3; ++i) {
      if (!e.args[static_cast<size_t>(i) + 1]) continue;
      JINJA_TRY(v, Eval(*e.args[static_cast<size_t>(i) + 1]));
      if (v.is_none()) continue;
      if (!v.is_int() && !v.is_bool()) return Fail(e.line, "slice indices must be integers or None");
      bounds[i] = v.as_int();
      given[i] = true;
    }
    const int64_t step = bounds[2];
    if (step == 0) return Fail(e.line, "slice step cannot be zero");
    std::vector<std::string> chars;
    if (obj.is_string()) chars = CodePoints(obj.as_string());
    if (!obj.is_string() && !obj.is_list()) return Fail(e.line, absl::StrCat("'", TypeName(obj), "' object is not subscriptable"));
    const int64_t n = static_cast<int64_t>(obj.is_string() ? chars.size() : obj.as_list().size());
    auto clamp = [&](int64_t x, bool is_given, int64_t dflt) {
      if (!is_given) return dflt;
      if (x < 0) x += n;
      if (step > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t start = clamp(bounds[0], given[0], step > 0 ? 0 : n - 1);
    const int64_t stop = clamp(bounds[1], given[1], step > 0 ? n : -1);
    std::string text;
    List items;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (obj.is_string()) {
        text += chars[static_cast<size_t>(i)];
      } else {
        items.push_back(obj.as_list()[static_cast<size_t>(i)]);
      }
    }
    Value v = obj.is_string() ? Value(std::move(text)) : Value::MakeList(std::move(items), obj.is_tuple());
    JINJA_CHECK(Built(e.line, v));
    return v;
  }

  // --- calls

  // A call expression; caller (when defined) is passed as the `caller` of a {% call %} block.
  absl::StatusOr<Value> EvalCall(const Expr& e, const Value& caller) {
    const Expr& callee = *e.args[0];
    JINJA_TRY(args, EvalArgs(e, 1));
    if (!caller.is_undefined()) args.kw.emplace_back("caller", caller);
    absl::StatusOr<Value> r;
    if (callee.kind == Expr::Kind::kGetAttr) {  // a method, unless a dict holds a callable there
      JINJA_TRY(obj, Eval(*callee.args[0]));
      if (obj.is_undefined()) return UndefinedError(e.line, obj);
      const Value held = obj.is_dict() || obj.is_namespace() ? GetItem(obj, Value(callee.name)) : Value();
      const bool loop_cycle = callee.name == "cycle" && callee.args[0]->kind == Expr::Kind::kName &&
                              callee.args[0]->name == "loop" && !loops_.empty() && obj.Find("index0") != nullptr;
      if (loop_cycle) {  // loop.cycle(a, b, ...): the argument at the iteration's index, in turn
        if (args.pos.empty()) return Fail(e.line, "loop.cycle() needs at least one value");
        r = args.pos[static_cast<size_t>(obj.Find("index0")->as_int()) % args.pos.size()];
      } else if (held.is_callable()) {
        r = Invoke(e.line, held, args);
      } else {
        r = CallMethod(obj, callee.name, args);
        if (!r.ok()) return AtLine(e.line, r.status());
      }
    } else if (callee.kind == Expr::Kind::kName && callee.name == "loop" && !loops_.empty() && Lookup("loop") != nullptr) {
      const LoopContext ctx = loops_.back();
      if (!ctx.stmt->recursive) return Fail(e.line, "loop() is only callable in a loop marked recursive");
      if (args.pos.size() != 1) return Fail(e.line, "loop() takes one iterable");
      JINJA_CHECK(EnterCall(e.line));
      std::string text;
      std::string* saved = out_;
      out_ = &text;
      absl::Status s = RunLoop(*ctx.stmt, args.pos[0], ctx.depth + 1);
      out_ = saved;
      --call_depth_;
      if (!s.ok()) return s;
      r = Value(std::move(text));
    } else {
      JINJA_TRY(f, Eval(callee));
      r = Invoke(e.line, f, args);
    }
    if (r.ok()) JINJA_CHECK(Built(e.line, *r));
    return r;
  }

  absl::Status EnterCall(int line) {
    if (++call_depth_ > opt_.max_call_depth) {
      --call_depth_;
      return Limit(line, absl::StrCat("calls nested deeper than ", opt_.max_call_depth));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Value> Invoke(int line, const Value& f, const Args& args) {
    if (f.is_undefined()) return UndefinedError(line, f);
    if (!f.is_callable()) return Fail(line, absl::StrCat("'", TypeName(f), "' object is not callable"));
    const Callable& c = *f.as_callable();
    if (c.kind == Callable::Kind::kGlobal) {
      absl::StatusOr<Value> r = CallGlobal(line, c.name, args);
      return r.ok() ? r : AtLine(line, r.status());
    }
    JINJA_CHECK(EnterCall(line));
    const size_t saved = frames_.size();
    // The frame it was defined in, or the nearest still there when a namespace carried it out.
    Push(std::min(c.scope, Top()));
    absl::StatusOr<std::string> text = BindAndRender(line, c, args);
    frames_.resize(saved);
    --call_depth_;
    if (!text.ok()) return text.status();
    return Value(*std::move(text));
  }

  absl::StatusOr<std::string> BindAndRender(int line, const Callable& c, const Args& args) {
    const std::vector<Param>& params = c.stmt->params;
    List varargs;
    for (size_t i = 0; i < args.pos.size(); ++i) {
      if (i < params.size()) {
        Assign(params[i].name, args.pos[i]);
      } else {
        varargs.push_back(args.pos[i]);
      }
    }
    Dict kwargs;
    for (const auto& kv : args.kw) {
      const bool is_param = std::any_of(params.begin(), params.end(), [&](const Param& p) { return p.name == kv.first; });
      if (is_param || kv.first == "caller") {
        Assign(kv.first, kv.second);
      } else {
        kwargs.push_back(kv);
      }
    }
    for (size_t i = args.pos.size(); i < params.size(); ++i) {
      const Param& p = params[i];
      if (std::any_of(args.kw.begin(), args.kw.end(), [&](const auto& kv) { return kv.first == p.name; })) continue;
      if (p.default_value) {
        JINJA_TRY(v, Eval(*p.default_value));
        Assign(p.name, v);
      } else {
        Assign(p.name, Value::Undefined(absl::StrCat("'", p.name, "' is undefined")));
      }
    }
    const Value extra_positional = Value::MakeList(std::move(varargs));
    const Value extra_keywords = Value::MakeDict(std::move(kwargs));
    JINJA_CHECK(Built(line, extra_positional));
    JINJA_CHECK(Built(line, extra_keywords));
    Assign("varargs", extra_positional);
    Assign("kwargs", extra_keywords);
    return Capture(c.stmt->body);
  }

  absl::StatusOr<Value> CallGlobal(int line, const std::string& name, const Args& a) {
    if (name == "raise_exception") {
      const Value* msg = a.Get(0, "message");
      return absl::FailedPreconditionError(
          absl::StrCat(msg != nullptr ? ToStr(*msg) : "raise_exception() called", " (template line ", line, ")"));
    }
    if (name == "range") {
      int64_t b[3] = {0, 0, 1};
      if (a.pos.empty() || a.pos.size() > 3) return Fail(line, "range() takes 1 to 3 integers");
      for (size_t i = 0; i < a.pos.size(); ++i) {
        if (!a.pos[i].is_int() && !a.pos[i].is_bool()) return Fail(line, "range() takes integers");
      }
      if (a.pos.size() == 1) {
        b[1] = a.pos[0].as_int();
      } else {
        for (size_t i = 0; i < a.pos.size(); ++i) b[i] = a.pos[i].as_int();
      }
      if (b[2] == 0) return Fail(line, "range() step must not be zero");
      const long double count = b[2] > 0 ? std::ceil(((long double)b[1] - b[0]) / b[2]) : std::ceil(((long double)b[0] - b[1]) / -b[2]);
      if (count > static_cast<long double>(opt_.max_loop_iterations)) return Limit(line, "range() too long");
      List items;
      for (int64_t x = b[0]; b[2] > 0 ? x < b[1] : x > b[1]; x += b[2]) items.emplace_back(x);
      return Value::MakeList(std::move(items));
    }
    if (name == "namespace" || name == "dict") {
      Dict attrs;
      for (const Value& p : a.pos) {
        if (!p.is_dict()) return Fail(line, absl::StrCat(name, "() takes a dict or keyword arguments"));
        for (const auto& kv : p.as_dict()) attrs.push_back(kv);
      }
      for (const auto& kv : a.kw) attrs.push_back(kv);
      if (name == "dict") return Value::MakeDict(std::move(attrs));
      namespaces_.push_back(Namespace{std::move(attrs)});
      return Value(&namespaces_.back());
    }
    if (name == "strftime_now") {
      const Value* fmt = a.Get(0, "format");
      if (fmt == nullptr || !fmt->is_string()) return Fail(line, "strftime_now() takes a format string");
      std::tm now;
      if (opt_.now) {
        now = *opt_.now;
      } else {
        const std::time_t t = std::time(nullptr);
        localtime_r(&t, &now);
      }
      if (fmt->as_string().empty()) return Value(std::string());
      std::string buf(fmt->as_string().size() * 8 + 64, '\0');
      const size_t n = std::strftime(buf.data(), buf.size(), fmt->as_string().c_str(), &now);
      buf.resize(n);
      return Value(std::move(buf));
    }
    return Fail(line, absl::StrCat("'", name, "' is not callable"));
  }

  const RenderOptions& opt_;
  std::string* out_ = nullptr;
  std::vector<Frame> frames_;
  std::vector<LoopContext> loops_;
  std::deque<Namespace> namespaces_;
  std::deque<Callable> callables_;
  std::map<std::string, Callable*> globals_;
  int64_t iterations_ = 0;
  size_t produced_ = 0;
  int call_depth_ = 0;
  int nesting_ = 0;
};

}  // namespace

absl::StatusOr<Template> Template::Parse(const std::string& source) {
  absl::StatusOr<Body> body = jinja::Parse(source);
  if (!body.ok()) return body.status();
  Template t;
  t.body_ = std::make_shared<const Body>(*std::move(body));
  return t;
}

absl::StatusOr<std::string> Template::Render(const Dict& variables, const RenderOptions& options) const {
  return Renderer(options, variables).Run(*body_);
}

}  // namespace doppler::jinja
