// A pass rewrites a graph; the pass manager runs a named pipeline of them, verifies the graph
// after each, and can show it after any.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace doppler::passes {

class Pass {
 public:
  virtual ~Pass() = default;
  virtual const char* name() const = 0;
  // Rewrites `g` in place; returns whether anything changed. The result must verify.
  virtual absl::StatusOr<bool> Run(graph::Graph& g) const = 0;
};

// Every pass doppler has, by name, and the default pipeline (in order).
std::vector<std::string> PassNames();
std::vector<std::string> DefaultPipeline();
absl::StatusOr<std::unique_ptr<Pass>> MakePass(const std::string& name);

class PassManager {
 public:
  // "default", "none", or a comma-separated list of pass names.
  static absl::StatusOr<PassManager> Parse(const std::string& pipeline);

  // Runs the pipeline, verifying after every pass; `after` sees the graph after each pass.
  absl::Status Run(graph::Graph& g,
                   const std::function<void(const std::string& pass, const graph::Graph& g, bool changed)>& after =
                       {}) const;
  std::vector<std::string> names() const;

 private:
  std::vector<std::shared_ptr<Pass>> passes_;
};

}  // namespace doppler::passes
