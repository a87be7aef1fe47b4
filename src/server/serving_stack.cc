#include "server/serving_stack.h"
#include "server/structured_output.h"

#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <httplib.h>

#include "backend/device_memory_limit.h"
#include "backend/registry.h"
#include "core/atomic_publish.h"
#include "model/qwen35.h"
#include "core/sha256.h"
#include "eval/eval_jobs.h"
#include "server/eval_service.h"
#include "server/memory_plan.h"
#include "server/remote_teacher.h"
#include "server/request_log.h"
#include "server/request_guard.h"
#include "server/request_log_capture.h"
#include "server/route_support.h"
#include "server/routes.h"
#include "server/webhook.h"

namespace kiln {

namespace {

namespace fs = std::filesystem;

Result<std::unique_ptr<Backend>> open_backend(const std::string& name, const VulkanSection& vulkan) {
  if (name != "auto") {
    auto b = create_backend(name, BackendOptions{vulkan.device, vulkan.validation});
    if (b.ok() && !b.value()->identity().warning.empty())
      std::fprintf(stderr, "kiln: backend %s: %s\n", name.c_str(), b.value()->identity().warning.c_str());
    return b;
  }
  std::vector<std::string> notes;
  auto b = create_auto_backend(BackendOptions{vulkan.device, vulkan.validation}, notes);
  for (const std::string& n : notes)
    std::fprintf(stderr, "kiln: backend auto: %s; serving on %s\n", n.c_str(),
                 b.ok() ? b.value()->identity().name.c_str() : "nothing");
  return b;
}

// "Qwen/Qwen3.5-4B" -> "Qwen--Qwen3.5-4B": a served id as one folder name.
std::string folder_name(std::string id) {
  std::string out;
  for (char c : id) out += c == '/' ? std::string("--") : std::string(1, c);
  return out.empty() || out == "." || out == ".." ? "model" : out;
}

// server.state_dir, else ${XDG_CACHE_HOME:-~/.cache}/kiln/state/<model id>; created and checked
// writable, so that a read-only model folder is no obstacle and a bad one fails at startup.
Result<std::string> open_state_dir(const KilnConfig& cfg, const std::string& model_id) {
  std::string dir = cfg.server.state_dir;
  if (dir.empty()) {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    if ((!xdg || !*xdg) && (!home || !*home))
      return failed_precondition("server.state_dir is empty and neither XDG_CACHE_HOME nor HOME is set: name a folder");
    const fs::path cache = xdg && *xdg ? fs::path(xdg) : fs::path(home) / ".cache";
    dir = (cache / "kiln" / "state" / folder_name(model_id)).string();
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error("server.state_dir: cannot create " + dir + ": " + ec.message());
  const fs::path probe = fs::path(dir) / (".write-probe-" + std::to_string(::getpid()));
  if (FILE* f = std::fopen(probe.c_str(), "w")) {
    std::fclose(f);
    fs::remove(probe, ec);
  } else {
    return io_error("server.state_dir: " + dir + " is not writable: " + std::strerror(errno));
  }
  return dir;
}

uint64_t weight_file_bytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir, ec))
    if (f.path().extension() == ".safetensors") n += f.file_size(ec);
  return n;
}

