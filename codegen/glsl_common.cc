#include "codegen/glsl_common.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "codegen/device_layout.h"

namespace doppler::codegen {
namespace {

// `float load_<name>(uint i)` for a row-major [rows, K] matrix stored in one of llama.cpp's block
// formats, as it lies on the device (codegen/device_layout.h): Q4_K, Q5_K and Q8_0 rows hold
// whole blocks (Q8_0's padded), so element i is value i % E of block i / E (E values a block); the
// other formats' rows are split by field, so element i is value e = i % K of row i / K, its quants in
// the row's block e / E, its scales (Q5_0, Q5_1: its fifth bit) and d further on in the row. Bytes are
// read out of 32-bit words with shifts (little-endian), f16 fields with unpackHalf2x16 (every f16
// field is 2-byte aligned); `<name>_word`, `<name>_byte` and `<name>_half` serve other decoders of
// the same buffer too. The arithmetic is quant/dequantize.cc's, in the same float32 order,
// and `precise` keeps the compiler from fusing it into a multiply-add, so the values are
// bit-identical to the CPU's.
std::string BlockDecoder(const std::string& name, graph::DType dtype, int64_t k) {
  std::string body;
  switch (dtype) {
    case graph::DType::kQ8_0:  // f16 d, (padding,) int8 q[32]: d * q
      body = R"(
  uint base = (i >> 5) * {{Q8_0_BLOCK}}u;
  int q = bitfieldExtract(int({{N}}_byte(base + {{Q8_0_QS}}u + (i & 31u))), 0, 8);
  precise float y = {{N}}_half(base) * float(q);
  return y;
)";
      break;
    case graph::DType::kQ4_K:  // f16 d, f16 dmin, scales[12], qs[128]
    case graph::DType::kQ5_K:  // f16 d, f16 dmin, scales[12], qh[32], qs[128]
      body = absl::StrCat(R"(
  uint base = (i >> 8) * )", dtype == graph::DType::kQ4_K ? "144u" : "176u", R"(;
  uint v = i & 255u, j = v >> 5, c = v >> 6, l = v & 31u;
  uint sc, m;
  if (j < 4u) {
    sc = {{N}}_byte(base + 4u + j) & 63u;
    m = {{N}}_byte(base + 8u + j) & 63u;
  } else {
    uint b = {{N}}_byte(base + 8u + j);
    sc = (b & 15u) | (({{N}}_byte(base + j) >> 6) << 4);
    m = (b >> 4) | (({{N}}_byte(base + 4u + j) >> 6) << 4);
  }
)",
                          dtype == graph::DType::kQ4_K ? R"(
  uint qb = {{N}}_byte(base + 16u + 32u * c + l);
  uint q = (j & 1u) == 0u ? (qb & 15u) : (qb >> 4);
)"
                                                       : R"(
  uint qb = {{N}}_byte(base + 48u + 32u * c + l);
  uint q = ((j & 1u) == 0u ? (qb & 15u) : (qb >> 4)) | ((({{N}}_byte(base + 16u + l) >> j) & 1u) << 4);
)",
                          R"(
  precise float dl = {{N}}_half(base) * float(sc);
  precise float ml = {{N}}_half(base + 2u) * float(m);
  precise float y = dl * float(q) - ml;
  return y;
)");
      break;
    case graph::DType::kQ6_K:  // ql[128], qh[64] (a row's quants first), int8 scales[16], f16 d
      body = R"(
  uint row = i / {{K}}u, e = i - row * {{K}}u, base = row * {{ROW_BYTES}}u;
  uint b = e >> 8, v = e & 255u, n = v >> 7, k = (v >> 5) & 3u, l = v & 31u, qs = base + b * 192u;
  uint lo = {{N}}_byte(qs + 64u * n + 32u * (k & 1u) + l);
  uint hi = ({{N}}_byte(qs + 128u + 32u * n + l) >> (2u * k)) & 3u;
  int q = int((k < 2u ? (lo & 15u) : (lo >> 4)) | (hi << 4)) - 32;
  int s = bitfieldExtract(int({{N}}_byte(base + {{SC_AT}}u + b * 16u + (v >> 4))), 0, 8);
  precise float ds = {{N}}_half(base + {{D_AT}}u + b * 2u) * float(s);
  precise float y = ds * float(q);
  return y;
)";
      break;
    case graph::DType::kQ5_0:  // qs[16] (a row's quants first), qh[4], f16 d: d * (q - 16)
      body = R"(
  uint row = i / {{K}}u, e = i - row * {{K}}u, base = row * {{ROW_BYTES}}u;
  uint b = e >> 5, v = e & 31u;
  uint nib = ({{N}}_byte(base + b * 16u + (v & 15u)) >> ((v >> 4) * 4u)) & 15u;
  uint fifth = ({{N}}_word((base + {{SC_AT}}u + b * 4u) >> 2) >> v) & 1u;
  int q = int(nib | (fifth << 4)) - 16;
  precise float y = float(q) * {{N}}_half(base + {{D_AT}}u + b * 2u);
  return y;
)";
      break;
    case graph::DType::kQ4_0:   // qs[16] (a row's quants first), f16 d: d * (q - 8)
    case graph::DType::kIQ4_NL:  // qs[16], f16 d: d * kIQ4NLValues[q]
      body = absl::StrCat(R"(
  uint row = i / {{K}}u, e = i - row * {{K}}u, base = row * {{ROW_BYTES}}u;
  uint b = e >> 5, v = e & 31u;
  uint nib = ({{N}}_byte(base + b * 16u + (v & 15u)) >> ((v >> 4) * 4u)) & 15u;
  float d = {{N}}_half(base + {{D_AT}}u + b * 2u);
)",
                          dtype == graph::DType::kQ4_0 ? "  precise float y = float(int(nib) - 8) * d;\n"
                                                       : "  precise float y = d * float(iq4_value(nib));\n",
                          "  return y;\n");
      break;
    case graph::DType::kQ4_1:  // qs[16], (f16 d, f16 m): q * d + m
    case graph::DType::kQ5_1:  // qs[16], qh[4] (the fifth bits), (f16 d, f16 m): q * d + m
      body = absl::StrCat(R"(
  uint row = i / {{K}}u, e = i - row * {{K}}u, base = row * {{ROW_BYTES}}u;
  uint b = e >> 5, v = e & 31u;
  uint q = ({{N}}_byte(base + b * 16u + (v & 15u)) >> ((v >> 4) * 4u)) & 15u;
)",
                          dtype == graph::DType::kQ5_1 ? "  q |= (({{N}}_word((base + {{SC_AT}}u + b * 4u) >> 2) >> v) & 1u) << 4;\n"
                                                       : "",
                          R"(
  vec2 dm = unpackHalf2x16({{N}}_word((base + {{D_AT}}u + b * 4u) >> 2));
  precise float y = float(q) * dm.x + dm.y;
  return y;
)");
      break;
    case graph::DType::kQ2_K:  // qs[64] (a row's quants first), scales[16], (f16 d, f16 dmin)
      body = R"(
  uint row = i / {{K}}u, e = i - row * {{K}}u, base = row * {{ROW_BYTES}}u;
  uint b = e >> 8, v = e & 255u, n = v >> 7, j = (v >> 5) & 3u, l = v & 31u;
  uint q = ({{N}}_byte(base + b * 64u + 32u * n + l) >> (2u * j)) & 3u;
  uint sc = {{N}}_byte(base + {{SC_AT}}u + b * 16u + 8u * n + 2u * j + (l >> 4));
  vec2 dm = unpackHalf2x16({{N}}_word((base + {{D_AT}}u + b * 4u) >> 2));
  precise float dl = dm.x * float(sc & 15u);
  precise float ml = dm.y * float(sc >> 4);
  precise float y = dl * float(q) - ml;
  return y;
)";
      break;
    case graph::DType::kQ3_K:  // hmask[32], qs[64] (a row's quants first), scales[12], f16 d
      body = R"(
  uint row = i / {{K}}u, e = i - row * {{K}}u, base = row * {{ROW_BYTES}}u;
  uint b = e >> 8, v = e & 255u, n = v >> 7, j = (v >> 5) & 3u, l = v & 31u, qs = base + b * 96u;
  uint sc = base + {{SC_AT}}u + b * 12u, s = 8u * n + 2u * j + (l >> 4);
  uint low = s < 8u ? {{N}}_byte(sc + s) & 15u : {{N}}_byte(sc + s - 8u) >> 4;
  int scale = int(low | ((({{N}}_byte(sc + 8u + (s & 3u)) >> (2u * (s >> 2))) & 3u) << 4)) - 32;
  int q = int(({{N}}_byte(qs + 32u + 32u * n + l) >> (2u * j)) & 3u) - ((({{N}}_byte(qs + l) >> (4u * n + j)) & 1u) != 0u ? 0 : 4);
  precise float ds = {{N}}_half(base + {{D_AT}}u + b * 2u) * float(scale);
  precise float y = ds * float(q);
  return y;
)";
      break;
    case graph::DType::kIQ4_XS:  // qs[128] (a row's quants first), headers (f16 d, u16 scales_h, scales_l[4])
      body = R"(
  uint row = i / {{K}}u, e = i - row * {{K}}u, base = row * {{ROW_BYTES}}u;
  uint b = e >> 8, v = e & 255u, s = v >> 5, l = v & 31u, head = base + {{SC_AT}}u + b * 8u;
  uint word0 = {{N}}_word(head >> 2);
  uint ls = (({{N}}_byte(head + 4u + (s >> 1)) >> (4u * (s & 1u))) & 15u) | (((word0 >> (16u + 2u * s)) & 3u) << 4);
  uint nib = ({{N}}_byte(base + b * 128u + 16u * s + (l & 15u)) >> ((l >> 4) * 4u)) & 15u;
  precise float dl = unpackHalf2x16(word0).x * float(int(ls) - 32);
  precise float y = dl * float(iq4_value(nib));
  return y;
)";
      break;
    case graph::DType::kMXFP4:  // qs[16] (a row's quants first), E8M0 e (in the scales' place)
      body = R"(
  uint row = i / {{K}}u, e = i - row * {{K}}u, base = row * {{ROW_BYTES}}u;
  uint b = e >> 5, v = e & 31u;
  uint nib = ({{N}}_byte(base + b * 16u + (v & 15u)) >> ((v >> 4) * 4u)) & 15u;
  precise float y = float(mxfp4_value(nib)) * e8m0_half({{N}}_byte(base + {{SC_AT}}u + b));
  return y;
)";
      break;
    default:
      return absl::StrCat("#error ", graph::Name(dtype), " is not a block format\n");
  }
  std::vector<std::pair<std::string, std::string>> values = DeviceRowValues(dtype, k);
  values.emplace_back("N", name);
  values.emplace_back("K", absl::StrCat(k));
  const bool iq4 = dtype == graph::DType::kIQ4_NL || dtype == graph::DType::kIQ4_XS;
  const std::string grid = iq4 ? Iq4NlValuesGlsl() : dtype == graph::DType::kMXFP4 ? Mxfp4ValuesGlsl() : "";
  return Fill(absl::StrCat(grid, R"(uint {{N}}_byte(uint b) { return ({{N}}_word(b >> 2) >> ((b & 3u) << 3)) & 255u; }
float {{N}}_half(uint b) { return unpackHalf2x16(({{N}}_word(b >> 2) >> ((b & 2u) << 3)) & 65535u).x; }
float load_{{N}}(uint i) {)",
                           body, "}\n"),
              values);
}

