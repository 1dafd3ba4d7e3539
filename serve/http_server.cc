#include "serve/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "serve/json_text.h"
#include "serve/openai_response.h"
#include "serve/web_assets.h"

namespace doppler::serve {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr char kJson[] = "application/json";

bool IsCompletionPath(const std::string& path) {
  return path == "/v1/chat/completions" || path == "/v1/completions";
}

// Routes that need the API key when one is set: everything but the page, /health and /metrics.
bool NeedsKey(const std::string& path) {
  return absl::StartsWith(path, "/v1/") || path == "/tokenize" || path == "/detokenize";
}

// What one generation request's log line reports.
struct RequestLog {
  uint64_t id = 0;
  std::string path;
  Clock::time_point start = Clock::now();
  std::optional<Clock::time_point> first_token;
  Usage usage;
  std::string finish;

  void Print() const {
    const Clock::time_point now = Clock::now();
    const double ttft = first_token ? std::chrono::duration<double>(*first_token - start).count() : 0;
    const double decode = first_token ? std::chrono::duration<double>(now - *first_token).count() : 0;
    const double rate = decode > 0 && usage.completion_tokens > 1 ? (usage.completion_tokens - 1) / decode : 0;
    std::fprintf(stderr,
                 "request %llu %s: prompt %lld tokens (%lld cached), generated %lld, first token %.3f s, %.1f tok/s, "
                 "finish %s\n",
                 static_cast<unsigned long long>(id), path.c_str(), static_cast<long long>(usage.prompt_tokens),
                 static_cast<long long>(usage.cached_tokens), static_cast<long long>(usage.completion_tokens), ttft,
                 rate, finish.c_str());
  }
};

std::string SseEvent(const json& j) { return absl::StrCat("data: ", JsonText(j), "\n\n"); }

// Counts one generation response from its start until it is destroyed (written out, or abandoned).
class InFlight {
 public:
  explicit InFlight(std::shared_ptr<std::atomic<int>> count) : count_(std::move(count)) { ++*count_; }
  ~InFlight() { --*count_; }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  std::shared_ptr<std::atomic<int>> count_;
};

}  // namespace

HttpServer::HttpServer(HttpOptions options, Metrics& metrics)
    : options_(std::move(options)), metrics_(metrics), server_(std::make_unique<httplib::Server>()) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::SendError(httplib::Response& res, const ApiError& error) {
  metrics_.OnRejected(error.status);
  res.status = error.status;
  res.set_content(error.Body(), kJson);
}

bool HttpServer::Ready(httplib::Response& res) {
  const State s = state_.load();
  if (s == State::kReady) return true;
  SendError(res, {503, s == State::kLoading ? "the model is loading; try again shortly" : "the server is shutting down",
                  "server_error", "", "unavailable"});
  return false;
}

absl::Status HttpServer::Start() {
  Routes();
  const int threads = options_.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  server_->set_payload_max_length(options_.max_body_bytes);
  // Debian's cpp-httplib 0.11 listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into
  // its library): a wave of clients connecting at once overflows the accept queue, the kernel drops
  // their SYNs, and each such client waits a second or more for its retry before its request is
  // even read. Listening again on the bound socket raises the backlog (to the kernel's
  // net.core.somaxconn at most).
  int listen_socket = -1;
  server_->set_socket_options([&listen_socket](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_socket = sock;  // the last socket made is the one bound
  });
  port_ = options_.port == 0 ? server_->bind_to_any_port(options_.host)
                             : (server_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  server_->set_socket_options(httplib::default_socket_options);  // the lambda's reference ends here
  if (port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.host, ":", options_.port,
                                               " (in use, or not an address of this machine)"));
  }
  if (listen_socket >= 0 && ::listen(listen_socket, SOMAXCONN) != 0) {
    return absl::InternalError(absl::StrCat("cannot raise the listen backlog of ", options_.host, ":", port_, ": ",
                                            std::strerror(errno)));
  }
  listener_ = std::thread([this] { server_->listen_after_bind(); });
  // httplib's stop() is lost on a server not yet listening, and a Stop() soon after Start() (an
  // error while loading the model) would then wait forever: return once it listens.
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
  while (!server_->is_running() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (listener_.joinable()) {
    server_->stop();
    listener_.join();
  }
}

