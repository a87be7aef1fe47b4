// ServingStack: everything `kiln serve` runs, assembled from a KilnConfig: the backend, the model
// (model.path must name a checkpoint; `kiln serve` resolves the embedded demo model first), tokenizer and chat template, the engine
// actor, and the HTTP server listening on server.host:server.port (port 0 picks a free one).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "config/kiln_config.h"
#include "core/status.h"

namespace kiln {

struct ServerContext;

class ServingStack {
 public:
  // Loads everything and starts listening; returns once requests can be served. `config_report`
  // is what GET /v1/config answers (each field's value and source).
  // `capability_report` decides which routes the stable profile admits (route_gates.h); null: the
  // report built into the binary. `backend` (tests) is served instead of the one model.backend names.
  static Result<std::unique_ptr<ServingStack>> start(const KilnConfig& config, nlohmann::json config_report = nullptr,
                                                     nlohmann::json capability_report = nullptr,
                                                     std::unique_ptr<Backend> backend = nullptr);
  virtual ~ServingStack() = default;  // stops the server and the engine

  virtual int port() const = 0;               // the bound port
  virtual std::string base_url() const = 0;   // "http://HOST:PORT"
  virtual std::string model_id() const = 0;   // the served model id (the `model` field)
  // What the routes share (the engine actor, tokenizer, training environment): `kiln bench train`
  // drives an online run through it as a job would.
  virtual const ServerContext& context() const = 0;
  virtual void wait() = 0;                    // blocks until stop()
  virtual void stop() = 0;                    // thread-safe; requests in flight are cancelled
};

}  // namespace kiln