// A 16-value grid of signed bytes that a format's nibbles index, as `const uvec4 <P>_BYTES`,
// `uint <p>_byte_at(uint)`, `int <p>_value(uint)`, `uint <p>_bytes(uint)` and `uvec2
// <p>_word(uint)`, and `extra`, declared once.
std::string NibbleGridGlsl(const std::string& upper, const std::string& lower, const int8_t (&grid)[16],
                           const std::string& extra) {
  uint32_t words[4] = {};
  for (int i = 0; i < 16; ++i) words[i / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(grid[i])) << (8 * (i % 4));
  // Guarded: a shader may declare more than one weight of the format.
  return Fill(absl::StrCat("#ifndef {{P}}_DECLARED\n#define {{P}}_DECLARED\nconst uvec4 {{P}}_BYTES = uvec4(", words[0],
                           "u, ", words[1], "u, ", words[2], "u, ", words[3], R"(u);
// Grid value n (0..15) as an unsigned byte. Its word is chosen by selects: a constant indexed
// by a value the compiler cannot know may be copied to each invocation's local memory.
uint {{p}}_byte_at(uint n) {
  uint w = (n & 8u) != 0u ? ((n & 4u) != 0u ? {{P}}_BYTES.w : {{P}}_BYTES.z) : ((n & 4u) != 0u ? {{P}}_BYTES.y : {{P}}_BYTES.x);
  return (w >> ((n & 3u) << 3)) & 255u;
}
// Grid value n.
int {{p}}_value(uint n) { return bitfieldExtract(int({{p}}_byte_at(n)), 0, 8); }
// Four nibbles, one a byte, as their grid values, one a signed byte.
uint {{p}}_bytes(uint nibbles) {
  uint r = 0u;
  [[unroll]] for (uint i = 0u; i < 4u; ++i) r |= {{p}}_byte_at((nibbles >> (8u * i)) & 15u) << (8u * i);
  return r;
}
// A word of a block's nibbles (byte j: a low and a high nibble) as the grid values of its low
// nibbles (x) and of its high nibbles (y), four signed bytes each.
uvec2 {{p}}_word(uint q) { return uvec2({{p}}_bytes(q & 0x0F0F0F0Fu), {{p}}_bytes((q >> 4) & 0x0F0F0F0Fu)); }
)",
                           "{{EXTRA}}#endif\n"),
              {{"P", upper}, {"p", lower}, {"EXTRA", extra}});
}

}  // namespace

