#include "graph/epilogue.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace doppler::graph {
namespace {
constexpr EpilogueStep kAll[] = {EpilogueStep::kSiluMul, EpilogueStep::kGeluTanhMul, EpilogueStep::kBias,
                                 EpilogueStep::kSilu,    EpilogueStep::kGeluTanh,    EpilogueStep::kAdd,
                                 EpilogueStep::kClampedSwiglu};
}

float Activate(Activation a, float x) {
  if (a == Activation::kSilu) return x / (1.0f + std::exp(-x));
  const float k = static_cast<float>(std::sqrt(2.0 / M_PI));
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

float ClampedSwiglu(float gate, float up, float alpha, float limit) {
  const float g = std::min(gate, limit);
  const float u = std::clamp(up, -limit, limit);
  return (u + 1.0f) * (g * (1.0f / (1.0f + std::exp(-(g * alpha)))));
}

const char* EpilogueStepName(EpilogueStep s) {
  switch (s) {
    case EpilogueStep::kSiluMul:
      return "silu_mul";
    case EpilogueStep::kGeluTanhMul:
      return "gelu_tanh_mul";
    case EpilogueStep::kBias:
      return "bias";
    case EpilogueStep::kSilu:
      return "silu";
    case EpilogueStep::kGeluTanh:
      return "gelu_tanh";
    case EpilogueStep::kAdd:
      return "add";
    case EpilogueStep::kClampedSwiglu:
      return "clamped_swiglu";
  }
  return "?";
}

std::string EpilogueText(const std::vector<EpilogueStep>& steps) {
  std::string text;
  for (EpilogueStep s : steps) absl::StrAppend(&text, text.empty() ? "" : ",", EpilogueStepName(s));
  return text;
}

absl::StatusOr<std::vector<EpilogueStep>> ParseEpilogue(const std::string& text) {
  std::vector<EpilogueStep> steps;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    bool found = false;
    for (EpilogueStep s : kAll) {
      if (part == EpilogueStepName(s)) {
        steps.push_back(s);
        found = true;
      }
    }
    if (!found) return absl::InvalidArgumentError(absl::StrCat("unknown epilogue step '", std::string(part), "'"));
  }
  bool only_biases = true;  // so far
  for (EpilogueStep s : steps) {
    if (IsGatedStep(s) && !only_biases) {
      return absl::InvalidArgumentError("a gated step must come first in an epilogue, or after bias steps only");
    }
    only_biases = only_biases && s == EpilogueStep::kBias;
  }
  return steps;
}

bool IsGatedStep(EpilogueStep s) {
  return s == EpilogueStep::kSiluMul || s == EpilogueStep::kGeluTanhMul || s == EpilogueStep::kClampedSwiglu;
}

bool IsGated(const std::vector<EpilogueStep>& steps) {
  return std::any_of(steps.begin(), steps.end(), IsGatedStep);
}

Activation GateActivation(EpilogueStep gated_step) {
  return gated_step == EpilogueStep::kSiluMul ? Activation::kSilu : Activation::kGeluTanh;
}

int ExtraInputs(const std::vector<EpilogueStep>& steps) {
  int n = 0;
  for (EpilogueStep s : steps) n += (s == EpilogueStep::kBias || s == EpilogueStep::kAdd) ? 1 : 0;
  return n;
}

}  // namespace doppler::graph
