#include "checkpoints/gguf_experts.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace doppler::checkpoints {
namespace {

using nlohmann::json;

absl::Status Bad(const formats::GgufFile& f, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(f.path(), ": ", what));
}

// One more than the highest N of the file's blk.N.* tensors.
int64_t FileLayers(const formats::GgufFile& f) {
  int64_t layers = 0;
  for (const formats::GgufTensorInfo& t : f.Tensors()) {
    if (!t.name.starts_with("blk.")) continue;
    const size_t dot = t.name.find('.', 4);
    int64_t n;
    if (dot != std::string::npos && absl::SimpleAtoi(t.name.substr(4, dot - 4), &n) && n >= layers && n < (1 << 30)) {
      layers = n + 1;
    }
  }
  return layers;
}

// The first router or stacked-experts tensor of the file, if any.
std::optional<std::string> SomeExpertTensor(const formats::GgufFile& f) {
  for (const formats::GgufTensorInfo& t : f.Tensors()) {
    if (t.name.find(".ffn_gate_inp.") != std::string::npos || t.name.find("_exps.") != std::string::npos) return t.name;
  }
  return std::nullopt;
}

}  // namespace

absl::Status AddGgufExpertsConfig(const formats::GgufFile& f, const GgufArch& arch, json& j) {
  if (arch.moe == nullptr) return absl::OkStatus();
  const std::string p = absl::StrCat(std::string(arch.gguf), ".");
  const std::string count_key = p + "expert_count", used_key = p + "expert_used_count";
  absl::StatusOr<std::optional<int64_t>> count = f.GetOptionalInt(count_key);
  if (!count.ok()) return count.status();
  absl::StatusOr<std::optional<int64_t>> used = f.GetOptionalInt(used_key);
  if (!used.ok()) return used.status();
  const int64_t experts = count->value_or(0);
  if (experts < 0) return Bad(f, absl::StrCat(count_key, " is ", experts));
  if (experts == 0) {
    if (arch.moe->always) {
      return Bad(f, absl::StrCat(count_key, count->has_value() ? " is 0" : " is missing", ": a ", std::string(arch.gguf),
                                 " model is a mixture of experts"));
    }
    // The dense family; llama.cpp refuses experts in use without experts.
    if (used->value_or(0) != 0) {
      return Bad(f, absl::StrCat(used_key, " is ", **used, " but ", count_key, " is ",
                                 count->has_value() ? "0" : "missing"));
    }
    if (std::optional<std::string> t = SomeExpertTensor(f)) {
      return Bad(f, absl::StrCat("tensor ", *t, " belongs to a mixture of experts, but ", count_key,
                                 count->has_value() ? " is 0" : " is missing"));
    }
    return absl::OkStatus();
  }
  if (!used->has_value()) return Bad(f, absl::StrCat(used_key, " is missing (", count_key, " is ", experts, ")"));
  if (**used < 1 || **used > experts) {
    return Bad(f, absl::StrCat(used_key, " is ", **used, ": it must be between 1 and ", count_key, " (", experts, ")"));
  }
  j["architectures"] = {std::string(arch.moe->hf_class)};
  j["model_type"] = std::string(arch.moe->model_type);
  j["num_local_experts"] = experts;
  j["num_experts_per_tok"] = **used;
  if (arch.moe->expert_width_key) {
    const std::string width_key = p + "expert_feed_forward_length";
    absl::StatusOr<std::optional<int64_t>> width = f.GetOptionalInt(width_key);
    if (!width.ok()) return width.status();
    if (!width->has_value() && arch.moe->expert_width_required) {
      return Bad(f, absl::StrCat(width_key, " is missing (llama.cpp requires it for ", std::string(arch.gguf), ")"));
    }
    // llama.cpp's default without the key.
    const int64_t w = width->has_value() ? **width : j["intermediate_size"].get<int64_t>() / **used;
    if (w < 1) {
      return Bad(f, width->has_value() ? absl::StrCat(width_key, " is ", w)
                                       : absl::StrCat("no ", width_key, ", and ", p, "feed_forward_length / ", used_key,
                                                      " (llama.cpp's width then) is 0"));
    }
    j["moe_intermediate_size"] = w;
  }
  return absl::OkStatus();
}

absl::Status CheckGgufExperts(const formats::GgufFile& f, const GgufArch& arch, const formats::ModelConfig& c) {
  if (arch.moe == nullptr || !IsGgufMoeClass(arch, c.architecture)) return absl::OkStatus();
  const std::string p = absl::StrCat(std::string(arch.gguf), ".");
  const int64_t experts = c.raw.at("num_local_experts").get<int64_t>();
  const bool width_key = arch.moe->expert_width_key;
  const int64_t width = width_key ? c.raw.at("moe_intermediate_size").get<int64_t>() : c.intermediate_size;
  const std::string e = p + "expert_count", h = p + "embedding_length",
                    w = p + (width_key ? "expert_feed_forward_length" : "feed_forward_length");
  struct Expected {
    std::string part;
    std::vector<int64_t> shape;  // outermost first
    std::string because;
  };
  std::vector<Expected> expected = {
      {"ffn_gate_inp", {experts, c.hidden_size}, absl::StrCat(e, " x ", h)},
      {"ffn_gate_exps", {experts, width, c.hidden_size}, absl::StrCat(e, " x ", w, " x ", h)},
      {"ffn_up_exps", {experts, width, c.hidden_size}, absl::StrCat(e, " x ", w, " x ", h)},
      {"ffn_down_exps", {experts, c.hidden_size, width}, absl::StrCat(e, " x ", h, " x ", w)},
  };
  if (arch.moe->biases) {
    expected.push_back({"ffn_gate_inp.bias", {experts}, e});
    expected.push_back({"ffn_gate_exps.bias", {experts, width}, absl::StrCat(e, " x ", w)});
    expected.push_back({"ffn_up_exps.bias", {experts, width}, absl::StrCat(e, " x ", w)});
    expected.push_back({"ffn_down_exps.bias", {experts, c.hidden_size}, absl::StrCat(e, " x ", h)});
  }
  // Layers the file lacks altogether are reported against block_count (checkpoint_check.h).
  const int64_t layers = std::min<int64_t>(c.num_layers, FileLayers(f));
  for (int64_t l = 0; l < layers; ++l) {
    for (const Expected& x : expected) {
      const std::string name = absl::StrCat("blk.", l, ".", x.part, x.part.ends_with(".bias") ? "" : ".weight");
      absl::StatusOr<formats::TensorView> t = f.Get(name);
      if (!t.ok() && absl::IsNotFound(t.status())) {
        return absl::NotFoundError(absl::StrCat(f.path(), ": tensor ", name, " is missing: ", e, " is ", experts,
                                                ", so every layer has a router (ffn_gate_inp) and stacked experts "
                                                "(ffn_gate_exps, ffn_up_exps, ffn_down_exps)",
                                                arch.moe->biases ? ", each with its bias" : ""));
      }
      if (!t.ok()) return t.status();
      if (t->shape != x.shape) {
        return Bad(f, absl::StrCat("tensor ", name, " is [", absl::StrJoin(t->shape, ", "), "] but the metadata gives [",
                                   absl::StrJoin(x.shape, ", "), "] (", x.because, ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace doppler::checkpoints