std::string Iq4NlValuesGlsl() { return NibbleGridGlsl("IQ4NL", "iq4", graph::kIQ4NLValues, ""); }

std::string Mxfp4ValuesGlsl() {
  // ggml's E8M0-to-float scale halved (the grid's values are doubled): 2^(e - 128), written as
  // float bits, subnormal for e < 2.
  return NibbleGridGlsl("MXFP4", "mxfp4", graph::kMXFP4Values,
                        R"(float e8m0_half(uint e) { return uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23); }
// The grid's values of the nibbles at bits `shift` and 16 + `shift` of q, times 2^-15: an E2M1
// nibble (sign, 2-bit exponent, 1-bit mantissa) is the f16 of its sign, exponent and mantissa bits
// at the top of f16's, 2^-15 times the doubled value (exponent 0 is an f16 subnormal, as E2M1's).
vec2 mxfp4_pair(uint q, uint shift) {
  uint n = q >> shift;
  return unpackHalf2x16(((n << 9) & 0x0E000E00u) | ((n << 12) & 0x80008000u));
}
)");
}

std::string ShaderHeader(uint32_t workgroup_size) {
  return absl::StrCat(R"(#version 460
#extension GL_EXT_control_flow_attributes : enable
layout(local_size_x = )", workgroup_size, R"() in;
layout(std430, set = 0, binding = 0) readonly buffer StepParams { uint n_tokens; uint pos; } step;
)");
}

