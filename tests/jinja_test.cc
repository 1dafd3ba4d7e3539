// The Jinja interpreter on small templates. Every expected text is what Python's jinja2 3.1 (as
// transformers configures it: trim_blocks, lstrip_blocks, loopcontrols, immutable sandbox) gives,
// worked out from the language's definition.
#include <gtest/gtest.h>

#include <string>

#include "absl/status/status.h"
#include "jinja/json_value.h"
#include "jinja/template.h"

namespace doppler {
namespace {

absl::StatusOr<std::string> Render(const std::string& source, const std::string& vars_json = "{}",
                                   const jinja::RenderOptions& options = {}) {
  absl::StatusOr<jinja::Template> t = jinja::Template::Parse(source);
  if (!t.ok()) return t.status();
  absl::StatusOr<jinja::Value> vars = jinja::ValueFromJson(vars_json);
  if (!vars.ok()) return vars.status();
  return t->Render(vars->as_dict(), options);
}

std::string Ok(const std::string& source, const std::string& vars_json = "{}") {
  absl::StatusOr<std::string> r = Render(source, vars_json);
  EXPECT_TRUE(r.ok()) << source << "\n" << r.status();
  return r.ok() ? *r : "<error>";
}

absl::Status Err(const std::string& source, const jinja::RenderOptions& options = {}) {
  absl::StatusOr<std::string> r = Render(source, "{}", options);
  EXPECT_FALSE(r.ok()) << source << " rendered " << *r;
  return r.ok() ? absl::OkStatus() : r.status();
}

TEST(Jinja, WhitespaceControlAsTransformersSetsIt) {
  EXPECT_EQ(Ok("{% if true %}\n  x\n{% endif %}\ny"), "  x\ny");      // trim_blocks
  EXPECT_EQ(Ok("a\n  {% if true %}b{% endif %}"), "a\nb");             // lstrip_blocks
  EXPECT_EQ(Ok("a  {% if true %}b{% endif %}"), "a  b");               // not at a line start
  EXPECT_EQ(Ok("a\n  {%+ if true %}b{% endif %}"), "a\n  b");          // + turns lstrip off
  EXPECT_EQ(Ok("x \n {{- 'y' -}} \n z"), "xyz");                       // - strips all whitespace
  EXPECT_EQ(Ok("{% if true +%}\na{# c +#}\nb{% endif %}"), "\na\nb");  // +%} keeps the newline
  EXPECT_EQ(Ok("{{ 'v' }}\nw"), "v\nw");                               // no trim after {{ }}
  EXPECT_EQ(Ok("a {#- note -#} b{# c #}\nd"), "abd");                  // comments
  EXPECT_EQ(Ok("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
  EXPECT_EQ(Ok("{{ 'a' }}\n"), "a");                                   // one final newline goes
  EXPECT_EQ(Ok("x\r\ny\r{{ 'z' }}\n\n"), "x\ny\nz\n");             // newlines become \n
}

TEST(Jinja, ValuesPrintAsPythonsStr) {
  EXPECT_EQ(Ok("{{ none }}|{{ true }}|{{ 1.0 }}|{{ 3/2 }}|{{ 7//2 }}|{{ -7//2 }}|{{ -7 % 3 }}|{{ 2**10 }}"),
            "None|True|1.0|1.5|3|-4|2|1024");
  EXPECT_EQ(Ok("{{ [1, 'a', none, ('t',)] }}|{{ {'k': \"it's\"} }}"), "[1, 'a', None, ('t',)]|{'k': \"it's\"}");
  EXPECT_EQ(Ok("{{ 0.1 + 0.2 }}|{{ 1e20 }}|{{ 1.5e-5 }}|{{ 100000.0 }}|{{ 0.0001 }}"),
            "0.30000000000000004|1e+20|1.5e-05|100000.0|0.0001");
  EXPECT_EQ(Ok("{{ 'a' ~ 1 ~ none }}|{{ 'ab' * 3 }}|{{ [1] + [2] }}|{{ 1 + true }}"), "a1None|ababab|[1, 2]|2");
}

TEST(Jinja, StringsAndSlicesInCodePoints) {
  EXPECT_EQ(Ok("{{ 'héllo'[1:3] }}|{{ 'héllo'|length }}|{{ [1,2,3,4][::-1] }}|{{ 'abc'[-1] }}|{{ [1,2,3][1:] }}"),
            "él|5|[4, 3, 2, 1]|c|[2, 3]");
  EXPECT_EQ(Ok("{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}"),
            "a b|a|['a', 'b', '', 'c']|['a', 'b']");
  EXPECT_EQ(Ok("{{ 'a</t>b</t>c'.rsplit('</t>', 1) }}|{{ 'a,b,c'.rsplit(',') }}|{{ ',a'.rsplit(',') }}|{{ 'abc'.rsplit('x') }}"),
            "['a</t>b', 'c']|['a', 'b', 'c']|['', 'a']|['abc']");
  EXPECT_EQ(Ok("{{ 'Hello World'.lower() }}|{{ 'hello wORLD'.title() }}|{{ 'abc'.startswith(('x', 'a')) }}|"
               "{{ 'abc'.endswith('bc') }}|{{ 'a-b-c'.replace('-', '+', 1) }}|{{ 'abcb'.find('b') }}"),
            "hello world|Hello World|True|True|a+b-c|1");
  EXPECT_EQ(Ok("{{ 1 < 2 < 3 }}{{ 3 < 2 < 4 }}{{ 'x' in ['x'] }}{{ 'b' not in 'abc' }}{{ 'k' in {'k': 1} }}"),
            "TrueFalseTrueFalseTrue");
}

TEST(Jinja, ToJsonIsJsonDumpsWithoutAsciiEscapes) {
  EXPECT_EQ(Ok("{{ {'b': 1, 'a': [1.5, 'é', none, true]}|tojson }}"), "{\"b\": 1, \"a\": [1.5, \"é\", null, true]}");
  EXPECT_EQ(Ok("{{ {'b': 1, 'a': [2]}|tojson(indent=2, sort_keys=true) }}"),
            "{\n  \"a\": [\n    2\n  ],\n  \"b\": 1\n}");
  EXPECT_EQ(Ok("{{ [1, {'a': 2}, []]|tojson(separators=(',', ':')) }}"), "[1,{\"a\":2},[]]");
  EXPECT_EQ(Ok("{{ 'a\"b\\n<&>'|tojson }}"), "\"a\\\"b\\n<&>\"");
  EXPECT_EQ(Ok("{{ 'é😀'|tojson(ensure_ascii=true) }}"), "\"\\u00e9\\ud83d\\ude00\"");
  EXPECT_EQ(Ok("{{ x|tojson }}", "{\"x\": {\"z\": 1, \"y\": {}}}"), "{\"z\": 1, \"y\": {}}");  // key order kept
}

TEST(Jinja, LoopsWithFiltersElseAndLoopControls) {
  EXPECT_EQ(Ok("{% for x in [3,4,5] if x != 4 %}{{ loop.index }}{{ x }}{{ '.' if not loop.last }}{% else %}none{% endfor %}"),
            "13.25");
  EXPECT_EQ(Ok("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Ok("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}"
               "{{ x }}{% endfor %}"),
            "0134");
  EXPECT_EQ(Ok("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for k in {'c': 3} %}{{ k }}{% endfor %}"),
            "a=1;b=2;c");
  EXPECT_EQ(Ok("{% for x in 'abc' %}{{ loop.cycle('odd', 'even') }} {% endfor %}"), "odd even odd ");
  EXPECT_EQ(Ok("{% for x in 'ab' %}{{ loop.revindex0 }}{{ loop.length }}{{ loop.previtem is defined }}{% endfor %}"),
            "12False02True");
  EXPECT_EQ(Ok("{% for n in tree recursive %}{{ n.name }}{% if n.children %}({{ loop(n.children) }}){% endif %}{% endfor %}",
               "{\"tree\": [{\"name\": \"a\", \"children\": [{\"name\": \"b\"}, {\"name\": \"c\"}]}, {\"name\": \"d\"}]}"),
            "a(bc)d");
}

TEST(Jinja, ScopesNamespacesMacrosAndCalls) {
  EXPECT_EQ(Ok("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{% endfor %}{{ x }}"), "1");
  // A name set in a loop body is the iteration's own: the next iteration reads the outer one again.
  EXPECT_EQ(Ok("{% set a = -1 %}{% for x in range(3) %}[{{ a }}:{% set a = x %}{{ a }}]{% endfor %}{{ a }}"),
            "[-1:0][-1:1][-1:2]-1");
  EXPECT_EQ(Ok("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "6");
  EXPECT_EQ(Ok("{% if true %}{% set y = 'set in if' %}{% endif %}{{ y }}"), "set in if");
  EXPECT_EQ(Ok("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} "
               "{{ greet('Bob', punct='?') }}"),
            "Hi Ann! Hi Bob?");
  EXPECT_EQ(Ok("{% macro box(t) %}[{{ caller() }}{{ t }}]{% endmacro %}{% call box('x') %}in{% endcall %}"), "[inx]");
  EXPECT_EQ(Ok("{% set b %}Hi {{ 1 }}{% endset %}{{ b|upper }}|{% filter upper %}ab{% endfilter %}"), "HI 1|AB");
  EXPECT_EQ(Ok("{% with a = 2 %}{{ a * 3 }}{% endwith %}{{ a is defined }}"), "6False");
  EXPECT_EQ(Ok("{% generation %}kept{% endgeneration %}"), "kept");
}

TEST(Jinja, UndefinedBehavesAsJinja2sDefault) {
  EXPECT_EQ(Ok("{{ missing }}|{{ missing is defined }}|{{ missing|default('d') }}|{{ missing or 'x' }}|"
               "{{ missing|length }}|{% for x in missing %}no{% endfor %}|{{ 'a' if false }}|{{ d.no is defined }}|{{ l[5] is undefined }}",
               "{\"d\": {}, \"l\": [1]}"),
            "|False|d|x|0|||False|True");
  EXPECT_EQ(Ok("{{ ''|default('e', true) }}{{ d.get('k', 'g') }}{{ d.get('k') }}", "{\"d\": {}}"), "egNone");
  absl::Status s = Err("{{ missing.attr }}");
  EXPECT_NE(s.message().find("'missing' is undefined"), std::string::npos) << s;
  s = Err("{{ d.a.b }}");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

TEST(Jinja, FiltersAndTests) {
  EXPECT_EQ(Ok("{{ [3, 1, 2]|sort|join(',') }}|{{ [3, 1, 2]|sort(reverse=true)|first }}|{{ [1, 2, 2, 3]|unique|list }}|"
               "{{ 'ab'|reverse }}|{{ [1, 2]|reverse|list }}"),
            "1,2,3|3|[1, 2, 3]|ba|[2, 1]");
  EXPECT_EQ(Ok("{{ xs|selectattr('x', 'defined')|map(attribute='n')|list }}|{{ xs|rejectattr('x')|map(attribute='n')|join }}|"
               "{{ xs|map(attribute='x', default=0)|list }}|{{ [1, 0, 2]|select|list }}|{{ ['a', 'B']|map('upper')|list }}",
               "{\"xs\": [{\"n\": \"a\", \"x\": 1}, {\"n\": \"b\"}]}"),
            "['a']|b|[1, 0]|[1, 2]|['A', 'B']");
  EXPECT_EQ(Ok("{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.345|round(2) }}|{{ 2.1|round(method='ceil') }}|{{ '42'|int + 1 }}|"
               "{{ 'x'|int }}|{{ 3|float }}|{{ -2|abs }}|{{ [1, 2.5]|sum }}|{{ [3, 1]|min }}{{ [3, 1]|max }}"),
            "2.0|4.0|2.35|3.0|43|0|3.0|2|3.5|13");
  EXPECT_EQ(Ok("{{ 'x\\ny\\n\\nz'|indent(2) }}|{{ 'x\\ny'|indent(first=true) }}|{{ {'b': 1, 'a': 2}|dictsort }}|"
               "{{ 'a b'|replace(' ', '_')|upper }}|{{ '  t '|trim }}|{{ 'hello'|capitalize }}|{{ {'a': 1}|items|list }}"),
            "x\n  y\n\n  z|    x\n    y|[('a', 2), ('b', 1)]|A_B|t|Hello|[('a', 1)]");
  EXPECT_EQ(Ok("{{ '%s=%d' % ('n', 4) }}|{{ '%.2f' % 2.5 }}|{{ '%5s|%-3d|%r' % ('ab', 7, 'q') }}|{{ '%s%%'|format(9) }}"),
            "n=4|2.50|   ab|7  |'q'|9%");
  EXPECT_EQ(Ok("{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}{{ [1, 2, 3]|length }}{{ 'abc'|list }}{{ 5|string ~ 'x' }}"),
            "133['a', 'b', 'c']5x");
  EXPECT_EQ(Ok("{{ 1 is number }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is sequence }}{{ none is none }}"
               "{{ 3 is odd }}{{ 4 is divisibleby 2 }}{{ 'a' is in 'abc' }}{{ 2 is gt 1 }}{{ 1 is not integer }}"
               "{{ true is boolean }}{{ 1.5 is float }}{{ 'A' is upper }}{{ 1 is eq 1.0 }}"),
            "TrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrueTrue");
}

TEST(Jinja, GlobalFunctions) {
  jinja::RenderOptions options;
  std::tm t{};
  t.tm_year = 2026 - 1900;
  t.tm_mon = 10;
  t.tm_mday = 26;
  t.tm_hour = 12;
  options.now = t;
  absl::StatusOr<std::string> r = Render("{{ strftime_now('%d %b %Y, %H:%M') }}", "{}", options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "26 Nov 2026, 12:00");
  EXPECT_EQ(Ok("{{ range(3)|list }}{{ range(5, 1, -2)|list }}{{ dict(a=1) }}"), "[0, 1, 2][5, 3]{'a': 1}");
  absl::Status s = Err("line one\n{{ raise_exception('No system role') }}");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("No system role"), std::string::npos) << s;
  EXPECT_NE(s.message().find("line 2"), std::string::npos) << s;
}

TEST(Jinja, ErrorsNameTheTemplateLine) {
  absl::Status s = Err("a\n\n{{ 1 + 'x' }}");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("template line 3: ", 0), 0u) << s;
  EXPECT_NE(s.message().find("unsupported operand type(s) for +: 'int' and 'str'"), std::string::npos) << s;
  s = Err("{% for x in y %}\nabc");
  EXPECT_NE(s.message().find("endfor"), std::string::npos) << s;
  s = Err("ok\n{{ x + }}");
  EXPECT_EQ(s.message().rfind("template line 2: ", 0), 0u) << s;
  s = Err("{% include 'other.j2' %}");
  EXPECT_NE(s.message().find("unsupported tag 'include'"), std::string::npos) << s;
  s = Err("{% set l = [] %}{{ l.append(1) }}");  // the sandbox is immutable
  EXPECT_NE(s.message().find("unsafe"), std::string::npos) << s;
  s = Err("{{ 1 // 0 }}");
  EXPECT_NE(s.message().find("division"), std::string::npos) << s;
}

// A hostile template meets a limit, as a clear error, instead of hanging or exhausting memory.
TEST(Jinja, HostileTemplatesMeetLimits) {
  jinja::RenderOptions small;
  small.max_loop_iterations = 10'000;
  small.max_output_bytes = 1 << 20;
  small.max_bytes_produced = 8 << 20;
  const char* hostile[] = {
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
      "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
      "{% set s = 'x' * 1000 %}{% for i in range(5000) %}{{ s }}{% endfor %}",
      "{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}",
      "{{ 'x' * 100000000 }}",
      "{{ range(100000000)|length }}",
      "{{ [1]|tojson(indent=100000000) }}",
  };
  absl::Status s;
  for (const char* source : hostile) {
    s = Err(source, small);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << source << ": " << s;
  }
  // Recursion through deep expressions: each call nests 60 list expressions in the next.
  const std::string nested = "{% macro f(n) %}{{ " + std::string(60, '[') + "f(n + 1)" + std::string(60, ']') +
                             " }}{% endmacro %}{{ f(0) }}";
  s = Err(nested);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("nested deeper than 1000"), std::string::npos) << s;
  const std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  s = Err(deep);
  EXPECT_NE(s.message().find("nesting deeper"), std::string::npos) << s;
  absl::StatusOr<jinja::Value> json = jinja::ValueFromJson(std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_FALSE(json.ok());
}

}  // namespace
}  // namespace doppler