bool HttpServer::WaitResponses(std::chrono::milliseconds limit) const {
  const Clock::time_point deadline = Clock::now() + limit;
  while (in_flight_->load() > 0) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void HttpServer::SetReady(Scheduler* scheduler, ModelInfo model) {
  scheduler_ = scheduler;
  model_ = std::move(model);
  state_.store(State::kReady);
}

void HttpServer::Routes() {
  httplib::Server& s = *server_;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty() || !NeedsKey(req.path)) return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + options_.api_key) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    SendError(res, {401, "Incorrect API key provided: send it as 'Authorization: Bearer KEY'",
                    "invalid_request_error", "", "invalid_api_key"});
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors httplib answers itself (unknown route, body over the limit) as OpenAI error objects.
  s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e{res.status, absl::StrCat("HTTP ", res.status), "invalid_request_error", "", ""};
    if (res.status == 404) {
      e.message = absl::StrCat("no route ", req.method, " ", req.path);
      e.code = "not_found";
    } else if (res.status == 413) {
      e.message = absl::StrCat("the request body is larger than the limit of ", options_.max_body_bytes, " bytes");
      e.code = "request_too_large";
    }
    metrics_.OnRejected(e.status);
    res.set_content(e.Body(), kJson);
  });
  s.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    // Generations log their own line (RequestLog); probes that succeed are not worth one.
    if (res.status < 400 && (IsCompletionPath(req.path) || req.path == "/health" || req.path == "/metrics")) return;
    std::fprintf(stderr, "request - %s %s: %d\n", req.method.c_str(), req.path.c_str(), res.status);
  });

  for (const WebAsset& asset : WebAssets()) {
    s.Get(std::string(asset.path), [asset](const httplib::Request&, httplib::Response& res) {
      res.set_content(asset.body.data(), asset.body.size(), std::string(asset.content_type).c_str());
    });
  }
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const State st = state_.load();
    res.status = st == State::kReady ? 200 : 503;
    res.set_content(JsonText({{"status", st == State::kReady ? "ok" : st == State::kLoading ? "loading" : "draining"}}),
                    kJson);
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    const SchedulerLoad load = state_.load() == State::kLoading ? SchedulerLoad{} : scheduler_->Load();
    res.set_content(metrics_.Text(load), "text/plain; version=0.0.4");
  });
  auto model_object = [this] {
    return json{{"id", model_.id}, {"object", "model"}, {"created", 0}, {"owned_by", "doppler"},
                {"max_model_len", model_.context}};
  };
  s.Get("/v1/models", [this, model_object](const httplib::Request&, httplib::Response& res) {
    if (!Ready(res)) return;
    res.set_content(JsonText({{"object", "list"}, {"data", json::array({model_object()})}}), kJson);
  });
  s.Get(R"(/v1/models/(.+))", [this, model_object](const httplib::Request& req, httplib::Response& res) {
    if (!Ready(res)) return;
    if (req.matches[1] != model_.id) {
      return SendError(res, {404, absl::StrCat("The model '", req.matches[1].str(), "' does not exist: this server serves '",
                                               model_.id, "'"),
                             "invalid_request_error", "model", "model_not_found"});
    }
    res.set_content(JsonText(model_object()), kJson);
  });
  s.Post("/v1/chat/completions",
         [this](const httplib::Request& req, httplib::Response& res) { Complete(req, res, Endpoint::kChat); });
  s.Post("/v1/completions",
         [this](const httplib::Request& req, httplib::Response& res) { Complete(req, res, Endpoint::kCompletions); });
  s.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { Tokenize(req, res); });
  s.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) { Detokenize(req, res); });
}