std::string FloatBuffer(uint32_t binding, const std::string& name, graph::DType dtype, bool readonly, bool coherent) {
  const std::string ro = absl::StrCat(coherent ? "coherent " : "", readonly ? "readonly " : "");
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
      return absl::StrCat("#error no float buffer of ", graph::Name(dtype), " (block formats: WeightRowsBuffer)\n");
  }
}

std::string OutputBuffer(uint32_t binding, const std::string& name, bool half, const std::string& index) {
  const std::string layout = absl::StrCat("layout(std430, set = 0, binding = ", binding, ") writeonly buffer Buf_", name);
  const std::string at = index.empty() ? "i" : absl::StrCat(index, "(i)");
  if (!half) {
    return absl::StrCat(layout, " { float ", name, "[]; };\nvoid store_", name, "(uint i, float v) { ", name, "[", at,
                        "] = v; }\n");
  }
  return absl::StrCat("#extension GL_EXT_shader_16bit_storage : require\n", layout, " { float16_t ", name, "[]; };\nvoid store_",
                      name, "(uint i, float v) { ", name, "[", at, "] = float16_t(v); }\n");
}

std::string WeightRowsBuffer(uint32_t binding, const std::string& name, graph::DType dtype, int64_t k) {
  if (!graph::IsBlockFormat(dtype)) return FloatBuffer(binding, name, dtype, true);
  // Words, and for split rows a second view as 16-byte vectors: a word read through the vectors
  // would load its whole vector (glslang extracts a dynamic component after the load), and a
  // kernel keeping loads in flight would hold four registers for it.
  const std::string layout = absl::StrCat("layout(std430, set = 0, binding = ", binding, ") readonly buffer Buf_");
  return absl::StrCat(layout, name, " { uint ", name, "[]; };\nuint ", name, "_word(uint i) { return ", name, "[i]; }\n",
                      DeviceRowOf(dtype, k).split ? absl::StrCat(layout, name, "4 { uvec4 ", name, "4[]; };\n") : "",
                      BlockDecoder(name, dtype, k));
}

