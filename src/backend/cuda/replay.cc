// CUDA graphs: a body's stream work captured once, replayed with one launch.
#include "backend/cuda/cuda_facets.h"
#include "backend/cuda/tuning.h"

namespace kiln::cuda {

namespace {

class Graph final : public Recording {
 public:
  explicit Graph(cudaGraphExec_t exec) : exec_(exec) {}
  ~Graph() override { cudaGraphExecDestroy(exec_); }
  cudaGraphExec_t exec() const { return exec_; }

 private:
  cudaGraphExec_t exec_;
};

// Ends the capture on every path out of record(), and the recording mode with it.
struct CaptureGuard {
  Context& ctx;
  bool open = true;
  cudaGraph_t end() {
    cudaGraph_t g = nullptr;
    if (open) {
      const cudaError_t err = cudaStreamEndCapture(ctx.stream, &g);
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        g = nullptr;
      }
    }
    open = false;
    ctx.recorder.store(std::thread::id(), std::memory_order_release);
    return g;
  }
  ~CaptureGuard() {
    if (open) {
      cudaGraph_t g = end();
      if (g != nullptr) cudaGraphDestroy(g);
    }
  }
};

}  // namespace

bool Replay::available() const { return tuning().graphs && ctx_->profiler == nullptr; }

Result<std::unique_ptr<Recording>> Replay::record(const std::function<Status()>& body) {
  if (!available())
    return unsupported(ctx_->profiler ? "cuda graphs: off while KILN_CUDA_PROFILE times each call"
                                      : "cuda graphs: off (KILN_CUDA_GRAPHS=0)");
  std::thread::id none;
  if (!ctx_->recorder.compare_exchange_strong(none, std::this_thread::get_id(), std::memory_order_acq_rel))
    return failed_precondition("cuda graphs: a recording is already being made");
  // From here on the storage facet refuses other threads (Context::check_owner), before the
  // stream starts capturing.
  if (Status st = cuda_status(cudaStreamBeginCapture(ctx_->stream, cudaStreamCaptureModeRelaxed),
                              "cuda graphs: begin capture");
      !st.ok()) {
    ctx_->recorder.store(std::thread::id(), std::memory_order_release);
    return st;
  }
  CaptureGuard guard{*ctx_};
  const Status st = body();
  cudaGraph_t graph = guard.end();
  if (!st.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return st.with_context("cuda graphs: recording");
  }
  if (graph == nullptr)
    return internal_error("cuda graphs: the capture was invalidated (the body synchronised or copied to the host)");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  KILN_RETURN_IF_ERROR(cuda_status(err, "cuda graphs: instantiate"));
  ++recordings_;
  return std::unique_ptr<Recording>(std::make_unique<Graph>(exec));
}

Status Replay::replay(const Recording& r) {
  const auto* g = dynamic_cast<const Graph*>(&r);
  if (g == nullptr) return invalid_argument("cuda graphs: replay of a recording made by another backend");
  ++replays_;
  return cuda_status(cudaGraphLaunch(g->exec(), ctx_->stream), "cuda graphs: launch");
}

}  // namespace kiln::cuda
