#include "codegen/glsl_common.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace doppler::codegen {

std::string ShaderHeader(uint32_t workgroup_size) {
  return absl::StrCat(R"(#version 460
#extension GL_EXT_control_flow_attributes : enable
layout(local_size_x = )", workgroup_size, R"() in;
layout(std430, set = 0, binding = 0) readonly buffer StepParams { uint n_tokens; uint pos; } step;
)");
}

std::string FloatBuffer(uint32_t binding, const std::string& name, graph::DType dtype, bool readonly) {
  const std::string ro = readonly ? "readonly " : "";
  const std::string decl = absl::StrCat("layout(std430, set = 0, binding = ", binding, ") ", ro, "buffer Buf_", name,
                                        " { ");
  switch (dtype) {
    case graph::DType::kF32:
      return absl::StrCat(decl, "float ", name, "[]; };\nfloat load_", name, "(uint i) { return ", name,
                          "[i]; }\n");
    case graph::DType::kF16:
      return absl::StrCat(decl, "uint ", name, "[]; };\nfloat load_", name, "(uint i) { return unpackHalf2x16(",
                          name, "[i >> 1])[i & 1u]; }\n");
    case graph::DType::kBF16:
      return absl::StrCat(decl, "uint ", name, "[]; };\nfloat load_", name, "(uint i) { return uintBitsToFloat(((",
                          name, "[i >> 1] >> ((i & 1u) * 16u)) & 0xFFFFu) << 16); }\n");
    default:
      return absl::StrCat("#error unsupported element type ", graph::Name(dtype), "\n");
  }
}

std::string IntBuffer(uint32_t binding, const std::string& name, bool readonly) {
  return absl::StrCat("layout(std430, set = 0, binding = ", binding, ") ", readonly ? "readonly " : "", "buffer Buf_",
                      name, " { int ", name, "[]; };\n");
}

std::string WorkgroupReductions(uint32_t workgroup_size) {
  return Fill(R"(
shared float wg_scratch[{{WG}}];
float wg_reduce(float v, bool take_max) {
  barrier();
  wg_scratch[gl_LocalInvocationID.x] = v;
  barrier();
  [[unroll]] for (uint s = {{WG}} / 2; s > 0; s >>= 1) {
    if (gl_LocalInvocationID.x < s) {
      float o = wg_scratch[gl_LocalInvocationID.x + s];
      float m = wg_scratch[gl_LocalInvocationID.x];
      wg_scratch[gl_LocalInvocationID.x] = take_max ? max(m, o) : m + o;
    }
    barrier();
  }
  float r = wg_scratch[0];
  barrier();
  return r;
}
float wg_sum(float v) { return wg_reduce(v, false); }
float wg_max(float v) { return wg_reduce(v, true); }
)",
              {{"WG", absl::StrCat(workgroup_size)}});
}

std::string Fill(const std::string& tmpl, const std::vector<std::pair<std::string, std::string>>& values) {
  std::vector<std::pair<std::string, std::string>> keyed;
  keyed.reserve(values.size());
  for (const auto& [k, v] : values) keyed.emplace_back(absl::StrCat("{{", k, "}}"), v);
  return absl::StrReplaceAll(tmpl, keyed);
}

std::string RowsExpr(bool rows_are_tokens, int64_t static_rows) {
  return rows_are_tokens ? std::string("step.n_tokens") : absl::StrCat(static_rows, "u");
}

}  // namespace doppler::codegen

namespace doppler::codegen {
std::string FloatLiteral(double v) { return absl::StrFormat("%.9e", static_cast<float>(v)); }
}  // namespace doppler::codegen