namespace {

// How a float buffer's quads are stored: the GLSL type of a quad, the expression making such a
// quad `q` four floats, and the one making element i of the buffer `{{N}}` a float.
struct QuadForm {
  const char* type;
  const char* floats;
  const char* element;
};
std::optional<QuadForm> QuadFormOf(graph::DType dtype) {
  switch (dtype) {
    case graph::DType::kF32:
      return QuadForm{"vec4", "q", "{{N}}4[i >> 2][i & 3u]"};
    case graph::DType::kF16:
      return QuadForm{"uvec2", "vec4(unpackHalf2x16(q.x), unpackHalf2x16(q.y))",
                      "unpackHalf2x16({{N}}4[i >> 2][(i >> 1) & 1u])[i & 1u]"};
    case graph::DType::kBF16:
      return QuadForm{"uvec2", "uintBitsToFloat(uvec4(q.x << 16, q.x & 0xFFFF0000u, q.y << 16, q.y & 0xFFFF0000u))",
                      "uintBitsToFloat((({{N}}4[i >> 2][(i >> 1) & 1u] >> ((i & 1u) * 16u)) & 0xFFFFu) << 16)"};
    default:
      return std::nullopt;
  }
}

}  // namespace

std::string FloatQuadBuffer(uint32_t binding, const std::string& name, graph::DType dtype, bool readonly) {
  const std::optional<QuadForm> f = QuadFormOf(dtype);
  if (!f) return absl::StrCat("#error no 4-element view of ", graph::Name(dtype), "\n");
  const bool f32 = dtype == graph::DType::kF32;  // its quads are their floats as stored
  return Fill(absl::StrCat("layout(std430, set = 0, binding = ", binding, ") ", readonly ? "readonly " : "",
                           "buffer Buf_{{N}} { {{T}} {{N}}4[]; };\nfloat load_{{N}}(uint i) { return ", f->element, "; }\n",
                           f32 ? "vec4 load4_{{N}}(uint i) { return {{N}}4[i >> 2]; }\n"
                               : absl::StrCat("vec4 load4_{{N}}(uint i) { {{T}} q = {{N}}4[i >> 2]; return ", f->floats, "; }\n")),
              {{"N", name}, {"T", f->type}});
}

