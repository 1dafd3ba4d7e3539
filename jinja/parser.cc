#include "jinja/parser.h"

#include <cerrno>
#include <cstdlib>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "jinja/lexer.h"

namespace doppler::jinja {
namespace {

using K = Token::Kind;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  absl::StatusOr<Body> Template() {
    Body body;
    std::string end;
    if (absl::Status s = ParseBody({}, &body, &end); !s.ok()) return s;
    return body;
  }

 private:
  // --- token helpers
  const Token& Cur() const { return t_[i_]; }
  const Token& Peek(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  bool IsOp(const char* op) const { return Cur().kind == K::kOp && Cur().text == op; }
  bool IsName(const char* name) const { return Cur().kind == K::kName && Cur().text == name; }
  bool SkipOp(const char* op) {
    if (!IsOp(op)) return false;
    ++i_;
    return true;
  }
  bool SkipName(const char* name) {
    if (!IsName(name)) return false;
    ++i_;
    return true;
  }
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("template line ", Cur().line, ": ", what));
  }
  std::string Describe(const Token& t) const {
    switch (t.kind) {
      case K::kBlockEnd: return "end of tag";
      case K::kVarEnd: return "'}}'";
      case K::kEnd: return "end of template";
      case K::kString: return "a string";
      default: return absl::StrCat("'", t.text, "'");
    }
  }
  absl::Status Expect(const char* op) {
    if (SkipOp(op)) return absl::OkStatus();
    return Error(absl::StrCat("expected '", op, "', found ", Describe(Cur())));
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().kind != K::kName) return Error(absl::StrCat("expected a name, found ", Describe(Cur())));
    return t_[i_++].text;
  }
  absl::Status ExpectBlockEnd() {
    if (Cur().kind == K::kBlockEnd) {
      ++i_;
      return absl::OkStatus();
    }
    return Error(absl::StrCat("expected end of tag, found ", Describe(Cur())));
  }
  absl::Status Deeper() {
    if (++depth_ > kMaxParseDepth) return Error(absl::StrCat("nesting deeper than ", kMaxParseDepth));
    return absl::OkStatus();
  }

  struct DepthGuard {
    int& d;
    ~DepthGuard() { --d; }
  };

  static ExprPtr Make(Expr::Kind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // --- statements

  // Statements until one of the end tags (its name is stored in *end and its tag's name consumed)
  // or, when ends is empty, the end of the template.
  absl::Status ParseBody(std::initializer_list<const char*> ends, Body* body, std::string* end) {
    if (absl::Status s = Deeper(); !s.ok()) return s;
    DepthGuard g{depth_};
    while (true) {
      const Token& t = Cur();
      if (t.kind == K::kEnd) {
        if (ends.size() == 0) return absl::OkStatus();
        std::vector<std::string> names(ends.begin(), ends.end());
        return Error(absl::StrCat("missing {% ", absl::StrJoin(names, " or "), " %}"));
      }
      if (t.kind == K::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = t.line;
        s->text = t.text;
        body->push_back(std::move(s));
        ++i_;
        continue;
      }
      if (t.kind == K::kVarBegin) {
        ++i_;
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = t.line;
        absl::StatusOr<ExprPtr> e = Expression();
        if (!e.ok()) return e.status();
        s->expr = *std::move(e);
        if (Cur().kind != K::kVarEnd) return Error(absl::StrCat("expected '}}', found ", Describe(Cur())));
        ++i_;
        body->push_back(std::move(s));
        continue;
      }
      if (t.kind != K::kBlockBegin) return Error(absl::StrCat("unexpected ", Describe(t)));
      ++i_;
      if (Cur().kind != K::kName) return Error(absl::StrCat("expected a tag name, found ", Describe(Cur())));
      const std::string name = Cur().text;
      for (const char* e : ends) {
        if (name == e) {
          ++i_;
          *end = name;
          return absl::OkStatus();
        }
      }
      absl::StatusOr<std::unique_ptr<Stmt>> s = Statement();
      if (!s.ok()) return s.status();
      body->push_back(*std::move(s));
    }
  }

  absl::StatusOr<std::unique_ptr<Stmt>> Statement() {
    const int line = Cur().line;
    const std::string name = Cur().text;
    ++i_;
    auto s = std::make_unique<Stmt>();
    s->line = line;
    absl::Status st;
    if (name == "if") {
      st = If(s.get());
    } else if (name == "for") {
      st = For(s.get());
    } else if (name == "set") {
      st = Set(s.get());
    } else if (name == "macro") {
      st = Macro(s.get());
    } else if (name == "call") {
      st = CallBlock(s.get());
    } else if (name == "filter") {
      st = FilterBlock(s.get());
    } else if (name == "with") {
      st = With(s.get());
    } else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return Error(absl::StrCat("'", name, "' outside a loop"));
      s->kind = name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      st = ExpectBlockEnd();
    } else if (name == "generation") {
      s->kind = Stmt::Kind::kGeneration;
      st = ExpectBlockEnd();
      std::string end;
      if (st.ok()) st = ParseBody({"endgeneration"}, &s->body, &end);
      if (st.ok()) st = ExpectBlockEnd();
    } else {
      --i_;
      return Error(absl::StrCat("unknown or unsupported tag '", name, "'"));
    }
    if (!st.ok()) return st;
    return s;
  }

  absl::Status If(Stmt* s) {
    s->kind = Stmt::Kind::kIf;
    absl::StatusOr<ExprPtr> cond = Expression();
    if (!cond.ok()) return cond.status();
    s->expr = *std::move(cond);
    if (absl::Status st = ExpectBlockEnd(); !st.ok()) return st;
    std::string end;
    if (absl::Status st = ParseBody({"elif", "else", "endif"}, &s->body, &end); !st.ok()) return st;
    if (end == "elif") {
      auto elif = std::make_unique<Stmt>();
      elif->line = Cur().line;
      if (absl::Status st = If(elif.get()); !st.ok()) return st;
      s->else_body.push_back(std::move(elif));
      return absl::OkStatus();  // the nested if consumed endif
    }
    if (end == "else") {
      if (absl::Status st = ExpectBlockEnd(); !st.ok()) return st;
      if (absl::Status st = ParseBody({"endif"}, &s->else_body, &end); !st.ok()) return st;
    }
    return ExpectBlockEnd();
  }

  // name, or name, name, ... (optionally in parentheses)
  absl::Status Targets(std::vector<std::string>* names) {
    const bool paren = SkipOp("(");
    do {
      absl::StatusOr<std::string> n = ExpectName();
      if (!n.ok()) return n.status();
      names->push_back(*n);
    } while (SkipOp(",") && Cur().kind == K::kName);
    if (paren) return Expect(")");
    return absl::OkStatus();
  }

  absl::Status For(Stmt* s) {
    s->kind = Stmt::Kind::kFor;
    if (absl::Status st = Targets(&s->targets); !st.ok()) return st;
    if (!SkipName("in")) return Error(absl::StrCat("expected 'in', found ", Describe(Cur())));
    absl::StatusOr<ExprPtr> iter = TupleOrExpression(/*with_cond=*/false);
    if (!iter.ok()) return iter.status();
    s->expr = *std::move(iter);
    if (SkipName("if")) {
      absl::StatusOr<ExprPtr> cond = Expression();
      if (!cond.ok()) return cond.status();
      s->cond = *std::move(cond);
    }
    s->recursive = SkipName("recursive");
    if (absl::Status st = ExpectBlockEnd(); !st.ok()) return st;
    ++loop_depth_;
    std::string end;
    absl::Status st = ParseBody({"else", "endfor"}, &s->body, &end);
    --loop_depth_;
    if (!st.ok()) return st;
    if (end == "else") {
      if (absl::Status st2 = ExpectBlockEnd(); !st2.ok()) return st2;
      const int saved = loop_depth_;
      loop_depth_ = 0;  // the else body runs after the loop: no break/continue there
      st = ParseBody({"endfor"}, &s->else_body, &end);
      loop_depth_ = saved;
      if (!st.ok()) return st;
    }
    return ExpectBlockEnd();
  }

  absl::Status Set(Stmt* s) {
    absl::StatusOr<std::string> first = ExpectName();
    if (!first.ok()) return first.status();
    s->targets.push_back(*first);
    if (SkipOp(".")) {
      absl::StatusOr<std::string> attr = ExpectName();
      if (!attr.ok()) return attr.status();
      s->attr = *attr;
    } else {
      while (SkipOp(",")) {
        absl::StatusOr<std::string> n = ExpectName();
        if (!n.ok()) return n.status();
        s->targets.push_back(*n);
      }
    }
    if (SkipOp("=")) {
      s->kind = Stmt::Kind::kSet;
      absl::StatusOr<ExprPtr> e = TupleOrExpression(/*with_cond=*/true);
      if (!e.ok()) return e.status();
      s->expr = *std::move(e);
      return ExpectBlockEnd();
    }
    if (s->targets.size() != 1 || !s->attr.empty()) return Error("a block {% set %} assigns one name");
    s->kind = Stmt::Kind::kSetBlock;
    if (IsOp("|")) {
      absl::StatusOr<ExprPtr> chain = FilterChain(nullptr);
      if (!chain.ok()) return chain.status();
      s->expr = *std::move(chain);
    }
    if (absl::Status st = ExpectBlockEnd(); !st.ok()) return st;
    std::string end;
    if (absl::Status st = ParseBody({"endset"}, &s->body, &end); !st.ok()) return st;
    return ExpectBlockEnd();
  }

  absl::Status Params(std::vector<Param>* params) {
    if (absl::Status st = Expect("("); !st.ok()) return st;
    while (!IsOp(")")) {
      if (!params->empty()) {
        if (absl::Status st = Expect(","); !st.ok()) return st;
        if (IsOp(")")) break;
      }
      Param p;
      absl::StatusOr<std::string> n = ExpectName();
      if (!n.ok()) return n.status();
      p.name = *n;
      if (SkipOp("=")) {
        absl::StatusOr<ExprPtr> d = Expression();
        if (!d.ok()) return d.status();
        p.default_value = *std::move(d);
      }
      params->push_back(std::move(p));
    }
    ++i_;
    return absl::OkStatus();
  }

  absl::Status Macro(Stmt* s) {
    s->kind = Stmt::Kind::kMacro;
    absl::StatusOr<std::string> n = ExpectName();
    if (!n.ok()) return n.status();
    s->name = *n;
    if (absl::Status st = Params(&s->params); !st.ok()) return st;
    if (absl::Status st = ExpectBlockEnd(); !st.ok()) return st;
    const int saved = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    absl::Status st = ParseBody({"endmacro"}, &s->body, &end);
    loop_depth_ = saved;
    if (!st.ok()) return st;
    return ExpectBlockEnd();
  }

  absl::Status CallBlock(Stmt* s) {
    s->kind = Stmt::Kind::kCallBlock;
    if (IsOp("(")) {
      if (absl::Status st = Params(&s->params); !st.ok()) return st;
    }
    absl::StatusOr<ExprPtr> call = Expression();
    if (!call.ok()) return call.status();
    if ((*call)->kind != Expr::Kind::kCall) return Error("{% call %} needs a macro call");
    s->expr = *std::move(call);
    if (absl::Status st = ExpectBlockEnd(); !st.ok()) return st;
    std::string end;
    if (absl::Status st = ParseBody({"endcall"}, &s->body, &end); !st.ok()) return st;
    return ExpectBlockEnd();
  }

  absl::Status FilterBlock(Stmt* s) {
    s->kind = Stmt::Kind::kFilterBlock;
    --i_;  // "filter" is parsed as the first link of the chain: name [args] (| name [args])*
    Token& t = t_[i_];
    t = Token{K::kOp, "|", t.line};
    absl::StatusOr<ExprPtr> chain = FilterChain(nullptr);
    if (!chain.ok()) return chain.status();
    s->expr = *std::move(chain);
    if (absl::Status st = ExpectBlockEnd(); !st.ok()) return st;
    std::string end;
    if (absl::Status st = ParseBody({"endfilter"}, &s->body, &end); !st.ok()) return st;
    return ExpectBlockEnd();
  }

  absl::Status With(Stmt* s) {
    s->kind = Stmt::Kind::kWith;
    while (Cur().kind != K::kBlockEnd) {
      if (!s->params.empty()) {
        if (absl::Status st = Expect(","); !st.ok()) return st;
      }
      Param p;
      absl::StatusOr<std::string> n = ExpectName();
      if (!n.ok()) return n.status();
      p.name = *n;
      if (absl::Status st = Expect("="); !st.ok()) return st;
      absl::StatusOr<ExprPtr> v = Expression();
      if (!v.ok()) return v.status();
      p.default_value = *std::move(v);
      s->params.push_back(std::move(p));
    }
    ++i_;
    std::string end;
    if (absl::Status st = ParseBody({"endwith"}, &s->body, &end); !st.ok()) return st;
    return ExpectBlockEnd();
  }

  // --- expressions

  // An expression, or several separated by commas (a tuple without parentheses).
  absl::StatusOr<ExprPtr> TupleOrExpression(bool with_cond) {
    const int line = Cur().line;
    absl::StatusOr<ExprPtr> first = with_cond ? Expression() : Or();
    if (!first.ok() || !IsOp(",")) return first;
    ExprPtr tuple = Make(Expr::Kind::kTuple, line);
    tuple->args.push_back(*std::move(first));
    while (SkipOp(",")) {
      if (Cur().kind == K::kBlockEnd || IsName("if") || IsName("recursive")) break;
      absl::StatusOr<ExprPtr> e = with_cond ? Expression() : Or();
      if (!e.ok()) return e.status();
      tuple->args.push_back(*std::move(e));
    }
    return tuple;
  }

  absl::StatusOr<ExprPtr> Expression() {
    if (absl::Status s = Deeper(); !s.ok()) return s;
    DepthGuard g{depth_};
    const int line = Cur().line;
    absl::StatusOr<ExprPtr> value = Or();
    if (!value.ok()) return value;
    if (!SkipName("if")) return value;
    ExprPtr e = Make(Expr::Kind::kCond, line);
    absl::StatusOr<ExprPtr> cond = Or();
    if (!cond.ok()) return cond.status();
    e->args.push_back(*std::move(cond));
    e->args.push_back(*std::move(value));
    if (SkipName("else")) {
      absl::StatusOr<ExprPtr> other = Expression();
      if (!other.ok()) return other.status();
      e->args.push_back(*std::move(other));
    } else {
      e->args.push_back(nullptr);
    }
    return e;
  }

  static ExprPtr Binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
    ExprPtr e = Make(Expr::Kind::kBinary, line);
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  absl::StatusOr<ExprPtr> Or() {
    absl::StatusOr<ExprPtr> a = And();
    while (a.ok() && IsName("or")) {
      const int line = Cur().line;
      ++i_;
      absl::StatusOr<ExprPtr> b = And();
      if (!b.ok()) return b;
      a = Binary("or", *std::move(a), *std::move(b), line);
    }
    return a;
  }

  absl::StatusOr<ExprPtr> And() {
    absl::StatusOr<ExprPtr> a = Not();
    while (a.ok() && IsName("and")) {
      const int line = Cur().line;
      ++i_;
      absl::StatusOr<ExprPtr> b = Not();
      if (!b.ok()) return b;
      a = Binary("and", *std::move(a), *std::move(b), line);
    }
    return a;
  }

  absl::StatusOr<ExprPtr> Not() {
    if (IsName("not")) {
      if (absl::Status s = Deeper(); !s.ok()) return s;
      DepthGuard g{depth_};
      const int line = Cur().line;
      ++i_;
      absl::StatusOr<ExprPtr> a = Not();
      if (!a.ok()) return a;
      ExprPtr e = Make(Expr::Kind::kUnary, line);
      e->name = "not";
      e->args.push_back(*std::move(a));
      return e;
    }
    return Compare();
  }

  absl::StatusOr<ExprPtr> Compare() {
    const int line = Cur().line;
    absl::StatusOr<ExprPtr> first = Math1();
    if (!first.ok()) return first;
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().kind == K::kOp && (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" ||
                                   Cur().text == ">" || Cur().text == "<=" || Cur().text == ">=")) {
        op = Cur().text;
        ++i_;
      } else if (IsName("in")) {
        op = "in";
        ++i_;
      } else if (IsName("not") && Peek().kind == K::kName && Peek().text == "in") {
        op = "not in";
        i_ += 2;
      } else {
        break;
      }
      absl::StatusOr<ExprPtr> next = Math1();
      if (!next.ok()) return next;
      if (!cmp) {
        cmp = Make(Expr::Kind::kCompare, line);
        cmp->args.push_back(*std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(*std::move(next));
    }
    if (cmp) return cmp;
    return first;
  }

  absl::StatusOr<ExprPtr> BinaryLevel(std::initializer_list<const char*> ops, absl::StatusOr<ExprPtr> (Parser::*next)()) {
    absl::StatusOr<ExprPtr> a = (this->*next)();
    while (a.ok()) {
      const char* found = nullptr;
      for (const char* op : ops) {
        if (IsOp(op)) found = op;
      }
      if (found == nullptr) break;
      const int line = Cur().line;
      ++i_;
      absl::StatusOr<ExprPtr> b = (this->*next)();
      if (!b.ok()) return b;
      a = Binary(found, *std::move(a), *std::move(b), line);
    }
    return a;
  }

  absl::StatusOr<ExprPtr> Math1() { return BinaryLevel({"+", "-"}, &Parser::Concat); }
  absl::StatusOr<ExprPtr> Concat() { return BinaryLevel({"~"}, &Parser::Math2); }
  absl::StatusOr<ExprPtr> Math2() { return BinaryLevel({"*", "/", "//", "%"}, &Parser::Pow); }
  absl::StatusOr<ExprPtr> Pow() { return BinaryLevel({"**"}, &Parser::UnaryWithFilter); }
  absl::StatusOr<ExprPtr> UnaryWithFilter() { return Unary(true); }

  absl::StatusOr<ExprPtr> Unary(bool with_filter) {
    if (absl::Status s = Deeper(); !s.ok()) return s;
    DepthGuard g{depth_};
    const int line = Cur().line;
    absl::StatusOr<ExprPtr> node;
    if (IsOp("-") || IsOp("+")) {
      const std::string op = Cur().text;
      ++i_;
      absl::StatusOr<ExprPtr> a = Unary(false);
      if (!a.ok()) return a;
      ExprPtr e = Make(Expr::Kind::kUnary, line);
      e->name = op;
      e->args.push_back(*std::move(a));
      node = std::move(e);
    } else {
      node = Primary();
    }
    if (!node.ok()) return node;
    node = Postfix(*std::move(node));
    if (!node.ok() || !with_filter) return node;
    return FilterChain(*std::move(node));
  }

  absl::StatusOr<ExprPtr> Primary() {
    const Token& t = Cur();
    const int line = t.line;
    switch (t.kind) {
      case K::kName: {
        ++i_;
        ExprPtr e = Make(Expr::Kind::kLiteral, line);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        return e;
      }
      case K::kString: {
        std::string s;
        while (Cur().kind == K::kString) s += t_[i_++].text;  // adjacent literals concatenate
        ExprPtr e = Make(Expr::Kind::kLiteral, line);
        e->literal = Value(std::move(s));
        return e;
      }
      case K::kInt:
      case K::kFloat: {
        ++i_;
        ExprPtr e = Make(Expr::Kind::kLiteral, line);
        errno = 0;
        if (t.kind == K::kInt) {
          const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
          if (errno == ERANGE) return Error(absl::StrCat("integer literal out of range: ", t.text));
          e->literal = Value(static_cast<int64_t>(v));
        } else {
          e->literal = Value(std::strtod(t.text.c_str(), nullptr));
        }
        return e;
      }
      case K::kOp:
        if (t.text == "(") return Parenthesized();
        if (t.text == "[") return ListLiteral();
        if (t.text == "{") return DictLiteral();
        break;
      default: break;
    }
    return Error(absl::StrCat("unexpected ", Describe(t)));
  }

  absl::StatusOr<ExprPtr> Parenthesized() {
    const int line = Cur().line;
    ++i_;
    if (SkipOp(")")) return Make(Expr::Kind::kTuple, line);
    absl::StatusOr<ExprPtr> first = Expression();
    if (!first.ok()) return first;
    if (SkipOp(")")) return first;
    ExprPtr tuple = Make(Expr::Kind::kTuple, line);
    tuple->args.push_back(*std::move(first));
    while (SkipOp(",")) {
      if (IsOp(")")) break;
      absl::StatusOr<ExprPtr> e = Expression();
      if (!e.ok()) return e;
      tuple->args.push_back(*std::move(e));
    }
    if (absl::Status s = Expect(")"); !s.ok()) return s;
    return tuple;
  }

  absl::StatusOr<ExprPtr> ListLiteral() {
    ExprPtr list = Make(Expr::Kind::kList, Cur().line);
    ++i_;
    while (!SkipOp("]")) {
      if (!list->args.empty()) {
        if (absl::Status s = Expect(","); !s.ok()) return s;
        if (SkipOp("]")) break;
      }
      absl::StatusOr<ExprPtr> e = Expression();
      if (!e.ok()) return e;
      list->args.push_back(*std::move(e));
    }
    return list;
  }

  absl::StatusOr<ExprPtr> DictLiteral() {
    ExprPtr dict = Make(Expr::Kind::kDict, Cur().line);
    ++i_;
    while (!SkipOp("}")) {
      if (!dict->args.empty()) {
        if (absl::Status s = Expect(","); !s.ok()) return s;
        if (SkipOp("}")) break;
      }
      absl::StatusOr<ExprPtr> k = Expression();
      if (!k.ok()) return k;
      if (absl::Status s = Expect(":"); !s.ok()) return s;
      absl::StatusOr<ExprPtr> v = Expression();
      if (!v.ok()) return v;
      dict->args.push_back(*std::move(k));
      dict->args.push_back(*std::move(v));
    }
    return dict;
  }

  absl::StatusOr<ExprPtr> Postfix(ExprPtr node) {
    while (true) {
      const int line = Cur().line;
      if (SkipOp(".")) {
        if (Cur().kind == K::kInt) {  // foo.0 is foo[0]
          ExprPtr e = Make(Expr::Kind::kGetItem, line);
          e->args.push_back(std::move(node));
          ExprPtr index = Make(Expr::Kind::kLiteral, line);
          index->literal = Value(static_cast<int64_t>(std::strtoll(t_[i_++].text.c_str(), nullptr, 10)));
          e->args.push_back(std::move(index));
          node = std::move(e);
          continue;
        }
        absl::StatusOr<std::string> n = ExpectName();
        if (!n.ok()) return n.status();
        ExprPtr e = Make(Expr::Kind::kGetAttr, line);
        e->name = *n;
        e->args.push_back(std::move(node));
        node = std::move(e);
      } else if (SkipOp("[")) {
        absl::StatusOr<ExprPtr> e = Subscript(std::move(node), line);
        if (!e.ok()) return e;
        node = *std::move(e);
      } else if (IsOp("(")) {
        absl::StatusOr<ExprPtr> e = CallArgs(Expr::Kind::kCall, std::move(node), line);
        if (!e.ok()) return e;
        node = *std::move(e);
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> Subscript(ExprPtr object, int line) {
    std::vector<ExprPtr> parts;
    bool slice = false;
    ExprPtr part;
    while (true) {
      if (IsOp(":")) {
        ++i_;
        slice = true;
        parts.push_back(std::move(part));
        part = nullptr;
        continue;
      }
      if (SkipOp("]")) break;
      if (part) return Error(absl::StrCat("expected ']', found ", Describe(Cur())));
      absl::StatusOr<ExprPtr> e = Expression();
      if (!e.ok()) return e;
      part = *std::move(e);
    }
    parts.push_back(std::move(part));
    if (!slice) {
      if (!parts[0]) return Error("empty subscript");
      ExprPtr e = Make(Expr::Kind::kGetItem, line);
      e->args.push_back(std::move(object));
      e->args.push_back(std::move(parts[0]));
      return e;
    }
    if (parts.size() > 3) return Error("a slice has at most three parts");
    parts.resize(3);
    ExprPtr e = Make(Expr::Kind::kSlice, line);
    e->args.push_back(std::move(object));
    for (ExprPtr& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  // ( args, name=value ) after a callee, filter or test already in node->args[0].
  absl::StatusOr<ExprPtr> CallArgs(Expr::Kind kind, ExprPtr callee, int line, std::string name = "") {
    ExprPtr e = Make(kind, line);
    e->name = std::move(name);
    e->args.push_back(std::move(callee));
    if (!SkipOp("(")) return e;
    bool first = true;
    while (!SkipOp(")")) {
      if (!first) {
        if (absl::Status s = Expect(","); !s.ok()) return s;
        if (SkipOp(")")) break;
      }
      first = false;
      if (Cur().kind == K::kName && Peek().kind == K::kOp && Peek().text == "=") {
        const std::string key = Cur().text;
        i_ += 2;
        absl::StatusOr<ExprPtr> v = Expression();
        if (!v.ok()) return v;
        e->kwargs.emplace_back(key, *std::move(v));
        continue;
      }
      if (!e->kwargs.empty()) return Error("positional argument after a keyword argument");
      absl::StatusOr<ExprPtr> v = Expression();
      if (!v.ok()) return v;
      e->args.push_back(*std::move(v));
    }
    return e;
  }

  // node | filter(args) | ... and node is [not] test args.
  absl::StatusOr<ExprPtr> FilterChain(ExprPtr node) {
    while (true) {
      const int line = Cur().line;
      if (SkipOp("|")) {
        absl::StatusOr<std::string> name = ExpectName();
        if (!name.ok()) return name.status();
        std::string full = *name;
        while (IsOp(".") && Peek().kind == K::kName) {  // dotted filter names
          full += "." + Peek().text;
          i_ += 2;
        }
        absl::StatusOr<ExprPtr> e = CallArgs(Expr::Kind::kFilter, std::move(node), line, full);
        if (!e.ok()) return e;
        node = *std::move(e);
      } else if (node && IsName("is")) {
        ++i_;
        const bool negated = SkipName("not");
        absl::StatusOr<std::string> name = ExpectName();
        if (!name.ok()) return name.status();
        absl::StatusOr<ExprPtr> e;
        if (IsOp("(")) {
          e = CallArgs(Expr::Kind::kTest, std::move(node), line, *name);
        } else {
          e = CallArgs(Expr::Kind::kTest, std::move(node), line, *name);
          const Token& c = Cur();
          const bool arg = (c.kind == K::kName && c.text != "else" && c.text != "or" && c.text != "and" &&
                            c.text != "if" && c.text != "in" && c.text != "not" && c.text != "is") ||
                           c.kind == K::kString || c.kind == K::kInt || c.kind == K::kFloat ||
                           (c.kind == K::kOp && (c.text == "[" || c.text == "{" || c.text == "-"));
          if (e.ok() && arg) {
            absl::StatusOr<ExprPtr> a = c.kind == K::kOp && c.text == "-" ? Unary(false) : Primary();
            if (a.ok()) a = Postfix(*std::move(a));
            if (!a.ok()) return a;
            (*e)->args.push_back(*std::move(a));
          }
        }
        if (!e.ok()) return e;
        (*e)->negated = negated;
        node = *std::move(e);
      } else if (node && IsOp("(") && node->kind == Expr::Kind::kFilter) {
        absl::StatusOr<ExprPtr> e = CallArgs(Expr::Kind::kCall, std::move(node), line);
        if (!e.ok()) return e;
        node = *std::move(e);
      } else {
        return node;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

absl::StatusOr<Body> Parse(const std::string& source) {
  absl::StatusOr<std::vector<Token>> tokens = Lex(source);
  if (!tokens.ok()) return tokens.status();
  return Parser(*std::move(tokens)).Template();
}

}  // namespace doppler::jinja
