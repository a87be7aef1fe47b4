#include "server/api_error.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(ApiError, StatusCodesMapToHttp) {
  EXPECT_EQ(ApiError::from_status(invalid_argument("x")).http_status, 400);
  EXPECT_EQ(ApiError::from_status(not_found("adapter 'a'")).http_status, 404);
  EXPECT_EQ(ApiError::from_status(failed_precondition("busy")).http_status, 409);
  ApiError full = ApiError::from_status(resource_exhausted("queue full"));
  EXPECT_EQ(full.http_status, 503);
  EXPECT_GT(full.retry_after_secs, 0);
  EXPECT_EQ(ApiError::from_status(internal_error("bug")).http_status, 500);
}

TEST(ApiError, JsonHasOpenAiShape) {
  nlohmann::json j = ApiError::invalid("temperature", "temperature must be >= 0, got -1").to_json();
  ASSERT_TRUE(j.contains("error"));
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["message"], "temperature must be >= 0, got -1");
  EXPECT_TRUE(ApiError::from_status(internal_error("bug")).to_json()["error"]["param"].is_null());
}

}  // namespace
}  // namespace kiln