std::string FloatQuadRaw(const std::string& name, graph::DType dtype) {
  const std::optional<QuadForm> f = QuadFormOf(dtype);
  if (!f) return absl::StrCat("#error no 4-element view of ", graph::Name(dtype), "\n");
  return Fill(absl::StrCat("#define RAW4_{{N}} {{T}}\n{{T}} raw4_{{N}}(uint i) { return {{N}}4[i >> 2]; }\n",
                           "vec4 unraw4_{{N}}({{T}} q) { return ", f->floats, "; }\n"),
              {{"N", name}, {"T", f->type}});
}

std::string IntBuffer(uint32_t binding, const std::string& name, bool readonly) {
  return absl::StrCat("layout(std430, set = 0, binding = ", binding, ") ", readonly ? "readonly " : "", "buffer Buf_",
                      name, " { int ", name, "[]; };\n");
}

std::string WorkgroupReductions(uint32_t workgroup_size, bool subgroup_arithmetic) {
  const char* reduce = subgroup_arithmetic ? R"(
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
shared float wg_scratch[{{WG}}];  // one slot per subgroup used; enough for any subgroup size
float wg_reduce(float v, bool take_max) {
  v = take_max ? subgroupMax(v) : subgroupAdd(v);
  barrier();  // the previous reduction has read wg_scratch
  if (subgroupElect()) wg_scratch[gl_SubgroupID] = v;
  barrier();
  float r = wg_scratch[0];
  for (uint i = 1u; i < gl_NumSubgroups; ++i) r = take_max ? max(r, wg_scratch[i]) : r + wg_scratch[i];
  return r;
}
)"
                                           : R"(
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
)";
  return Fill(absl::StrCat(reduce, R"(float wg_sum(float v) { return wg_reduce(v, false); }
float wg_max(float v) { return wg_reduce(v, true); }
)"),
              {{"WG", absl::StrCat(workgroup_size)}});
}

std::string FirstMaxReductionGlsl(bool subgroup_arithmetic) {
  const char* common = R"(
shared float s_val[WG];
shared uint s_idx[WG];
bool earlier_max(float v, uint i, float best, uint best_i) {
  return i != NONE && (best_i == NONE || v > best || (v == best && i < best_i));
}
)";
  const char* reduce = subgroup_arithmetic ? R"(
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
// The subgroup's first maximum, in every invocation (invocations without a value hold NONE).
void subgroup_first_max(inout float best, inout uint best_i) {
  float m = subgroupMax(best_i == NONE ? uintBitsToFloat(0xFF800000u) : best);
  best_i = subgroupMin(best_i != NONE && best == m ? best_i : NONE);
  best = m;
}
uint first_max(inout float best, uint best_i) {
  subgroup_first_max(best, best_i);
  if (gl_NumSubgroups == 1u) return best_i;  // uniform
  if (subgroupElect()) { s_val[gl_SubgroupID] = best; s_idx[gl_SubgroupID] = best_i; }
  barrier();
  if (gl_SubgroupID == 0u) {
    best_i = NONE;
    for (uint s = gl_SubgroupInvocationID; s < gl_NumSubgroups; s += gl_SubgroupSize) {
      if (earlier_max(s_val[s], s_idx[s], best, best_i)) { best = s_val[s]; best_i = s_idx[s]; }
    }
    subgroup_first_max(best, best_i);
  }
  return best_i;
}
)"
                                             : R"(
uint first_max(inout float best, uint best_i) {
  uint lid = gl_LocalInvocationID.x;
  s_val[lid] = best;
  s_idx[lid] = best_i;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (lid < s && earlier_max(s_val[lid + s], s_idx[lid + s], s_val[lid], s_idx[lid])) {
      s_val[lid] = s_val[lid + s];
      s_idx[lid] = s_idx[lid + s];
    }
    barrier();
  }
  best = s_val[0];
  return s_idx[0];
}
)";
  return absl::StrCat(common, reduce);
}

