// y[T, N] = x[T, K] · w[N, K]ᵀ with f32 accumulation, then the node's epilogue chain, written to
// y's layout (one [rows, N] block, or a block per part of a split value).
//
// A workgroup computes a tile of `tile_tokens` tokens × `tile_rows` output columns; its invocations
// split K, each keeping tile_tokens × tile_rows partial sums (two per column when the chain starts
// with a gated step: gate row n and up row n + N), which a shared-memory tree then reduces. Decode
// (one token) uses a 1 × 4 tile so every weight row is read once per token. The epilogue chain is a
// parameter of the one kernel family: its steps become GLSL statements in the final write.
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "codegen/emitters.h"
#include "codegen/glsl_common.h"
#include "graph/epilogue.h"
#include "graph/layout.h"

namespace doppler::codegen {
namespace {
constexpr uint32_t kWorkgroup = 64;
constexpr int64_t kTileRows = 4;
constexpr int64_t kMaxTileTokens = 8;

// `uint out_index(uint t, uint col)`: where column col of row t lives in y. A split value keeps
// each part as its own [rows_bucket, w_i] block at graph::SplitLayout's offsets.
std::string OutputIndex(const std::vector<int64_t>& widths, int64_t rows_bucket, int64_t n) {
  if (widths.empty()) return absl::StrCat("uint out_index(uint t, uint col) { return t * ", n, "u + col; }\n");
  const std::vector<graph::PartRange> layout = graph::SplitLayout(widths, rows_bucket, graph::DType::kF32);
  std::string body;
  int64_t start = 0;
  for (size_t i = 0; i < widths.size(); ++i) {
    const std::string ret = absl::StrCat("return ", layout[i].offset / sizeof(float), "u + t * ", widths[i],
                                         "u + (col - ", start, "u);");
    start += widths[i];
    absl::StrAppend(&body, i + 1 < widths.size() ? absl::StrCat("  if (col < ", start, "u) ", ret) : "  " + ret, "\n");
  }
  return absl::StrCat("uint out_index(uint t, uint col) {\n", body, "}\n");
}

const char* ActivationFunction(graph::EpilogueStep s) {
  using graph::EpilogueStep;
  return s == EpilogueStep::kSiluMul || s == EpilogueStep::kSilu ? "act_silu" : "act_gelu_tanh";
}

}  // namespace

absl::StatusOr<Kernel> EmitMatMul(const EmitContext& c) {
  using graph::EpilogueStep;
  const graph::Node& x = c.input(0);
  const graph::Node& w = c.input(1);
  const int64_t w_rows = w.type.shape[0].value, kdim = w.type.shape[1].value;
  const int64_t m = c.rows(x);
  // Block-format weights (Q8_0, Q4_K, ...) are decoded per element by load_w (glsl_common.cc).
  if (w_rows * kdim >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrCat("matmul '", c.node.label, "': weight ", graph::ToString(w.type),
                                                   " has more than 2^32 elements"));
  }
  absl::StatusOr<std::vector<EpilogueStep>> steps = graph::ParseEpilogue(c.node.attrs.Str("epilogue"));
  if (!steps.ok()) return absl::InvalidArgumentError(absl::StrCat("matmul '", c.node.label, "': ", steps.status().message()));
  const bool gated = graph::IsGated(*steps);
  const int64_t gates = gated ? 2 : 1;  // dot products per output column
  const int64_t n = w_rows / gates;     // output columns
  if (static_cast<int>(c.node.inputs.size()) != 2 + graph::ExtraInputs(*steps)) {
    return absl::InvalidArgumentError(absl::StrCat("matmul '", c.node.label, "': epilogue '",
                                                   c.node.attrs.Str("epilogue"), "' does not match its inputs"));
  }
  const std::vector<int64_t> widths = graph::SplitWidths(c.node);

  const int64_t tile_tokens = std::min(m, kMaxTileTokens);
  int64_t tile_rows = kTileRows;
  while (tile_rows > 1 && static_cast<uint64_t>(tile_tokens * tile_rows * gates * kWorkgroup * sizeof(float)) >
                              c.caps.max_shared_memory) {
    tile_rows /= 2;
  }

