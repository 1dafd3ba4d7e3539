// The epilogue chain of a fused matmul (attr epilogue = "silu_mul,add" ...), and the activation
// functions it shares with the standalone activation ops.
//
// Meaning, applied to y = x · wᵀ in order:
//   silu_mul / gelu_tanh_mul  (gated) w holds 2N rows [gate | up]: y = act(y[:, :N]) * y[:, N:]
//   clamped_swiglu            (gated) y = ClampedSwiglu(y[:, :N], y[:, N:]) with the node's attrs alpha
//                             and limit (GPT-OSS's experts)
//   bias                      y += b, the next extra input, a vector of y's width (2N before a gated
//                             step, N after it)
//   silu / gelu_tanh          y = act(y)
//   add                       y += r, the next extra input, [rows, N] (a residual)
// A gated step comes first, or after bias steps only. Extra inputs follow x and w in the order
// their steps appear.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace doppler::graph {

enum class Activation { kSilu, kGeluTanh };
float Activate(Activation a, float x);

// GPT-OSS's gated activation, in float32 as transformers computes it: g = min(gate, limit),
// (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g).
float ClampedSwiglu(float gate, float up, float alpha, float limit);

enum class EpilogueStep { kSiluMul, kGeluTanhMul, kBias, kSilu, kGeluTanh, kAdd, kClampedSwiglu };

absl::StatusOr<std::vector<EpilogueStep>> ParseEpilogue(const std::string& text);
const char* EpilogueStepName(EpilogueStep s);
// The attr's text of a chain: its steps' names joined by ','.
std::string EpilogueText(const std::vector<EpilogueStep>& steps);

// Whether a step combines [gate | up] halves (silu_mul, gelu_tanh_mul, clamped_swiglu).
bool IsGatedStep(EpilogueStep s);
// Whether the chain has a gated product (the weight then has twice the output rows).
bool IsGated(const std::vector<EpilogueStep>& steps);
// The activation of silu_mul or gelu_tanh_mul.
Activation GateActivation(EpilogueStep gated_step);
// Extra inputs the chain consumes (bias and add steps).
int ExtraInputs(const std::vector<EpilogueStep>& steps);

}  // namespace doppler::graph
