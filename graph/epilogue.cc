#include "graph/epilogue.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace doppler::graph {
namespace {
constexpr EpilogueStep kAll[] = {EpilogueStep::kSiluMul, EpilogueStep::kGeluTanhMul, EpilogueStep::kBias,
                                 EpilogueStep::kSilu,    EpilogueStep::kGeluTanh,    EpilogueStep::kAdd};
}

float Activate(Activation a, float x) {
  if (a == Activation::kSilu) return x / (1.0f + std::exp(-x));
  const float k = static_cast<float>(std::sqrt(2.0 / M_PI));
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
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
  }
  return "?";
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
  for (size_t i = 1; i < steps.size(); ++i) {
    if (steps[i] == EpilogueStep::kSiluMul || steps[i] == EpilogueStep::kGeluTanhMul) {
      return absl::InvalidArgumentError("a gated step must come first in an epilogue");
    }
  }
  return steps;
}

bool IsGated(const std::vector<EpilogueStep>& steps) {
  return !steps.empty() && (steps[0] == EpilogueStep::kSiluMul || steps[0] == EpilogueStep::kGeluTanhMul);
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
