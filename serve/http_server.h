// The HTTP side of `doppler serve` (cpp-httplib): OpenAI's routes, /health, /metrics, /tokenize,
// /detokenize and the web page. It listens before the model is loaded (so /health answers 503
// "loading") and serves the API once SetReady hands it the scheduler.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "serve/metrics.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"
#include "serve/scheduler.h"

namespace httplib {
class Server;
class Request;
class Response;
}  // namespace httplib

namespace doppler::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (port() tells which)
  std::string api_key;  // empty: no key needed
  size_t max_body_bytes = 8 << 20;
  int threads = 64;  // connections served at once (streams hold one each)
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, Metrics& metrics);
  ~HttpServer();

  // Binds the socket and starts answering (503 on the API until SetReady).
  absl::Status Start();
  int port() const { return port_; }
  void SetReady(Scheduler* scheduler, ModelInfo model);
  // /health answers 503 from now on (a load balancer stops sending requests).
  void SetDraining() { state_.store(State::kDraining); }
  // Waits until every generation response has been written out (the scheduler may be idle while a
  // stream still sends its last events), at most `limit`; true when none is left.
  bool WaitResponses(std::chrono::milliseconds limit) const;
  void Stop();

 private:
  enum class State { kLoading, kReady, kDraining };
  void Routes();
  void Complete(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  void Stream(const httplib::Request& req, httplib::Response& res, Endpoint endpoint, CompletionRequest request,
              std::shared_ptr<Sequence> seq);
  ResponseBuilder Builder(Endpoint endpoint, const Sequence& seq) const;
  void Tokenize(const httplib::Request& req, httplib::Response& res);
  void Detokenize(const httplib::Request& req, httplib::Response& res);
  void SendError(httplib::Response& res, const ApiError& error);
  bool Ready(httplib::Response& res);

  HttpOptions options_;
  Metrics& metrics_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  int port_ = 0;
  std::atomic<State> state_{State::kLoading};
  std::shared_ptr<std::atomic<int>> in_flight_ = std::make_shared<std::atomic<int>>(0);  // generation responses
  Scheduler* scheduler_ = nullptr;  // set once, before state_ turns kReady
  ModelInfo model_;
};

}  // namespace doppler::serve
