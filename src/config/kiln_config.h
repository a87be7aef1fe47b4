// KilnConfig: the resolved configuration of one process (docs/configuration.md), one struct
// per section of kiln.toml. Values come from defaults < kiln.toml < KILN_<SECTION>_<FIELD> <
// command-line flags (config/config_loader.h); once resolved it never changes.
#pragma once

#include <cstdint>
#include <string>

namespace kiln {

struct ServerSection {
  std::string host = "127.0.0.1";
  int64_t port = 8420;                 // 0: any free port
  int64_t max_batch_tokens = 512;      // tokens per engine cycle, decode and prefill together
  int64_t max_decode_batch = 64;       // sequences decoding at once (GDN slots in use)
  int64_t max_queued_requests = 256;   // waiting requests; beyond it 503 + Retry-After
  int64_t request_timeout_secs = 600;  // a request running longer is cancelled
  int64_t max_body_bytes = 8 << 20;    // larger bodies get 413
  int64_t max_adapter_bytes = int64_t{512} << 20;  // an adapter upload, compressed and extracted; 413 beyond
  int64_t http_threads = 0;            // 0: max(8, 2 * max_decode_batch)
  std::string profile = "stable";      // stable | experimental | maintenance
  std::string api_key;                 // "" : none (only allowed on a loopback host)
  std::string api_key_file;            // a file holding the key (kept out of ps and the environment)
  bool metrics_public = false;         // /metrics without the key
  std::string allowed_hosts;           // Host names accepted besides this machine's addresses; "*": any
  std::string allowed_origins;         // cross-origin callers allowed (CORS), e.g. "https://app.example"
  std::string state_dir;               // "" : ~/.cache/kiln/state/<model id>
  int64_t max_loaded_adapters = 32;    // beyond it the least recently used non-default adapter unloads
  int64_t max_adapter_memory_bytes = int64_t{4} << 30;  // loaded adapters' factors together, likewise
};

struct ModelSection {
  std::string path;             // "" : the embedded random-weight demo model
  std::string served_model_id;  // "" : the model directory's name
  std::string adapter_dir;      // "" : <server.state_dir>/adapters
  std::string tokenizer_path;   // "" : the model directory
  std::string backend = "auto"; // auto | cpu | cuda (auto: cuda when a device this build has code for is present)
  int64_t max_context = 0;      // 0: the model's max_position_embeddings, capped by the K/V pool
};

struct MemorySection {
  int64_t kv_blocks = 0;          // 64-token K/V blocks; 0: sized from memory_fraction
  double memory_fraction = 0.9;   // of free device memory (host: of available RAM) for K/V
  bool kv_cache_fp8 = false;      // e4m3 K/V storage (CUDA only)
};

struct BatchingSection {
  int64_t channel_capacity = 256;  // tokens buffered per request before its decoding pauses
};

struct PrefixCacheSection {
  bool enabled = true;
  int64_t max_blocks = 1024;
  int64_t max_bytes = int64_t{1} << 32;
};

struct TrainingSection {
  std::string webhook_url;
  // Online GRPO/OPD jobs' reward server (src/server/rollout_service.h): named here only, never by a
  // request; each call bounded by the timeout, retried `reward_retries` times.
  std::string reward_url;
  int64_t reward_timeout_seconds = 30;
  int64_t reward_retries = 2;
  // OPD's remote teacher (src/server/remote_teacher.h): an OpenAI-compatible server named here
  // only, never by a request ({"remote": true} asks for it), with the student's tokenizer.
  std::string teacher_url;
  std::string teacher_model;            // the `model` its requests name; "" : none sent
  std::string teacher_api_key;          // its bearer key; "" : none
  int64_t teacher_timeout_seconds = 60;
  int64_t teacher_retries = 2;
  int64_t max_queued_jobs = 16;
  int64_t checkpoint_interval = 0;  // optimizer steps between checkpoints; 0: none
  int64_t checkpoint_keep = 3;      // a job's last N checkpoints stay on disk; 0: all
  double trace_memory_fraction = 0.5;  // of the training room a job's estimate leaves, for layer traces (TrainerOptions)
  // The SFT step the K/V pool leaves device memory for: sequences x tokens at this LoRA rank,
  // every target, Muon (server/memory_plan.h); 0 sequences: none is kept.
  int64_t reserve_sequences = 2;
  int64_t reserve_sequence_tokens = 2048;
  int64_t reserve_lora_rank = 16;
  std::string data_dir;               // "" : <server.state_dir>/datasets
  int64_t max_dataset_bytes = int64_t{1} << 30;  // one dataset file, uploaded or named by a job
  int64_t max_job_tokens = 1000000000;  // tokens one job trains on, every epoch counted
  int64_t max_job_seconds = 86400;      // a job running longer fails
};

struct LoggingSection {
  std::string level = "info";  // error | warn | info | debug
  bool request_log = false;
  std::string request_log_dir;  // "" : <server.state_dir>/request-log
  int64_t request_log_max_bytes = int64_t{1} << 30;
  bool request_log_redact = false;  // rows keep no message, prompt or completion text
};

struct VulkanSection {
  std::string device;       // "": the first discrete GPU, else integrated, else any; an index or a name substring
  bool validation = false;  // the Khronos validation layer (debugging)
};

struct KilnConfig {
  ServerSection server;
  ModelSection model;
  MemorySection memory;
  BatchingSection batching;
  PrefixCacheSection prefix_cache;
  TrainingSection training;
  LoggingSection logging;
  VulkanSection vulkan;
};

}  // namespace kiln
