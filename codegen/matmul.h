// The matmul kernel family: y[T, N] = x[T, K] · w[N, K]ᵀ with f32 accumulation, then the node's
// epilogue chain, written to y's layout. emit_matmul.cc checks the node and builds what every
// variant shares (the epilogue as a `store` function, buffer declarations); the variants are a
// matrix-vector kernel for a few rows (decode) and a tiled kernel for many (prefill).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/emitters.h"
#include "codegen/tuning/coop.h"
#include "codegen/tuning/gemv.h"
#include "graph/epilogue.h"

namespace doppler::codegen {

struct MatMulSpec {
  int64_t m = 0;      // rows of x for the plan's bucket (grouped: rows in all)
  int64_t k = 0;      // reduction length
  int64_t n = 0;      // output columns
  int64_t gates = 1;  // weight rows per output column: 2 when the chain starts with a gated step
  graph::DType w_dtype = graph::DType::kF32;
  // x is RMS-normalised first (attr norm_eps, or x a plain norm the kernel computes:
  // codegen/in_matmul.h): io_glsl then defines `float norm_scale(float
  // sum_sq)` (1 / rms from the sum of squares of a row of x), `float norm_weight(uint k)` and,
  // when K is a multiple of 4, `vec4 norm_weight4(uint k)` (k a multiple of 4).
  bool norm = false;
  // Where x is a plain norm this kernel writes for its other readers (a plain norm written by its
  // float reader, codegen/in_matmul.h): io_glsl defines `void store_xn(uint i, float v)`, which the
  // matrix-vector kernel's workgroups call for the values of the normalised row, a share each.
  bool norm_out = false;
  // With a norm prologue: the output columns of every product without gates that normalises the
  // same x (this one's among them), which run side by side in one level; the tile rules take their
  // grid together. Else n.
  int64_t level_n = 0;
  std::string rows_expr;  // GLSL for the step's row count (runtime for T-shaped x)
  bool x_whole = true;    // x's buffer holds the m rows from its start (not a last row of a longer x)
  // GLSL shared by the variants: `uint x_row0()` (x's first row in the buffer bound as x: row
  // T - 1 of a last_row's input where the kernel reads the row itself, else 0), y (binding 1), the
  // norm weight (4) and epilogue inputs, K, N, G, and `void store(uint tok, uint col, float v, float
  // up)`, which applies the chain to v (up is the second dot product of a gated chain) and writes
  // column col of row tok.
  std::string io_glsl;
  // For the tiled variants (before io_glsl): `bool tile_rows(uint bm, out uint tok0, out uint m)`,
  // which a workgroup calls first, uniformly (it may pass barriers): the first row of its tile of
  // bm rows, and the rows there are (rows from m on read as zeros and are not stored); false where
  // it has none. And `uint w_row0()`: the first row of its weight matrix in w.
  std::string tile_rows_glsl;
  // Rows grouped (an expert product's rows by expert, codegen/emit_experts.cc): `groups` groups of
  // at most `group_rows` rows each, m in all; a tile holds rows of one group (tile_rows says
  // which). 0: one group of m rows.
  int64_t groups = 0;
  int64_t group_rows = 0;
  // For the tiled variants: x (binding 2), and `vec4 x_load4(uint t, uint k, uint m)`: x[t, k .. k + 3]
  // (k a multiple of 4; 0 past row m or column K), one 16-byte load where K is a multiple of 4;
  // `vec4 x_normed4(vec4 v, uint k, inout float sum_sq)`: with a norm prologue, v times the norm
  // weight, v's squares added to sum_sq first (else v); `staged_x4(t, k, m, sum_sq)`, the two in turn.
  std::string tile_x_glsl;
  std::string variant_suffix;  // "+silu_mul+add+split3" ...
  bool x_q8 = false;           // attr x_quant = "q8": x is rounded through q8 blocks
  // A row-wide op the kernel computes too, once it has written its rows (a tail,
  // codegen/in_matmul.h): the node (-1: none), and the binding of its value; its inputs but the
  // first follow, then the kernel's scratch. With a tail the output y is declared coherent, for the
  // last workgroup's reads.
  graph::ValueId tail = -1;
  uint32_t tail_binding = 0;
  // A residual norm whose normalised sum is x, computed by the kernel as it reads x (a norm in x,
  // codegen/in_matmul.h): the node (-1: none), the binding of its first input (the others follow),
  // and whether this kernel writes the norm's value (the first of its consumers does, at the
  // binding after the inputs).
  graph::ValueId restate = -1;
  uint32_t restate_binding = 0;
  bool restate_writes = false;
  // The binding after the kernel's args (the matmul's, the restated norm's, the tail's): its scratch
  // (codegen/kernel.h), where it has some.
  uint32_t scratch_binding = 0;
};

// Buckets up to kGemvMaxBucket rows use the matrix-vector variants, whose workgroups take
// tuning::GemvConfig::rows rows of x each (codegen/tuning/gemv.h). On the H100 a 16-token prefill
// of Llama-3.2-1B took 26.4 ms in the tiled f32 kernel, whose 64-row tiles leave most of their rows
// and most of the GPU idle for so few, and takes 6.6 ms so.
inline constexpr int64_t kGemvMaxBucket = tuning::kGemvRowsLimit;
// Rows from which the cooperative-matrix variant is used (codegen/tuning/coop.h).
inline constexpr int64_t kCoopMinRows = tuning::kCoopMinRows;

absl::StatusOr<Kernel> EmitGemv(const EmitContext& c, const MatMulSpec& s);
// x as the matrix-vector kernels read it: `vec4 x_value4(uint row, uint t, uint k, uint step)` (row
// `row`, the t-th of the workgroup's block; `step`: the q8 staging's, where `held`), and with a
// norm before the products `vec4 x_weight4(uint k, uint step)`, `float x_scale(float sum_sq)` and
// X_NORM 1. Where x is a residual norm's normalised part (MatMulSpec::restate), x_value4 is the
// norm's sum, which workgroup (0, 0) of its first consumer also writes (codegen/matmul_gemv_q8.cc).
std::string RestatedXGlsl(const EmitContext& c, const MatMulSpec& s, bool held);
// The matrix-vector variant for x rounded through q8 blocks (attr x_quant), with integer dot
// products (TargetCaps::integer_dot_product); block-quantized weights only.
absl::StatusOr<Kernel> EmitGemvQ8(const EmitContext& c, const MatMulSpec& s);

// GLSL declaring a matrix-vector workgroup's rows of x, t0 .. t0 + m - 1 (`uint m`): a block of
// TM rows where there are several blocks (returning where it is past the step's rows), else all
// `rows_expr` of them. The block is gl_WorkGroupID.z or, `interleaved`, wgi % blocks, where wgi
// (`uint wgi`, the workgroup's index over x and y) then becomes wgi / blocks, skipped from
// `WORKGROUPS` (a block's) on: neighbouring workgroups take the same weight rows for different
// blocks, so that those are read together.
std::string GemvRowBlockGlsl(uint32_t blocks, const std::string& rows_expr, bool interleaved);

// `shared float red[OUTS][WG]` and `void wg_reduce(inout float v[OUTS])`: every invocation of the
// workgroup gets the workgroup's sums (WG a power of two without subgroup arithmetic). A caller
// that reduces again must pass a barrier first (the previous call's reads of red).
std::string DotsReduceGlsl(bool subgroups);
// Workgroups along y of a tiled variant with tiles of bm rows: one a tile of the m rows, or for
// grouped rows as many as any split of them among the groups can fill.
uint32_t RowTiles(const MatMulSpec& s, int64_t bm);
// The rows a tiled variant's tile shape is chosen for: m, or a group's mean.
int64_t TileShapeRows(const MatMulSpec& s);
// A tiled variant's x (MatMulSpec::tile_x_glsl) for rows of k values, with `index` the GLSL
// expression of x[t, k]'s element (k a multiple of 4 where k is), and with `norm` the norm
// prologue's weight and sum of squares. `half`: x is stored as f16 (codegen/half_x.h; k a
// multiple of 4, no norm). Besides x_load4's floats, `XVEC4 x_fetch4(t, k, m)` gives four values
// as stored, f16vec4 for f16 (for kernels that round them to f16: no conversion through f32).
std::string TileXGlsl(int64_t k, const std::string& index, bool norm, bool half = false);
absl::StatusOr<Kernel> EmitGemm(const EmitContext& c, const MatMulSpec& s);
absl::StatusOr<Kernel> EmitCoopGemm(const EmitContext& c, const MatMulSpec& s);
// The cooperative-matrix variant for at most tuning::kCoopRowsMaxRows rows of x, streaming the
// weights (batched decode: codegen/tuning/coop_rows.h says which steps take it).
absl::StatusOr<Kernel> EmitCoopRows(const EmitContext& c, const MatMulSpec& s);

// What the cooperative-matrix variants share: the shader header with their extensions for a
// workgroup of `invocations`, and their staging's GLSL (after K's declaration): `uint slice_k(uint
// k)`, where a weight slice at column k is read (the row's last slice where K is a multiple of 8,
// else k), and `uvec2 x_halves(vec4 v)`, four values of x as f16 pairs in the order the weights'
// slices are staged in (WeightSlices' w_slice_halves).
std::string CoopMatMulHeader(uint32_t invocations);
std::string CoopStagingGlsl();

}  // namespace doppler::codegen