// The device's memory plan (server/memory_plan.h): K/V blocks, the configured count or as many
// as memory.memory_fraction of the device (host: of the RAM available now) holds after the
// weights, the GDN slots and a training job of the training.reserve_* shape, capped at what
// max_decode_batch sequences of the full context could use; and the room left for a job.
MemoryPlan plan_server_memory(const KilnConfig& cfg, const Backend& backend, const Qwen35Model& model,
                              const std::string& dir, int64_t context, int64_t slots) {
  const ModelConfig& mc = model.config();
  MemoryPlanInputs in;
  in.device_bytes = backend.capabilities().storage.device_memory_bytes;
  in.host_available_bytes = static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  auto limit = device_memory_limit_from_env();
  in.device_label = backend.identity().name == "cuda" && limit.ok() && *limit && (*limit)->limit_bytes == in.device_bytes
                        ? "the " + format_gib(in.device_bytes) + " limit (" + kCudaMemoryLimitEnv + ")"
                        : "the " + format_gib(in.device_bytes) + " device";
  in.memory_fraction = cfg.memory.memory_fraction;
  const uint64_t arena = model.weights().arena_bytes;
  in.weight_bytes = static_cast<int64_t>(arena > 0 ? arena : weight_file_bytes(dir));
  in.slot_bytes = ModelState::slot_bytes_for(mc);
  in.slots = slots;
  in.block_bytes = ModelState::block_bytes_for(mc, model.kv_dtype());
  const int64_t per_seq = (context + ModelState::kBlockSize - 1) / ModelState::kBlockSize;
  in.max_blocks = per_seq * cfg.server.max_decode_batch;
  in.min_blocks = per_seq > 0 ? std::min<int64_t>(per_seq, 64) : 1;
  in.configured_kv_blocks = cfg.memory.kv_blocks;
  const TrainingSection& t = cfg.training;
  if (in.device_bytes > 0 && backend.capabilities().training.supported && t.reserve_sequences > 0) {
    TrainJobShape job;
    job.sequence_tokens.assign(static_cast<size_t>(t.reserve_sequences), t.reserve_sequence_tokens);
    job.lora.rank = t.reserve_lora_rank;
    job.kv_dtype = model.kv_dtype();
    in.training_reserve_bytes = estimate_train_memory(mc, job).total();
  }
  return plan_memory(in);
}

class Stack final : public ServingStack {
 public:
  ~Stack() override { stop(); }

