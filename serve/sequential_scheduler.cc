#include "serve/sequential_scheduler.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "models/tokenizer/stream_decoder.h"
#include "runtime/stop_matcher.h"
#include "serve/token_sampler.h"

namespace doppler::serve {

using Clock = std::chrono::steady_clock;

SequentialScheduler::SequentialScheduler(runtime::Engine& engine, const models::Tokenizer* tokenizer,
                                         int64_t max_waiting, SchedulerObserver* observer)
    : engine_(engine),
      tokenizer_(tokenizer),
      max_waiting_(max_waiting),
      observer_(observer),
      reuse_prefix_(!engine.config().sliding_window.has_value()) {
  engine_.Reset();
  worker_ = std::thread([this] { Work(); });
}

SequentialScheduler::~SequentialScheduler() {
  CancelAll();
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void SequentialScheduler::CancelAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [seq, t] : waiting_) seq->Cancel();
  if (running_) running_->Cancel();
}

absl::StatusOr<std::shared_ptr<Sequence>> SequentialScheduler::Submit(SequenceRequest request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) return absl::UnavailableError("the server is shutting down");
  if (static_cast<int64_t>(waiting_.size()) >= max_waiting_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the server is busy: ", waiting_.size(), " requests are waiting already; try again later"));
  }
  auto seq = std::make_shared<Sequence>(next_id_++, std::move(request));
  waiting_.emplace_back(seq, Clock::now());
  cv_.notify_all();
  return seq;
}

SchedulerLoad SequentialScheduler::Load() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {running_ ? 1 : 0, static_cast<int64_t>(waiting_.size()), kv_usage_};
}

void SequentialScheduler::StopAccepting() {
  std::lock_guard<std::mutex> lock(mu_);
  accepting_ = false;
}

bool SequentialScheduler::WaitIdle(std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, limit, [&] { return !running_ && waiting_.empty(); });
}

void SequentialScheduler::Work() {
  while (true) {
    std::shared_ptr<Sequence> seq;
    Clock::time_point submitted;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return quit_ || !waiting_.empty(); });
      if (waiting_.empty()) return;  // quit_
      std::tie(seq, submitted) = std::move(waiting_.front());
      waiting_.pop_front();
      running_ = seq;
    }
    if (absl::Status s = Generate(*seq, submitted); !s.ok()) {
      // The cache may hold anything now: the next request starts from position 0.
      cached_.clear();
      engine_.Reset();
      SequenceEvent end;
      end.final = true;
      end.error = s;
      seq->Push(std::move(end));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_.reset();
      kv_usage_ = 0;  // what the cache keeps for the next prompt's prefix is not in use
    }
    cv_.notify_all();
  }
}

absl::StatusOr<int64_t> SequentialScheduler::FeedPrompt(std::span<const int32_t> prompt, bool want_logits,
                                                        std::vector<float>* logits, int32_t* next) {
  size_t reuse = 0;
  if (reuse_prefix_) {
    const size_t limit = std::min(cached_.size(), prompt.size() - 1);  // the last token is always fed
    while (reuse < limit && cached_[reuse] == prompt[reuse]) ++reuse;
  }
  if (absl::Status s = engine_.Rewind(static_cast<int64_t>(reuse), prompt[reuse]); !s.ok()) return s;
  cached_.assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(reuse));
  std::span<const int32_t> rest = prompt.subspan(reuse);
  if (want_logits) {
    if (rest.size() > 1) {
      if (absl::StatusOr<int32_t> t = engine_.Prefill(rest.first(rest.size() - 1)); !t.ok()) return t.status();
    }
    absl::StatusOr<std::vector<float>> l = engine_.PrefillLogits(rest.last(1));
    if (!l.ok()) return l.status();
    *logits = *std::move(l);
  } else {
    absl::StatusOr<int32_t> t = engine_.Prefill(rest);
    if (!t.ok()) return t.status();
    *next = *t;
  }
  cached_.assign(prompt.begin(), prompt.end());
  return static_cast<int64_t>(reuse);
}

