#include "models/rope.h"

#include <algorithm>
#include <cmath>

namespace doppler::models {
namespace {

// base ** (i / dim) for i = 0, 2, ..., dim - 2, as float32 (transformers' arange(0, dim, 2) / dim).
std::vector<float> PosFreqs(float theta, int rotary_dim) {
  std::vector<float> p;
  const float d = static_cast<float>(rotary_dim);
  for (int i = 0; i < rotary_dim; i += 2) p.push_back(std::pow(theta, static_cast<float>(i) / d));
  return p;
}

// As transformers' _compute_llama3_parameters, in float32: python scalars become float32
// operands, and `c / tensor` is evaluated as reciprocal(tensor) * c.
void ApplyLlama3(const formats::RopeScaling& s, std::vector<float>& inv) {
  const float two_pi = static_cast<float>(2.0 * M_PI);
  const double old_len = s.original_max_position_embeddings;
  const float low_wavelen = static_cast<float>(old_len / s.low_freq_factor);
  const float high_wavelen = static_cast<float>(old_len / s.high_freq_factor);
  const float span = static_cast<float>(static_cast<double>(s.high_freq_factor) - s.low_freq_factor);
  for (float& f : inv) {
    const float wavelen = (1.0f / f) * two_pi;
    if (wavelen < high_wavelen) continue;  // high frequency: unchanged
    if (wavelen > low_wavelen) {           // low frequency: fully scaled
      f = f / s.factor;
      continue;
    }
    const float smooth = ((1.0f / wavelen) * static_cast<float>(old_len) - s.low_freq_factor) / span;
    const float a = ((1.0f - smooth) * f) / s.factor;
    const float b = smooth * f;
    f = a + b;
  }
}

// YaRN (transformers' _compute_yarn_parameters): frequencies whose wavelength fits the original
// context many times (dimension index below `low`) keep their value, those that do not complete
// beta_slow rotations in it (above `high`) are divided by the factor, with a linear ramp between.
std::vector<float> Yarn(const formats::RopeConfig& rope, int rotary_dim) {
  const formats::RopeScaling& s = rope.scaling;
  const double dim = rotary_dim, base = rope.theta, ctx = s.original_max_position_embeddings;
  auto correction_dim = [&](double rotations) {
    return dim * std::log(ctx / (rotations * 2 * M_PI)) / (2 * std::log(base));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // no division by zero
  const float low_f = static_cast<float>(low), span = static_cast<float>(high - low);
  const std::vector<float> pos = PosFreqs(rope.theta, rotary_dim);
  std::vector<float> inv(pos.size());
  for (size_t i = 0; i < pos.size(); ++i) {
    const float extrapolation = 1.0f / pos[i];
    const float interpolation = 1.0f / (s.factor * pos[i]);
    const float ramp = std::clamp((static_cast<float>(i) - low_f) / span, 0.0f, 1.0f);
    const float keep = 1.0f - ramp;  // the share of the unscaled frequency
    inv[i] = interpolation * (1.0f - keep) + extrapolation * keep;
  }
  return inv;
}

// LongRoPE (transformers' _compute_longrope_parameters): each frequency divided by its own factor.
std::vector<float> LongRope(const formats::RopeConfig& rope, int rotary_dim, int64_t context) {
  const formats::RopeScaling& s = rope.scaling;
  const std::vector<float>& ext = context > s.original_max_position_embeddings ? s.long_factor : s.short_factor;
  const std::vector<float> pos = PosFreqs(rope.theta, rotary_dim);
  std::vector<float> inv(pos.size());
  for (size_t i = 0; i < pos.size(); ++i) inv[i] = 1.0f / (ext[i] * pos[i]);
  return inv;
}

}  // namespace

RopeFrequencies ComputeRope(const formats::RopeConfig& rope, int rotary_dim, int64_t context) {
  RopeFrequencies r;
  if (rotary_dim <= 0) return r;
  const formats::RopeScaling& s = rope.scaling;
  r.attention_factor = s.attention_factor;
  if (s.type == "yarn") {
    r.inv_freq = Yarn(rope, rotary_dim);
    return r;
  }
  if (s.type == "longrope") {
    r.inv_freq = LongRope(rope, rotary_dim, context);
    return r;
  }
  // transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), every step in float32.
  for (float p : PosFreqs(rope.theta, rotary_dim)) r.inv_freq.push_back(1.0f / p);
  if (s.type == "linear") {
    for (float& f : r.inv_freq) f = f / s.factor;
  } else if (s.type == "llama3") {
    ApplyLlama3(s, r.inv_freq);
  }
  return r;
}

}  // namespace doppler::models
