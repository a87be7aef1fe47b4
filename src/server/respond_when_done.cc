// The non-streaming response of a Generation: written once every choice has finished, from the
// HTTP thread's content provider, so that a client that disconnects while it waits is noticed
// (cpp-httplib 0.11 reports a closed socket only to a writer) and its choices are cancelled.
#include "server/route_support.h"

namespace kiln {

void respond_when_done(ServerContext& ctx, httplib::Response& res, std::vector<std::shared_ptr<Generation>> gens,
                       std::function<Json()> build) {
  struct State {
    std::vector<std::shared_ptr<Generation>> gens;
    std::function<Json()> build;
    std::optional<RequestDeadline> deadline;
  };
  auto st = std::make_shared<State>();
  st->gens = std::move(gens);
  st->build = std::move(build);
  st->deadline.emplace(ctx);
  auto cancel_all = [st] {
    for (auto& g : st->gens) g->cancel();
  };
  res.status = 200;
  res.set_chunked_content_provider(
      "application/json",
      [st, cancel_all](size_t, httplib::DataSink& sink) {
        bool running = false;
        for (auto& g : st->gens)
          if (g->pump(std::chrono::milliseconds(st->gens.size() == 1 ? 50 : 5), [](const ChoiceDelta&) { return true; }))
            running = true;
        if (running) {
          if (!sink.is_writable()) {
            log_client_gone("the socket is closed");
            cancel_all();
            return false;
          }
          if (st->deadline->due()) cancel_all();
          return true;
        }
        const std::string body = dump_json(st->build());
        if (!sink.write(body.data(), body.size())) return false;
        sink.done();
        return true;
      },
      [cancel_all](bool) { cancel_all(); });
}

}  // namespace kiln
