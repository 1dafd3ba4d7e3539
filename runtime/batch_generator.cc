#include "runtime/batch_generator.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>

#include "graph/sampling.h"
#include "runtime/stop_matcher.h"
#include "tokenizers/stream_decoder.h"

namespace doppler::runtime {
namespace {

// One prompt's generation as its tokens arrive.
struct Active {
  size_t index = 0;
  std::vector<int32_t> history;  // prompt and generated tokens, for the repeat penalty
  std::unique_ptr<tokenizers::StreamDecoder> decoder;
  std::unique_ptr<StopMatcher> stops;
};

// The token to feed after `logits` for prompt `index`: the penalty over its recent tokens, then a
// draw with its own seed at `position`.
int32_t Draw(std::vector<float> logits, const std::vector<int32_t>& history, const SamplingOptions& s, size_t index,
             int64_t position) {
  if (s.repeat_penalty != 1.0) {
    std::vector<bool> seen(logits.size(), false);
    const size_t from = history.size() > static_cast<size_t>(s.repeat_last_n) ? history.size() - static_cast<size_t>(s.repeat_last_n) : 0;
    for (size_t i = from; i < history.size(); ++i) {
      const size_t id = static_cast<size_t>(history[i]);
      if (id < logits.size() && !seen[id]) {
        seen[id] = true;
        logits[id] = graph::Penalize(logits[id], s.repeat_penalty);
      }
    }
  }
  const graph::SampleParams p{s.temperature, s.top_k, s.top_p, s.min_p, s.seed + static_cast<uint32_t>(index)};
  return graph::SampleToken(logits.data(), static_cast<int64_t>(logits.size()), p, static_cast<uint32_t>(position));
}

}  // namespace

absl::StatusOr<std::vector<BatchResult>> GenerateBatch(BatchEngine& engine, const tokenizers::Tokenizer* tokenizer,
                                                       const std::vector<std::vector<int32_t>>& prompts,
                                                       const GenerationOptions& options,
                                                       const SamplingOptions& sampling, BatchGenerationStats* stats) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  std::vector<BatchResult> results(prompts.size());
  if (options.max_tokens <= 0) return results;
  const bool sample = sampling.temperature > 0.0;
  const std::vector<int32_t> eos = tokenizer ? tokenizer->eos_ids() : std::vector<int32_t>{};
  std::map<int, Active> active;  // by the engine's sequence id
  BatchGenerationStats st;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t room = engine.context() - static_cast<int64_t>(prompts[i].size()) + 1;
    absl::StatusOr<int> id = engine.Add(prompts[i], std::min(options.max_tokens, std::max<int64_t>(room, 1)), sample);
    if (!id.ok()) {
      for (const auto& [added, a] : active) engine.Remove(added);
      return absl::Status(id.status().code(), absl::StrCat("prompt ", i, ": ", id.status().message()));
    }
    Active& a = active[*id];
    a.index = i;
    a.history = prompts[i];
    if (tokenizer) {
      a.decoder = std::make_unique<tokenizers::StreamDecoder>(*tokenizer);
      a.stops = std::make_unique<StopMatcher>(options.stop);
      // The prompt's text through the same decoder, so that it joins the generation exactly.
      if (options.echo_prompt) {
        for (int32_t id : prompts[i]) results[i].text += a.decoder->Push(id);
      }
    }
    st.prompt_tokens += static_cast<int64_t>(prompts[i].size());
  }
  auto finish = [&](int id, StopReason reason) {
    Active& a = active.at(id);
    BatchResult& r = results[a.index];
    r.reason = reason;
    if (a.decoder && reason != StopReason::kStopString) r.text += a.stops->Push(a.decoder->Flush()) + a.stops->Flush();
    engine.Remove(id);
    active.erase(id);
  };
  while (!active.empty()) {
    if (options.interrupted && options.interrupted()) {
      std::vector<int> ids;
      for (const auto& [id, a] : active) ids.push_back(id);
      for (int id : ids) finish(id, StopReason::kInterrupted);
      break;
    }
    absl::StatusOr<std::vector<StepToken>> step = engine.Step();
    if (!step.ok()) {
      for (const auto& [id, a] : active) engine.Remove(id);
      return step.status();
    }
    ++st.steps;
    if (step->empty() && engine.running() == 0) {
      for (const auto& [id, a] : active) engine.Remove(id);
      return absl::ResourceExhaustedError("no sequence can run: the KV pool has no room (--ctx-total)");
    }
    for (StepToken& t : *step) {
      auto it = active.find(t.sequence);
      if (it == active.end()) continue;  // ended at an earlier token of this step (a GPU loop's)
      Active& a = it->second;
      BatchResult& r = results[a.index];
      int32_t token = t.token;
      if (sample) {
        token = Draw(std::move(t.logits), a.history, sampling, a.index, t.position);
        if (absl::Status s = engine.SetNext(t.sequence, token); !s.ok()) return s;
      }
      if (!options.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
        finish(t.sequence, StopReason::kEndOfSequence);
        continue;
      }
      r.tokens.push_back(token);
      a.history.push_back(token);
      ++st.generated_tokens;
      if (a.decoder) {
        r.text += a.stops->Push(a.decoder->Push(token));
        if (a.stops->stopped()) {
          finish(t.sequence, StopReason::kStopString);
          continue;
        }
      }
      if (static_cast<int64_t>(r.tokens.size()) >= options.max_tokens) {
        finish(t.sequence, StopReason::kMaxTokens);
      } else if (t.position >= engine.context()) {
        finish(t.sequence, StopReason::kContextFull);
      }
    }
  }
  st.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (stats) *stats = st;
  return results;
}

}  // namespace doppler::runtime