absl::Status SequentialScheduler::Generate(Sequence& seq, Clock::time_point submitted) {
  const SequenceRequest& req = seq.request();
  SequenceEvent end;
  end.final = true;
  end.usage.prompt_tokens = static_cast<int64_t>(req.prompt.size());
  if (seq.cancelled()) {  // the client left while it waited
    end.finish = FinishReason::kCancelled;
    observer_->OnFinished(seq, end.usage, end.finish);
    seq.Push(std::move(end));
    return absl::OkStatus();
  }
  // The GPU chooses greedy tokens; anything else is chosen here from the logits.
  const SamplingSettings& s = req.sampling;
  const bool host_choice =
      !s.greedy() || req.top_logprobs >= 0 || s.presence_penalty != 0 || s.frequency_penalty != 0;
  TokenSampler sampler(s, req.top_logprobs, s.seed ? *s.seed : std::random_device{}());
  std::unique_ptr<models::StreamDecoder> decoder;
  if (tokenizer_) decoder = std::make_unique<models::StreamDecoder>(*tokenizer_);
  runtime::StopMatcher stops(req.stop);
  const std::vector<int32_t> eos = tokenizer_ ? tokenizer_->eos_ids() : std::vector<int32_t>{};

  std::vector<float> logits;
  int32_t next = -1;
  absl::StatusOr<int64_t> reused = FeedPrompt(req.prompt, host_choice, &logits, &next);
  if (!reused.ok()) return reused.status();
  end.usage.cached_tokens = *reused;

  std::vector<int32_t> generated;
  std::deque<int32_t> ahead;  // tokens the GPU loop produced beyond the one looked at (see runtime/generator.cc)
  Clock::time_point last = Clock::now();
  SequenceEvent delta;
  auto publish = [&] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      kv_usage_ = static_cast<double>(engine_.position()) / static_cast<double>(engine_.context());
    }
    if (!delta.text.empty() || !delta.tokens.empty()) seq.Push(std::move(delta));
    delta = SequenceEvent{};
  };
  end.finish = FinishReason::kLength;
  while (true) {
    GeneratedToken token;
    if (host_choice) {
      token = sampler.Choose(logits);
    } else {
      token.id = next;
    }
    const Clock::time_point now = Clock::now();
    if (generated.empty()) {
      observer_->OnFirstToken(std::chrono::duration<double>(now - submitted).count());
    } else {
      observer_->OnToken(std::chrono::duration<double>(now - last).count());
    }
    last = now;
    if (!req.ignore_eos && std::find(eos.begin(), eos.end(), token.id) != eos.end()) {
      end.finish = FinishReason::kStop;
      break;
    }
    generated.push_back(token.id);
    delta.tokens.push_back(token);
    if (decoder) delta.text += stops.Push(decoder->Push(token.id));
    if (stops.stopped()) {
      end.finish = FinishReason::kStop;
      break;
    }
    if (static_cast<int64_t>(generated.size()) >= req.max_tokens) break;
    if (seq.cancelled()) {
      end.finish = FinishReason::kCancelled;
      break;
    }
    if (engine_.position() - static_cast<int64_t>(ahead.size()) >= engine_.context()) break;
    publish();
    if (host_choice) {
      absl::StatusOr<std::vector<float>> l = engine_.DecodeLogits(token.id);
      if (!l.ok()) return l.status();
      logits = *std::move(l);
    } else {
      if (ahead.empty()) {
        absl::StatusOr<std::vector<int32_t>> more =
            engine_.DecodeUpTo(req.max_tokens - static_cast<int64_t>(generated.size()));
        if (!more.ok()) return more.status();
        ahead.assign(more->begin(), more->end());
      }
      next = ahead.front();
      ahead.pop_front();
    }
  }
  if (!ahead.empty()) {
    if (absl::Status st = engine_.Rewind(engine_.position() - static_cast<int64_t>(ahead.size()), next); !st.ok()) {
      return st;
    }
  }
  if (decoder && !stops.stopped()) {
    delta.text += stops.Push(decoder->Flush());
    delta.text += stops.Flush();
  }
  publish();
  // The cache holds the prompt and the generated tokens that were fed (all but the last chosen).
  cached_.insert(cached_.end(), generated.begin(), generated.end());
  cached_.resize(static_cast<size_t>(std::min<int64_t>(engine_.position(), static_cast<int64_t>(cached_.size()))));
  end.usage.completion_tokens = static_cast<int64_t>(generated.size());
  observer_->OnFinished(seq, end.usage, end.finish);
  seq.Push(std::move(end));
  return absl::OkStatus();
}

}  // namespace doppler::serve
