#include "serve/batch_scheduler.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"

namespace doppler::serve {

BatchScheduler::BatchScheduler(runtime::BatchEngine& engine, const tokenizers::Tokenizer* tokenizer, int64_t max_waiting,
                               SchedulerObserver* observer)
    : engine_(engine), tokenizer_(tokenizer), max_waiting_(max_waiting), observer_(observer) {
  if (tokenizer_) eos_ = tokenizer_->eos_ids();
  worker_ = std::thread([this] { Work(); });
}

BatchScheduler::~BatchScheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
    cancel_all_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

absl::StatusOr<std::shared_ptr<Sequence>> BatchScheduler::Submit(SequenceRequest request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) return absl::UnavailableError("the server is shutting down");
  // Those not yet running: beyond the engine's free places, at most max_waiting.
  const int64_t queued = load_.waiting + static_cast<int64_t>(submitted_.size());
  const int64_t free_places = std::max<int64_t>(0, engine_.max_sequences() - load_.running);
  if (queued >= max_waiting_ + free_places) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the server is busy: ", std::max<int64_t>(0, queued - free_places),
                     " requests are waiting already; try again later"));
  }
  auto seq = std::make_shared<Sequence>(next_id_++, std::move(request));
  submitted_.emplace_back(seq, Clock::now());
  cv_.notify_all();
  return seq;
}

SchedulerLoad BatchScheduler::Load() const {
  std::lock_guard<std::mutex> lock(mu_);
  SchedulerLoad l = load_;
  l.waiting += static_cast<int64_t>(submitted_.size());
  return l;
}

void BatchScheduler::StopAccepting() {
  std::lock_guard<std::mutex> lock(mu_);
  accepting_ = false;
}

void BatchScheduler::CancelAll() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_all_ = true;
  }
  cv_.notify_all();
}

bool BatchScheduler::WaitIdle(std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, limit, [&] { return submitted_.empty() && load_.running == 0 && load_.waiting == 0; });
}

void BatchScheduler::Join(std::deque<std::pair<std::shared_ptr<Sequence>, Clock::time_point>> joining) {
  for (auto& [seq, submitted] : joining) {
    const SequenceRequest& req = seq->request();
    // The generation stops where the context is full (finish reason "length").
    const int64_t room = engine_.context() - static_cast<int64_t>(req.prompt.size()) + 1;
    const SamplingSettings& s = req.sampling;
    const bool host_choice = !s.greedy() || req.top_logprobs >= 0 || s.presence_penalty != 0 || s.frequency_penalty != 0;
    absl::StatusOr<int> id =
        engine_.Add(req.prompt, std::min(req.max_tokens, std::max<int64_t>(room, 1)), /*want_logits=*/host_choice);
    if (!id.ok()) {
      SequenceEvent end;
      end.final = true;
      end.usage.prompt_tokens = static_cast<int64_t>(req.prompt.size());
      end.error = id.status();
      seq->Push(std::move(end));
      continue;
    }
    Active& a = active_[*id];
    a.seq = seq;
    a.submitted = a.last = submitted;
    a.host_choice = host_choice;
    a.sampler = std::make_unique<TokenSampler>(s, req.top_logprobs, s.seed ? *s.seed : std::random_device{}());
    if (tokenizer_) a.decoder = std::make_unique<tokenizers::StreamDecoder>(*tokenizer_);
    a.stops = std::make_unique<runtime::StopMatcher>(req.stop);
  }
}

void BatchScheduler::Finish(int id, FinishReason reason, absl::Status error) {
  Active& a = active_.at(id);
  SequenceEvent end;
  end.final = true;
  end.finish = reason;
  end.error = std::move(error);
  end.usage.prompt_tokens = static_cast<int64_t>(a.seq->request().prompt.size());
  end.usage.completion_tokens = a.generated;
  end.usage.cached_tokens = engine_.shared_prompt_tokens(id);
  if (end.error.ok() && a.decoder && !a.stops->stopped()) {
    end.text = a.stops->Push(a.decoder->Flush());
    end.text += a.stops->Flush();
  }
  if (end.error.ok()) observer_->OnFinished(*a.seq, end.usage, end.finish);
  a.seq->Push(std::move(end));
  engine_.Remove(id);
  active_.erase(id);
}

void BatchScheduler::Take(int id, runtime::StepToken& step) {
  Active& a = active_.at(id);
  const SequenceRequest& req = a.seq->request();
  GeneratedToken token;
  token.id = step.token;
  if (a.host_choice) {
    token = a.sampler->Choose(step.logits);
    (void)engine_.SetNext(id, token.id);
  }
  const Clock::time_point now = Clock::now();
  if (a.generated == 0) {
    observer_->OnFirstToken(std::chrono::duration<double>(now - a.submitted).count());
  } else {
    observer_->OnToken(std::chrono::duration<double>(now - a.last).count());
  }
  a.last = now;
  if (!req.ignore_eos && std::find(eos_.begin(), eos_.end(), token.id) != eos_.end()) {
    Finish(id, FinishReason::kStop);
    return;
  }
  ++a.generated;
  SequenceEvent delta;
  delta.tokens.push_back(token);
  if (a.decoder) delta.text = a.stops->Push(a.decoder->Push(token.id));
  const bool stopped = a.stops->stopped();
  a.seq->Push(std::move(delta));
  if (stopped) {
    Finish(id, FinishReason::kStop);
  } else if (a.generated >= req.max_tokens || step.position >= engine_.context()) {
    Finish(id, FinishReason::kLength);
  }
}

void BatchScheduler::Work() {
  while (true) {
    std::deque<std::pair<std::shared_ptr<Sequence>, Clock::time_point>> joining;
    bool cancel_all = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return quit_ || cancel_all_ || !submitted_.empty() || !active_.empty(); });
      joining.swap(submitted_);
      // Until the step below ends and the engine's counts replace it, the joining requests wait:
      // counted so, Submit never takes more than the engine's places and the queue hold.
      load_.waiting += static_cast<int64_t>(joining.size());
      cancel_all = cancel_all_;
      cancel_all_ = false;
      if (quit_ && active_.empty() && joining.empty()) return;
    }
    Join(std::move(joining));
    // Requests whose client left (or all of them, at shutdown) end before the step.
    std::vector<int> leaving;
    for (const auto& [id, a] : active_) {
      if (cancel_all || a.seq->cancelled()) leaving.push_back(id);
    }
    for (int id : leaving) Finish(id, FinishReason::kCancelled);
    if (!active_.empty()) {
      absl::StatusOr<std::vector<runtime::StepToken>> step = engine_.Step();
      if (!step.ok()) {
        // The engine failed: every request in it ends with the error.
        std::vector<int> all;
        for (const auto& [id, a] : active_) all.push_back(id);
        for (int id : all) Finish(id, FinishReason::kStop, step.status());
      } else {
        for (runtime::StepToken& t : *step) {
          if (active_.count(t.sequence) > 0) Take(t.sequence, t);
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      load_.running = engine_.running();
      load_.waiting = engine_.waiting();
      load_.kv_usage = engine_.pool_usage();
    }
    cv_.notify_all();
  }
}

}  // namespace doppler::serve
