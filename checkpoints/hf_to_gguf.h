// HF checkpoint (config.json + safetensors [+ tokenizer]) -> GGUF v3, with llama.cpp's names,
// metadata keys and layouts, so llama.cpp and doppler read the result alike:
//   - metadata: general.architecture / name / file_type / quantization_version, the
//     `{arch}.*` hyperparameters (context_length, embedding_length, block_count,
//     feed_forward_length, rope.dimension_count, rope.freq_base, attention.head_count,
//     head_count_kv, layer_norm_rms_epsilon, vocab_size; key_length / value_length when the
//     head size is not hidden / heads; attention.sliding_window and rope.freq_base_swa where
//     llama.cpp reads them; rope.scaling.* for linear, yarn and longrope scaling, and doppler's own
//     rope.scaling.yarn_truncate false where YaRN's ramp ends stay unrounded (gguf_key_names.h);
//     expert_count, expert_used_count and, for qwen3moe and gpt-oss, expert_feed_forward_length),
//     tokenizer.ggml.*;
//   - tensors: token_embd, blk.N.* under the architecture's names (checkpoints/gguf_arch.cc),
//     output_norm, output (absent when tied); Llama 3 RoPE scaling as rope_freqs.weight (one
//     divisor per frequency), LongRoPE's as rope_factors_long/short.weight; llama's q/k rows
//     permuted into llama.cpp's interleaved-pair RoPE layout; Gemma's norm weights stored + 1; a
//     mixture of experts' router as blk.N.ffn_gate_inp and each layer's experts' matrices stacked
//     into blk.N.ffn_{gate,up,down}_exps ([E, N, K] outermost first); GPT-OSS's stacked experts
//     split and transposed as llama.cpp's converter does (gguf/gpt_oss_experts.h);
//   - matrices in the scheme's types (quant/quant_scheme.h; every expert of a stack alike, the
//     router F32; MXFP4 experts stay MXFP4), 1-D tensors in F32.
// Supported: the HF classes of every architecture in gguf_arch.cc, when llama.cpp would run the
// file as the config describes (e.g. a Gemma 3 with llama.cpp's every-6th-layer-global pattern);
// otherwise Unimplemented, naming what the file cannot say.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "quant/quant_scheme.h"

namespace doppler::checkpoints {

struct HfToGgufOptions {
  std::filesystem::path model_dir;
  std::filesystem::path out;
  quant::QuantScheme quant = quant::QuantScheme::kF16;
  // The tokenizer to store: a tokenizer.json or a llama2.c tokenizer.bin; empty: MODEL/tokenizer.json
  // when there is one, else none.
  std::filesystem::path tokenizer;
  std::string name;  // general.name; empty: the model directory's name
  // After each tensor: (done, total, GGUF name, its type).
  std::function<void(size_t, size_t, const std::string&, const char*)> progress;
  // Notes for the user (a tensor left out, no tokenizer stored, ...).
  std::function<void(const std::string&)> note;
};

absl::Status ConvertHfToGguf(const HfToGgufOptions& options);

// llama.cpp's q/k row order for a [rows, ...] tensor of `heads` heads (`row_bytes` bytes per
// row): GGUF row h*D + 2*i + s = HF row h*D + s*D/2 + i. The inverse of what OpenHfNamedGguf undoes.
std::vector<uint8_t> PermuteRowsForGguf(const std::vector<uint8_t>& rows, int64_t n_rows, int64_t heads);

}  // namespace doppler::checkpoints
