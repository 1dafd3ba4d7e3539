#include "runtime/model_source.h"

#include <algorithm>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "checkpoints/checkpoint_check.h"
#include "checkpoints/gguf_config.h"
#include "checkpoints/hf_names.h"
#include "formats/gguf/gguf_file.h"
#include "formats/safetensors.h"
#include "models/blocks.h"
#include "models/synthetic.h"
#include "passes/pass.h"
#include "quant/quant_scheme.h"
#include "runtime/token_choice.h"

namespace doppler::runtime {
namespace {
constexpr int64_t kDefaultMaxContext = 4096;
// The most context any model gets (2^20 tokens): every size derived from it (the RoPE tables, the
// KV cache's rows) then stays far from overflow, and the device's memory is the limit below it.
constexpr int64_t kMaxContext = int64_t{1} << 20;

// The context size: the model's trained length (at most 4096) unless one is asked for; more than
// the trained length is allowed with a warning, more than kMaxContext is refused.
absl::Status ResolveContext(const formats::ModelConfig& config, checkpoints::CheckpointNaming naming, int64_t& context) {
  const int64_t trained = config.max_position_embeddings;  // 0: the model does not say
  const std::string key = checkpoints::ConfigKeyName("max_position_embeddings", config, naming);
  if (context <= 0) {
    if (trained == 0) {
      std::fprintf(stderr, "warning: the model does not give its trained context length (%s): using %lld tokens\n",
                   key.c_str(), static_cast<long long>(kDefaultMaxContext));
    }
    context = trained > 0 ? std::min(kDefaultMaxContext, trained) : kDefaultMaxContext;
    return absl::OkStatus();
  }
  if (context > kMaxContext) {
    return absl::InvalidArgumentError(absl::StrCat("-c, --ctx-size ", context, " is more than the ", kMaxContext,
                                                   " tokens doppler supports"));
  }
  if (trained > 0 && context > trained) {
    std::fprintf(stderr, "warning: -c, --ctx-size %lld is more than the %lld tokens the model was trained on (%s)\n",
                 static_cast<long long>(context), static_cast<long long>(trained), key.c_str());
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<OpenedModel> OpenModel(EngineOptions& options) {
  OpenedModel m;
  const bool synthetic = !options.synthetic.empty();
  const bool gguf = !synthetic && IsGgufModel(options.model_path);
  const models::SyntheticWeightStore* synthetic_store = nullptr;
  if (synthetic) {
    absl::StatusOr<formats::ModelConfig> config = models::SyntheticConfig(options.synthetic);
    if (!config.ok()) return config.status();
    m.config = *std::move(config);
    absl::StatusOr<std::unique_ptr<models::SyntheticWeightStore>> store = models::SyntheticWeightStore::Create(
        options.synthetic, m.config, options.weight_dtype, options.quant);
    if (!store.ok()) return store.status();
    synthetic_store = store->get();
    m.store = *std::move(store);
  } else if (gguf) {
    if (options.quant != quant::QuantScheme::kNone) {
      return absl::InvalidArgumentError(absl::StrCat(options.model_path.string(), " is a GGUF file: its tensors keep "
                                                     "their own types; --quant applies to HF checkpoints"));
    }
    absl::StatusOr<std::unique_ptr<formats::GgufFile>> file = formats::GgufFile::Open(options.model_path);
    if (!file.ok()) return file.status();
    absl::StatusOr<formats::ModelConfig> config = checkpoints::ConfigFromGguf(**file);
    if (!config.ok()) return config.status();
    m.config = *std::move(config);
    absl::StatusOr<std::unique_ptr<formats::WeightStore>> store = checkpoints::OpenHfNamedGguf(*std::move(file));
    if (!store.ok()) return store.status();
    m.store = *std::move(store);
  } else {
    absl::StatusOr<formats::ModelConfig> config = formats::ReadHfConfig(options.model_path / "config.json");
    if (!config.ok()) return config.status();
    m.config = *std::move(config);
    absl::StatusOr<std::unique_ptr<formats::WeightStore>> store = formats::OpenSafetensors(options.model_path);
    if (!store.ok()) return store.status();
    m.store = *std::move(store);
  }

  const checkpoints::CheckpointNaming naming = gguf ? checkpoints::CheckpointNaming::kGguf : checkpoints::CheckpointNaming::kHf;
  if (!synthetic) {
    if (absl::Status s = checkpoints::CheckConfigAgainstCheckpoint(m.config, *m.store, naming); !s.ok()) return s;
  }
  if (absl::Status s = ResolveContext(m.config, naming, options.context); !s.ok()) return s;
  options.prefill_chunk = std::clamp<int64_t>(options.prefill_chunk, 1, options.context);
  m.build.context = options.context;
  m.build.max_step_tokens = options.prefill_chunk;  // sizes the sliding-window ring caches
  m.build.weight_dtype = options.weight_dtype;
  m.build.stacked_experts = gguf;  // llama.cpp stacks each layer's experts (ffn_*_exps)
  // Each matrix's storage type: a GGUF's own (a missing tensor keeps the default and is reported
  // when the weights load), or --quant's choice for an HF model.
  const formats::WeightStore* store = m.store.get();
  if (synthetic_store != nullptr) {
    // The store generates each tensor in its storage type (--quant's choice); asking it does not
    // generate anything.
    m.build.dtype_of = [synthetic_store](const std::string& tensor, int64_t, graph::DType default_dtype) {
      return synthetic_store->DTypeOf(tensor, default_dtype);
    };
  } else if (gguf) {
    m.build.dtype_of = [store](const std::string& tensor, int64_t, graph::DType default_dtype) {
      absl::StatusOr<formats::TensorView> t = store->Get(tensor);
      return t.ok() ? t->dtype : default_dtype;
    };
  } else {
    // An HF checkpoint's matrices take --quant's choice (or the default type), but a tensor stored
    // in a block format (GPT-OSS's MXFP4 experts) keeps it: quantizing it again would round twice.
    const quant::QuantScheme quant = options.quant;
    const int layers = m.config.num_layers;
    const bool tied = m.config.tie_word_embeddings;
    const int64_t experts = models::ConfigExpertCount(m.config);
    m.build.dtype_of = [store, quant, layers, tied, experts](const std::string& tensor, int64_t cols,
                                                             graph::DType default_dtype) {
      if (!store->Has(tensor)) return default_dtype;
      if (absl::StatusOr<formats::TensorView> t = store->Get(tensor); t.ok() && graph::IsBlockFormat(t->dtype)) {
        return t->dtype;
      }
      return quant::QuantizedDType(quant, tensor, cols, layers, tied, experts, default_dtype);
    };
  }
  // An f32 model keeps an f32 cache so that it computes like the reference; otherwise f16.
  const bool plain_f32 = !gguf && !synthetic && options.quant == quant::QuantScheme::kNone && options.weight_dtype == graph::DType::kF32;
  m.build.kv_dtype = options.kv_dtype.value_or(plain_f32 ? graph::DType::kF32 : graph::DType::kF16);
  if (m.build.kv_dtype != graph::DType::kF32 && m.build.kv_dtype != graph::DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat("the KV cache can be f16 or f32, not ", graph::Name(m.build.kv_dtype)));
  }
  return m;
}

absl::StatusOr<graph::Graph> StepGraph(const formats::ModelConfig& config, const models::BuildOptions& build,
                                       const SamplingOptions& sampling, const std::string& pipeline) {
  absl::StatusOr<passes::PassManager> pm = passes::PassManager::Parse(pipeline);
  if (!pm.ok()) return pm.status();
  absl::StatusOr<graph::Graph> g = models::BuildModelGraph(config, build);
  if (!g.ok()) return g.status();
  g = AppendTokenChoice(*std::move(g), sampling);
  if (!g.ok()) return g.status();
  if (absl::Status s = pm->Run(*g); !s.ok()) return s;
  return g;
}

}  // namespace doppler::runtime