  // The extra inputs' buffers, and the chain as statements on v (output column col of row tok).
  std::string extras, epilogue;
  int extra = 0;
  for (EpilogueStep s : *steps) {
    switch (s) {
      case EpilogueStep::kSiluMul:
      case EpilogueStep::kGeluTanhMul:
        absl::StrAppend(&epilogue, "    v = ", ActivationFunction(s), "(v) * partial[(lid * G + 1u) * WG];\n");
        break;
      case EpilogueStep::kSilu:
      case EpilogueStep::kGeluTanh:
        absl::StrAppend(&epilogue, "    v = ", ActivationFunction(s), "(v);\n");
        break;
      case EpilogueStep::kBias:
      case EpilogueStep::kAdd: {
        const std::string name = absl::StrCat("e", extra);
        const graph::DType dtype = c.input(2 + extra).type.dtype;
        absl::StrAppend(&extras, FloatBuffer(static_cast<uint32_t>(4 + extra), name, dtype, true));
        absl::StrAppend(&epilogue, "    v += load_", name, s == EpilogueStep::kBias ? "(col);\n" : "(tok * N + col);\n");
        ++extra;
        break;
      }
    }
  }

  Kernel k;
  k.family = "matmul";
  k.variant = absl::StrCat(tile_tokens == 1 ? "gemv" : "gemm", ".", graph::Name(w.type.dtype), ".t", tile_tokens,
                           "x", tile_rows);
  for (EpilogueStep s : *steps) absl::StrAppend(&k.variant, "+", graph::EpilogueStepName(s));
  if (!widths.empty()) absl::StrAppend(&k.variant, "+split", widths.size());
  k.glsl = absl::StrCat(ShaderHeader(kWorkgroup), FloatBuffer(1, "y", graph::DType::kF32, false),
                        FloatBuffer(2, "x", graph::DType::kF32, true), FloatBuffer(3, "w", w.type.dtype, true), extras,
                        ActivationGlsl(), OutputIndex(widths, c.rows(c.node), n),
                        Fill(R"(
const uint WG = {{WG}}u, TM = {{TM}}u, RN = {{RN}}u, G = {{G}}u, K = {{K}}u, N = {{N}}u;
shared float partial[TM * RN * G * WG];

void main() {
  uint lid = gl_LocalInvocationID.x;
  uint row0 = gl_WorkGroupID.x * RN;
  uint tok0 = gl_WorkGroupID.y * TM;
  uint m = {{ROWS}};
  if (tok0 >= m) return;  // uniform across the workgroup

  float acc[TM][RN * G];
  [[unroll]] for (uint t = 0; t < TM; ++t)
    [[unroll]] for (uint o = 0; o < RN * G; ++o) acc[t][o] = 0.0;

  for (uint kk = lid; kk < K; kk += WG) {
    float xv[TM];
    [[unroll]] for (uint t = 0; t < TM; ++t) xv[t] = tok0 + t < m ? x[(tok0 + t) * K + kk] : 0.0;
    [[unroll]] for (uint r = 0; r < RN; ++r) {
      if (row0 + r < N) {
        [[unroll]] for (uint g = 0; g < G; ++g) {
          float wv = load_w((row0 + r + g * N) * K + kk);
          [[unroll]] for (uint t = 0; t < TM; ++t) acc[t][r * G + g] += xv[t] * wv;
        }
      }
    }
  }
  [[unroll]] for (uint t = 0; t < TM; ++t)
    [[unroll]] for (uint o = 0; o < RN * G; ++o) partial[(t * RN * G + o) * WG + lid] = acc[t][o];
  barrier();
  [[unroll]] for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (lid < s) {
      [[unroll]] for (uint o = 0; o < TM * RN * G; ++o) partial[o * WG + lid] += partial[o * WG + lid + s];
    }
    barrier();
  }
  if (lid < TM * RN) {
    uint tok = tok0 + lid / RN, col = row0 + lid % RN;
    if (tok >= m || col >= N) return;
    float v = partial[lid * G * WG];
{{EPILOGUE}}    y[out_index(tok, col)] = v;
  }
}
)",
                             {{"WG", absl::StrCat(kWorkgroup)},
                              {"TM", absl::StrCat(tile_tokens)},
                              {"RN", absl::StrCat(tile_rows)},
                              {"G", absl::StrCat(gates)},
                              {"K", absl::StrCat(kdim)},
                              {"N", absl::StrCat(n)},
                              {"EPILOGUE", epilogue},
                              {"ROWS", RowsExpr(x.type.shape[0].tokens, m)}}));
  k.args = {{c.node.id, true}};
  for (graph::ValueId in : c.node.inputs) k.args.push_back({in, false});
  k.groups = {CeilDiv(n, tile_rows), CeilDiv(m, tile_tokens), 1};
  return k;
}

}  // namespace doppler::codegen
