// The training request parser asks the backend's capabilities: a backend without training
// refuses every job with 501 naming it, and `lora_rank` is bounded by the backend's Muon range.
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/registry.h"
#include "forwarding_backend.h"
#include "model/init.h"
#include "server/train_request.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// The CPU backend with its training capabilities replaced.
class CpuWithTraining final : public testing::ForwardingBackend {
 public:
  CpuWithTraining(bool supported, int rank_max)
      : ForwardingBackend(std::move(create_backend("cpu").value())), caps_(inner().capabilities()) {
    caps_.training.supported = supported;
    caps_.training.muon_rank_max = rank_max;
  }
  const BackendCapabilities& capabilities() const override { return caps_; }

 private:
  BackendCapabilities caps_;
};

std::optional<ApiError> parse_on(Backend& be, const nlohmann::json& body) {
  const std::string dir = (fs::temp_directory_path() / ("kiln-train-request-" + std::to_string(::getpid()))).string();
  EXPECT_TRUE(write_random_checkpoint(preset_config("tiny").value(), dir, {}).ok());
  auto model = Qwen35Model::load(dir, be);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  ServerContext ctx;
  ctx.train_env.model = model->get();
  std::shared_ptr<TrainJobRequest> out;
  auto err = parse_train_request(ctx, TrainSpec::Kind::kSft, body, out);
  fs::remove_all(dir);
  return err;
}

const nlohmann::json kBody = {
    {"examples", {{{"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "yo"}}}}}}},
    {"config", {{"lora_rank", 9}}}};

TEST(TrainRequest, BackendWithoutTrainingRefusesEveryJobNamingIt) {
  CpuWithTraining be(false, 256);
  auto err = parse_on(be, kBody);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->http_status, 501);
  EXPECT_EQ(err->code, "training_unsupported");
  EXPECT_NE(err->message.find("cpu backend"), std::string::npos) << err->message;
}

TEST(TrainRequest, RankAboveTheBackendsMuonLimitIsRefusedNamingTheField) {
  CpuWithTraining be(true, 8);
  auto err = parse_on(be, kBody);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->http_status, 400);
  EXPECT_EQ(err->param, "config.lora_rank");
  EXPECT_NE(err->message.find('8'), std::string::npos) << err->message;
}

}  // namespace
}  // namespace kiln