  Status open(const KilnConfig& cfg) {
    ctx_.config = cfg;
    const std::string& dir = cfg.model.path;
    if (dir.empty()) return invalid_argument("model.path is empty: name a checkpoint directory (--model DIR)");
    KILN_ASSIGN_OR_RETURN(GuardOptions guard, guard_options(cfg));
    guard_ = std::make_unique<RequestGuard>(std::move(guard));
    ctx_.model_id = cfg.model.served_model_id.empty() ? fs::path(dir).lexically_normal().filename().string()
                                                      : cfg.model.served_model_id;
    if (ctx_.model_id.empty()) ctx_.model_id = fs::absolute(dir).parent_path().filename().string();
    KILN_ASSIGN_OR_RETURN(ctx_.state_dir, open_state_dir(cfg, ctx_.model_id));
    ctx_.adapter_dir = cfg.model.adapter_dir.empty() ? (fs::path(ctx_.state_dir) / "adapters").string() : cfg.model.adapter_dir;
    ctx_.data_dir = cfg.training.data_dir.empty() ? (fs::path(ctx_.state_dir) / "datasets").string() : cfg.training.data_dir;
    std::fprintf(stderr, "kiln: state in %s (adapters in %s, datasets in %s)\n", ctx_.state_dir.c_str(),
                 ctx_.adapter_dir.c_str(), ctx_.data_dir.c_str());
    if (std::error_code ec; cfg.model.adapter_dir.empty() && fs::is_directory(fs::path(dir) / "adapters", ec))
      std::fprintf(stderr, "kiln: %s/adapters is not read: adapters live in %s (set model.adapter_dir to use the other)\n",
                   dir.c_str(), ctx_.adapter_dir.c_str());
    if (!backend_) {
      KILN_ASSIGN_OR_RETURN(backend_, open_backend(cfg.model.backend, cfg.vulkan));
    }
    ctx_.backend = backend_->identity().name;
    ctx_.gates = RouteGates::from_report(capability_report_, ctx_.backend);
    ctx_.backend_impl = backend_.get();
    KILN_ASSIGN_OR_RETURN(model_, Qwen35Model::load(dir, *backend_));
    if (model_->unused_tensors() > 0)
      std::fprintf(stderr, "kiln: %zu tensors of the checkpoint are not read: the vision tower (Kiln serves the text model) "
                           "and the MTP head (no speculative decoding)\n", model_->unused_tensors());
    if (cfg.memory.kv_cache_fp8) {
      Status s = model_->set_kv_dtype(DType::kF8E4M3);
      if (!s.ok()) return s.with_context("memory.kv_cache_fp8");
    }
    const std::string tok_dir = cfg.model.tokenizer_path.empty() ? dir : cfg.model.tokenizer_path;
    {
      auto tok = Tokenizer::load(tok_dir);
      if (!tok.ok()) return tok.status().with_context("model.tokenizer_path");
      tokenizer_ = std::make_unique<Tokenizer>(std::move(*tok));
      auto hash = tokenizer_content_sha256(tok_dir);
      if (!hash.ok()) return hash.status().with_context("model.tokenizer_path");
      ctx_.tokenizer_sha256 = std::move(*hash);
    }
    if (auto t = ChatTemplate::load(tok_dir); t.ok()) {
      template_ = std::make_unique<ChatTemplate>(std::move(*t));
    } else {
      std::fprintf(stderr, "kiln: no chat template (%s): /v1/chat/completions will answer 400\n",
                   t.status().to_string().c_str());
    }
    const ModelConfig& mc = model_->config();
    ctx_.vocab_size = mc.vocab_size;
    ctx_.tokenizer = tokenizer_.get();
    ctx_.chat_template = template_.get();
    if (auto id = tokenizer_->token_to_id("<think>")) ctx_.think_open_id = *id;
    if (auto id = tokenizer_->token_to_id("</think>")) ctx_.think_close_id = *id;
    {
      // A structured output may end only where the model's end-of-text ids would end it.
      std::vector<int32_t> stops;
      for (int64_t id : mc.eos_token_ids)
        if (id >= 0 && id < mc.vocab_size) stops.push_back(static_cast<int32_t>(id));
      structured_ = std::make_unique<StructuredOutputs>(*tokenizer_, mc.vocab_size, std::move(stops));
      ctx_.structured = structured_.get();
    }

    const int64_t context = cfg.model.max_context > 0 ? cfg.model.max_context : 32768;
    EngineConfig ec;
    ec.scheduler.max_batch_tokens = cfg.server.max_batch_tokens;
    ec.scheduler.max_running = cfg.server.max_decode_batch;
    ec.scheduler.max_queue = cfg.server.max_queued_requests;
    ec.snapshot_slots = cfg.prefix_cache.enabled ? 16 : 0;
    // The engine's slots: its sequences, the prefix cache's snapshots, one for replay's padding rows.
    ctx_.memory = plan_server_memory(cfg, *backend_, *model_, dir, context,
                                     cfg.server.max_decode_batch + ec.snapshot_slots + 1);
    ec.kv_blocks = ctx_.memory.kv_blocks;
    ec.prefix_cache.enabled = cfg.prefix_cache.enabled;
    ec.prefix_cache.max_blocks = cfg.prefix_cache.max_blocks;
    ec.prefix_cache.max_bytes = cfg.prefix_cache.max_bytes;
    ec.channel_capacity = static_cast<size_t>(cfg.batching.channel_capacity);
    ec.model_identity = ctx_.model_id + "@" + fs::absolute(dir).string();
    // Adapter uploads, and every other device call of the routes and jobs, run on the engine's
    // thread between cycles (actor_ is made below, before anything can ask).
    const DeviceRunner on_engine = [this](const std::function<Status()>& work) {
      return actor_ ? actor_->run_between_cycles(work) : failed_precondition("the engine is not running");
    };
    ctx_.train_env.run_on_device = on_engine;
    adapters_ = std::make_unique<AdapterRegistry>(mc, backend_->storage(), on_engine);
    adapters_->set_limits(cfg.server.max_loaded_adapters, cfg.server.max_adapter_memory_bytes);
    ec.adapters = adapters_.get();
    ctx_.adapters = adapters_.get();
    ctx_.max_context = std::min(context, ec.kv_blocks * ModelState::kBlockSize);
    ctx_.kv_dtype = std::string(dtype_name(model_->kv_dtype()));
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::create(*model_, ec));
    actor_ = std::make_unique<EngineActor>(std::move(engine));
    ctx_.actor = actor_.get();
    start_training(cfg, dir);
    // What publications a crash interrupted left, cleared before anything writes there.
    for (const std::string& d : {ctx_.adapter_dir, suites_->dir(), ctx_.data_dir})
      if (auto swept = sweep_staging(d); !swept.ok() || !swept->summary().empty())
        std::fprintf(stderr, "kiln: %s: %s\n", d.c_str(), swept.ok() ? swept->summary().c_str() : swept.status().to_string().c_str());
    KILN_RETURN_IF_ERROR(open_request_log(cfg));
    std::fprintf(stderr,
                 "kiln: model '%s' from %s on %s: %lld layers, vocabulary %lld; %lld K/V blocks (%.1f MiB, %s), "
                 "context %lld tokens, up to %lld sequences\n",
                 ctx_.model_id.c_str(), dir.c_str(), ctx_.backend.c_str(), static_cast<long long>(mc.num_layers),
                 static_cast<long long>(mc.vocab_size), static_cast<long long>(ec.kv_blocks),
                 static_cast<double>(ec.kv_blocks * ModelState::block_bytes_for(mc, model_->kv_dtype())) / (1 << 20),
                 std::string(dtype_name(model_->kv_dtype())).c_str(),
                 static_cast<long long>(ctx_.max_context), static_cast<long long>(cfg.server.max_decode_batch));
    if (ctx_.memory.device_bytes > 0)
      std::fprintf(stderr, "kiln: memory plan: %s of %s for weights %s, GDN slots %s, K/V %s; %s left for a training job\n",
                   format_gib(static_cast<uint64_t>(ctx_.memory.planned_bytes)).c_str(), ctx_.memory.device_label.c_str(),
                   format_gib(static_cast<uint64_t>(ctx_.memory.weight_bytes)).c_str(),
                   format_gib(static_cast<uint64_t>(ctx_.memory.slot_bytes)).c_str(),
                   format_gib(static_cast<uint64_t>(ctx_.memory.kv_bytes)).c_str(),
                   format_gib(static_cast<uint64_t>(ctx_.memory.training_room_bytes)).c_str());
    if (const uint64_t arena = model_->weights().arena_bytes; arena > 0)
      std::fprintf(stderr, "kiln: weights in one block of %s memory, %.2f GiB\n", ctx_.backend.c_str(),
                   static_cast<double>(arena) / (1 << 30));
    return listen();
  }

  // logging.request_log: rotated at a fraction of the cap (RequestLog::kRotateFraction).
  Status open_request_log(const KilnConfig& cfg) {
    if (!cfg.logging.request_log) return {};
    RequestLogOptions o;
    o.dir = cfg.logging.request_log_dir.empty() ? (fs::path(ctx_.state_dir) / "request-log").string()
                                                : cfg.logging.request_log_dir;
    o.max_bytes = cfg.logging.request_log_max_bytes;
    auto log = RequestLog::open(o);
    if (!log.ok()) return log.status().with_context("logging.request_log_dir");
    request_log_ = std::move(*log);
    ctx_.request_log = request_log_.get();
    std::fprintf(stderr, "kiln: request log in %s (rotated every %lld bytes, at most %lld bytes)\n", o.dir.c_str(),
                 static_cast<long long>(request_log_->rotate_bytes()), static_cast<long long>(o.max_bytes));
    return {};
  }

  void set_config_report(nlohmann::json report) { ctx_.config_report = std::move(report); }
  void set_capability_report(nlohmann::json report) { capability_report_ = std::move(report); }
  void set_backend(std::unique_ptr<Backend> backend) { backend_ = std::move(backend); }

  // The training queue: each job's device work runs on the engine's thread between serving cycles
  // (train_env.run_on_device); a job's end is posted to training.webhook_url when one is set.
  void start_training(const KilnConfig& cfg, const std::string& dir) {
    ctx_.train_env.model = model_.get();
    ctx_.train_env.registry = adapters_.get();
    ctx_.train_env.adapter_dir = ctx_.adapter_dir;
    auto config_hash = sha256_file((fs::path(dir) / "config.json").string());
    ctx_.train_env.base_model = {{"model_id", ctx_.model_id},
                                 {"path", fs::absolute(dir).string()},
                                 {"config_sha256", config_hash.ok() ? nlohmann::json(config_hash->sha256) : nlohmann::json(nullptr)},
                                 {"backend", ctx_.backend}};
    const std::string url = cfg.training.webhook_url;
    jobs_ = std::make_unique<JobQueue>(cfg.training.max_queued_jobs, [url](const JobInfo& job) {
      std::fprintf(stderr, "kiln: training job %s (%s) %s%s%s\n", job.id.c_str(), job.type.c_str(),
                   job_state_name(job.state), job.error.empty() ? "" : ": ", job.error.c_str());
      if (url.empty()) return;
      if (Status st = post_webhook(url, webhook_body(job)); !st.ok())
        std::fprintf(stderr, "kiln: training.webhook_url: %s\n", st.to_string().c_str());
    });
    ctx_.training = jobs_.get();
    // Eval suites live beside the adapters; eval jobs run one at a time on their own queue.
    suites_ = std::make_unique<SuiteStore>((fs::path(ctx_.state_dir) / "eval-suites").string());
    evals_ = std::make_unique<EvalJobs>(*suites_, make_eval_generate(ctx_), cfg.training.max_queued_jobs);
    ctx_.eval_suites = suites_.get();
    ctx_.evals = evals_.get();
    ServerContext* c = &ctx_;
    ctx_.train_env.post_eval = [c](const std::string& suite, const std::string& path, const std::string& name,
                                   const std::atomic<bool>& cancel) { return run_post_eval(*c, suite, path, name, cancel); };
  }

  int port() const override { return port_; }
  const ServerContext& context() const override { return ctx_; }
  std::string base_url() const override { return "http://" + ctx_.config.server.host + ":" + std::to_string(port_); }
  std::string model_id() const override { return ctx_.model_id; }
  void wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    stopped_cv_.wait(lock, [this] { return stopped_; });
  }
  void stop() override {
    if (ctx_.stopping.exchange(true)) return;
    if (server_) server_->stop();  // handlers in flight see `stopping` and cancel
    if (listener_.joinable()) listener_.join();
    jobs_.reset();   // cancels a running job at its next step (its steps need the actor)
    evals_.reset();  // after training (a job's post_eval waits on it), before the actor
    actor_.reset();  // cancels what is still running
    ctx_.request_log = nullptr;
    request_log_.reset();  // writes the rows still queued
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    stopped_cv_.notify_all();
  }

 private:
  Status listen() {
    // A client that goes away mid-write must not kill the process.
    std::signal(SIGPIPE, SIG_IGN);
    server_ = std::make_unique<httplib::Server>();
    const auto& s = ctx_.config.server;
    const size_t threads = s.http_threads > 0 ? static_cast<size_t>(s.http_threads)
                                              : static_cast<size_t>(std::max<int64_t>(8, 2 * s.max_decode_batch));
    server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    server_->set_payload_max_length(static_cast<size_t>(guard_->max_body_bytes()));
    guard_->install(*server_, ctx_.metrics);
    server_->set_tcp_nodelay(true);  // stream chunks leave at once
    server_->set_read_timeout(30, 0);
    server_->set_write_timeout(30, 0);
    ServerContext& ctx = ctx_;
    auto timed = [&ctx](const char* route, auto fn) {
      return [&ctx, route, fn](const httplib::Request& req, httplib::Response& res) {
        const auto t0 = std::chrono::steady_clock::now();
        ctx.metrics.active_requests(1);
        auto logged = begin_request_log(ctx, route, req);
        fn(req, res);
        end_request_log(std::move(logged), res);
        auto finished = [&ctx, route, t0](int status) {
          ctx.metrics.active_requests(-1);
          ctx.metrics.request_finished(route, status,
                                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        };
        if (!res.content_provider_) return finished(res.status);
        // A stream ends after the handler returns: count it when its provider is released
        // (499: the client went away first).
        auto inner = res.content_provider_resource_releaser_;
        res.content_provider_resource_releaser_ = [inner, finished](bool ok) {
          if (inner) inner(ok);
          finished(ok ? 200 : 499);
        };
      };
    };
    server_->Post("/v1/chat/completions", timed("/v1/chat/completions", [&ctx](const auto& q, auto& r) { handle_chat(ctx, q, r); }));
    server_->Post("/v1/completions", timed("/v1/completions", [&ctx](const auto& q, auto& r) { handle_completions(ctx, q, r, false); }));
    server_->Post("/v1/completions/batch",
                  timed("/v1/completions/batch", [&ctx](const auto& q, auto& r) { handle_completions(ctx, q, r, true); }));
    add_info_routes(*server_, ctx_);
    add_adapter_routes(*server_, ctx_);
    add_train_routes(*server_, ctx_);
    add_dataset_routes(*server_, ctx_);
    add_eval_routes(*server_, ctx_);
    add_ui_routes(*server_, ctx_);
    server_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown exception";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, ApiError::from_status(internal_error(what)));
    });
    server_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty() || res.content_provider_) return;  // the answer is already written
      ApiError e;
      e.http_status = res.status;
      if (res.status == 404) {
        e.code = "not_found";
        e.message = "no route " + req.method + " " + req.path;
      } else if (res.status == 413) {
        e.code = "body_too_large";
        e.message = "the request body is larger than server.max_body_bytes";
      } else if (res.status == 405) {
        e.message = "method " + req.method + " is not allowed on " + req.path;
      } else {
        e.message = "HTTP " + std::to_string(res.status);
      }
      send_error(res, e);
    });
    // cpp-httplib 0.11 listens with a backlog of 5: a burst of connections overflows it and the
    // kernel falls back to SYN cookies, some of which fail (the client sees a reset). Keep the
    // listening socket and listen again with the system's maximum backlog after the bind.
    server_->set_socket_options([this](socket_t sock) {
      httplib::default_socket_options(sock);
      if (listen_fd_ < 0) listen_fd_ = sock;
    });
    port_ = s.port == 0 ? server_->bind_to_any_port(s.host) : (server_->bind_to_port(s.host, static_cast<int>(s.port)) ? static_cast<int>(s.port) : -1);
    if (port_ < 0)
      return io_error("cannot listen on " + s.host + ":" + std::to_string(s.port) +
                      " (in use, or not an address of this machine): set server.port / --port");
    if (listen_fd_ >= 0 && ::listen(listen_fd_, SOMAXCONN) != 0)
      std::fprintf(stderr, "kiln: could not raise the listen backlog: %s\n", std::strerror(errno));
    // The socket listens from bind on: connections queue until the accept loop starts.
    listener_ = std::thread([this] { server_->listen_after_bind(); });
    return {};
  }

  ServerContext ctx_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Qwen35Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  std::unique_ptr<StructuredOutputs> structured_;
  std::unique_ptr<AdapterRegistry> adapters_;  // requests in flight hold their adapters themselves
  std::unique_ptr<EngineActor> actor_;
  std::unique_ptr<JobQueue> jobs_;  // stopped before actor_
  std::unique_ptr<SuiteStore> suites_;
  std::unique_ptr<EvalJobs> evals_;  // stopped after jobs_, before actor_
  std::unique_ptr<RequestLog> request_log_;
  std::unique_ptr<RequestGuard> guard_;  // outlives server_
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  int port_ = -1;
  nlohmann::json capability_report_;
  int listen_fd_ = -1;
  std::mutex mu_;
  std::condition_variable stopped_cv_;
  bool stopped_ = false;
};

}  // namespace

Result<std::unique_ptr<ServingStack>> ServingStack::start(const KilnConfig& config, nlohmann::json config_report,
                                                          nlohmann::json capability_report,
                                                          std::unique_ptr<Backend> backend) {
  auto stack = std::make_unique<Stack>();
  stack->set_backend(std::move(backend));
  stack->set_config_report(std::move(config_report));
  if (capability_report.is_null()) {
    capability_report = nlohmann::json::parse(embedded_capability_report(), nullptr, /*allow_exceptions=*/false);
    if (capability_report.is_discarded())
      return internal_error("the capability report built into this binary is not valid JSON");
  }
  stack->set_capability_report(std::move(capability_report));
  KILN_RETURN_IF_ERROR(stack->open(config));
  return std::unique_ptr<ServingStack>(std::move(stack));
}

}  // namespace kiln
