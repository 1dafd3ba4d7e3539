// The epilogue chain of a fused matmul (attr epilogue = "silu_mul,add" ...), and the activation
// functions it shares with the standalone activation ops.
//
// Meaning, applied to y = x · wᵀ in order:
//   silu_mul / gelu_tanh_mul  (first step only) w holds 2N rows [gate | up]: y = act(y[:, :N]) * y[:, N:]
//   bias                      y += b, the next extra input, a vector [N]
//   silu / gelu_tanh          y = act(y)
//   add                       y += r, the next extra input, [rows, N] (a residual)
// Extra inputs follow x and w in the order their steps appear.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace doppler::graph {

enum class Activation { kSilu, kGeluTanh };
float Activate(Activation a, float x);

enum class EpilogueStep { kSiluMul, kGeluTanhMul, kBias, kSilu, kGeluTanh, kAdd };

absl::StatusOr<std::vector<EpilogueStep>> ParseEpilogue(const std::string& text);
const char* EpilogueStepName(EpilogueStep s);

// Whether the chain starts with a gated product (the weight then has twice the output rows).
bool IsGated(const std::vector<EpilogueStep>& steps);
Activation GateActivation(EpilogueStep gated_step);
// Extra inputs the chain consumes (bias and add steps).
int ExtraInputs(const std::vector<EpilogueStep>& steps);

}  // namespace doppler::graph