ResponseBuilder HttpServer::Builder(Endpoint endpoint, const Sequence& seq) const {
  return ResponseBuilder(endpoint, absl::StrCat(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-", seq.id()),
                         std::time(nullptr), model_.id, model_.tokenizer, seq.request().top_logprobs >= 0);
}

void HttpServer::Complete(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  if (!Ready(res)) return;
  InFlight counted(in_flight_);
  std::variant<CompletionRequest, ApiError> parsed = ParseCompletionRequest(endpoint, req.body, model_);
  if (const ApiError* e = std::get_if<ApiError>(&parsed)) return SendError(res, *e);
  CompletionRequest request = std::get<CompletionRequest>(std::move(parsed));
  absl::StatusOr<std::shared_ptr<Sequence>> seq = scheduler_->Submit(request.sequence);
  if (!seq.ok()) return SendError(res, FromStatus(seq.status()));
  if (request.stream) return Stream(req, res, endpoint, std::move(request), *std::move(seq));

  RequestLog log{(*seq)->id(), req.path};
  ResponseBuilder builder = Builder(endpoint, **seq);
  std::string text;
  std::vector<GeneratedToken> tokens;
  while (true) {
    std::optional<SequenceEvent> e = (*seq)->Next(std::chrono::milliseconds(1000));
    if (!e) continue;
    if (!log.first_token && !e->tokens.empty()) log.first_token = Clock::now();
    text += e->text;
    tokens.insert(tokens.end(), e->tokens.begin(), e->tokens.end());
    if (!e->final) continue;
    if (!e->error.ok()) return SendError(res, FromStatus(e->error));
    log.usage = e->usage;
    log.finish = FinishReasonName(e->finish);
    log.Print();
    res.set_content(JsonText(builder.Whole(text, tokens, e->finish, e->usage)), kJson);
    return;
  }
}

void HttpServer::Stream(const httplib::Request& req, httplib::Response& res, Endpoint endpoint,
                        CompletionRequest request, std::shared_ptr<Sequence> seq) {
  struct State {
    std::shared_ptr<Sequence> seq;
    ResponseBuilder builder;
    bool include_usage;
    RequestLog log;
    std::shared_ptr<InFlight> counted;  // until the stream is written out: the lambdas hold the state
    bool done = false;
  };
  auto st = std::make_shared<State>(State{seq, Builder(endpoint, *seq), request.include_usage,
                                          RequestLog{seq->id(), req.path}, std::make_shared<InFlight>(in_flight_)});
  st->log.usage.prompt_tokens = static_cast<int64_t>(seq->request().prompt.size());
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        std::optional<SequenceEvent> e = st->seq->Next(std::chrono::milliseconds(500));
        // A comment line while nothing comes (queued, or a slow step), so a client that left is
        // noticed by the failed write and its sequence cancelled.
        if (!e) return write(": waiting\n\n");
        if (!st->log.first_token && !e->tokens.empty()) st->log.first_token = Clock::now();
        st->log.usage.completion_tokens += static_cast<int64_t>(e->tokens.size());  // for a cancelled stream's log line
        if (!e->final) return write(SseEvent(st->builder.Chunk(e->text, e->tokens, std::nullopt, st->include_usage)));
        st->done = true;
        if (!e->error.ok()) {
          write(SseEvent(json::parse(FromStatus(e->error).Body())));
          sink.done();
          return true;
        }
        st->log.usage = e->usage;
        st->log.finish = FinishReasonName(e->finish);
        st->log.Print();
        bool ok = write(SseEvent(st->builder.Chunk(e->text, e->tokens, e->finish, st->include_usage)));
        if (st->include_usage) ok = ok && write(SseEvent(st->builder.UsageChunk(e->usage)));
        ok = ok && write("data: [DONE]\n\n");
        sink.done();
        return ok;
      },
      [st](bool) {
        if (st->done) return;
        st->seq->Cancel();  // the client went away mid-stream
        st->log.finish = "cancelled (the client disconnected)";
        st->log.Print();
      });
}

void HttpServer::Tokenize(const httplib::Request& req, httplib::Response& res) {
  if (!Ready(res)) return;
  std::variant<json, ApiError> body = ParseJsonObject(req.body);
  if (const ApiError* e = std::get_if<ApiError>(&body)) return SendError(res, *e);
  const json& j = std::get<json>(body);
  const char* field = j.contains("content") ? "content" : "prompt";
  if (!j.contains(field) || !j[field].is_string()) {
    return SendError(res, InvalidField("content", "'content' must be a string (the text to tokenize)", "invalid_type"));
  }
  bool add_special = false;
  if (j.contains("add_special")) {
    if (!j["add_special"].is_boolean()) return SendError(res, InvalidField("add_special", "'add_special' must be a boolean", "invalid_type"));
    add_special = j["add_special"].get<bool>();
  }
  if (!model_.tokenizer) return SendError(res, InvalidField(field, "this model has no tokenizer"));
  absl::StatusOr<std::vector<int32_t>> ids = model_.tokenizer->Encode(j[field].get<std::string>(), add_special);
  if (!ids.ok()) return SendError(res, InvalidField(field, std::string(ids.status().message())));
  res.set_content(JsonText({{"tokens", *ids}, {"count", ids->size()}}), kJson);
}

void HttpServer::Detokenize(const httplib::Request& req, httplib::Response& res) {
  if (!Ready(res)) return;
  std::variant<json, ApiError> body = ParseJsonObject(req.body);
  if (const ApiError* e = std::get_if<ApiError>(&body)) return SendError(res, *e);
  const json& j = std::get<json>(body);
  if (!j.contains("tokens") || !j["tokens"].is_array()) {
    return SendError(res, InvalidField("tokens", "'tokens' must be an array of token ids", "invalid_type"));
  }
  std::vector<int32_t> ids;
  for (const json& id : j["tokens"]) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= model_.vocab_size) {
      return SendError(res, InvalidField("tokens", absl::StrCat("'tokens' must hold token ids in [0, ", model_.vocab_size, ")")));
    }
    ids.push_back(id.get<int32_t>());
  }
  if (!model_.tokenizer) return SendError(res, InvalidField("tokens", "this model has no tokenizer"));
  res.set_content(JsonText({{"content", model_.tokenizer->Decode(ids, /*skip_special=*/false)}}), kJson);
}

}  // namespace doppler::serve