std::string Fill(const std::string& tmpl, const std::vector<std::pair<std::string, std::string>>& values) {
  std::vector<std::pair<std::string, std::string>> keyed;
  keyed.reserve(values.size());
  for (const auto& [k, v] : values) keyed.emplace_back(absl::StrCat("{{", k, "}}"), v);
  return absl::StrReplaceAll(tmpl, keyed);
}

std::string LastArrivalGlsl(const std::string& counter, const std::string& arrivals) {
  return Fill(R"(
shared bool arrival_last;
bool last_arrival() {
  memoryBarrierBuffer();  // this workgroup's writes before its arrival
  barrier();
  if (gl_LocalInvocationIndex == 0u) arrival_last = atomicAdd({{COUNTER}}, 1u) == {{ARRIVALS}} - 1u;
  barrier();
  if (arrival_last) memoryBarrierBuffer();
  return arrival_last;
}
)",
              {{"COUNTER", counter}, {"ARRIVALS", arrivals}});
}

std::string RowsExpr(bool rows_are_tokens, int64_t static_rows) {
  return rows_are_tokens ? std::string("step.n_tokens") : absl::StrCat(static_rows, "u");
}

}  // namespace doppler::codegen

namespace doppler::codegen {
std::string FloatLiteral(double v) { return absl::StrFormat("%.9e", static_cast<float>(v)); }

std::string ActivationGlsl() {
  // gelu_tanh: tanh's argument is clamped where tanh is ±1 in float32 anyway: some drivers compute
  // tanh as a ratio of exponentials that overflows to NaN.
  return R"(
float act_silu(float v) { return v / (1.0 + exp(-v)); }
float act_gelu_tanh(float v) {
  return 0.5 * v * (1.0 + tanh(clamp(0.7978845608 * (v + 0.044715 * v * v * v), -15.0, 15.0)));
}
)";
}

std::string ClampedSwigluGlsl(double alpha, double limit) {
  return Fill(R"(
float act_clamped_swiglu(float gate, float up) {
  float g = min(gate, {{LIMIT}});
  float u = clamp(up, -{{LIMIT}}, {{LIMIT}});
  return (u + 1.0) * (g / (1.0 + exp(-(g * {{ALPHA}}))));
}
)",
              {{"ALPHA", FloatLiteral(alpha)}, {"LIMIT", FloatLiteral(limit)}});
}
}  // namespace doppler::codegen

namespace doppler::codegen {
std::string RopeFunction(const std::string& fn, const std::string& load, const std::string& table, int64_t width,
                         int64_t head_dim, bool neox) {
  return Fill(R"(
float {{FN}}(uint t, uint e) {
  const uint HD = {{HD}}u, HALF = HD / 2u;
  uint d = e % HD;
  bool first = {{FIRST}};
  uint j = {{J}};
  uint partner = {{PARTNER}};
  uint tab = (row_position(t) * HALF + j) * 2u;
  float cs = {{TABLE}}[tab], sn = {{TABLE}}[tab + 1u];
  float self = {{LOAD}}(t * {{W}}u + e), other = {{LOAD}}(t * {{W}}u + partner);
  return first ? self * cs - other * sn : self * cs + other * sn;
}
)",
              {{"FN", fn},
               {"HD", absl::StrCat(head_dim)},
               {"W", absl::StrCat(width)},
               {"LOAD", load},
               {"TABLE", table},
               {"FIRST", neox ? "d < HALF" : "(d & 1u) == 0u"},
               {"J", neox ? "first ? d : d - HALF" : "d / 2u"},
               {"PARTNER", neox ? "first ? e + HALF : e - HALF" : "first ? e + 1u : e - 1u"}});
}

std::string HeadNormLoad(uint32_t binding, graph::DType dtype, const std::string& src, int64_t head_dim, double offset,
                         const std::string& weight, const std::string& fn) {
  return absl::StrCat(FloatBuffer(binding, weight, dtype, true), "float ", fn, "(uint i) { return ", src, "[i] * (load_",
                      weight, "(i % ", head_dim, "u) + ", FloatLiteral(offset), "); }\n");
}
}  // namespace doppler::codegen
