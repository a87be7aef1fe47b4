// Retry-After's two forms (RFC 9110 section 10.2.3): delay-seconds and an HTTP-date, the date in
// each of its three grammars, checked against epoch seconds worked out by hand from the RFC's own
// example date (Sun, 06 Nov 1994 08:49:37 GMT = 784111777).
#include <gtest/gtest.h>

#include "hub/retry_after.h"

namespace kiln::hub {
namespace {

constexpr std::time_t kExample = 784111777;  // 1994-11-06 08:49:37 UTC

TEST(HubRetryAfter, ParsesTheThreeHttpDateForms) {
  const std::time_t now = kExample;
  EXPECT_EQ(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT", now), kExample);   // IMF-fixdate
  EXPECT_EQ(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT", now), kExample);  // RFC 850
  EXPECT_EQ(parse_http_date("Sun Nov  6 08:49:37 1994", now), kExample);        // asctime
  EXPECT_EQ(parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT", now), 0);
  EXPECT_EQ(parse_http_date("Tue, 29 Feb 2000 00:00:01 GMT", now), 951782401);  // a leap day
  for (const char* bad : {"", "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 UTC", "sun, 06 Nov 1994 08:49:37 GMT",
                          "Sun, 31 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:49:37 GMT ",
                          "Mon, 29 Feb 1999 00:00:00 GMT", "tomorrow"})
    EXPECT_FALSE(parse_http_date(bad, now).has_value()) << bad;
}

TEST(HubRetryAfter, ATwoDigitYearIsTheMostRecentNotMoreThanFiftyYearsAhead) {
  const std::time_t y2024 = 1704067200;  // 2024-01-01 00:00:00 UTC
  EXPECT_EQ(parse_http_date("Saturday, 01-Jan-00 00:00:00 GMT", y2024), 946684800);  // 2000
  EXPECT_EQ(parse_http_date("Wednesday, 01-Jan-70 00:00:00 GMT", y2024), 3155760000);  // 2070: 46 years ahead
  EXPECT_EQ(parse_http_date("Tuesday, 01-Jan-80 00:00:00 GMT", y2024), 315532800);     // 1980, as 2080 is 56 ahead
}

TEST(HubRetryAfter, SecondsOrTheTimeUntilTheDate) {
  EXPECT_EQ(retry_after_seconds("120", kExample), 120.0);
  EXPECT_EQ(retry_after_seconds("0", kExample), 0.0);
  EXPECT_EQ(retry_after_seconds("Sun, 06 Nov 1994 08:51:37 GMT", kExample), 120.0);
  EXPECT_EQ(retry_after_seconds("Sun, 06 Nov 1994 08:00:00 GMT", kExample), 0.0);  // already past
  EXPECT_FALSE(retry_after_seconds("-5", kExample).has_value());
  EXPECT_FALSE(retry_after_seconds("1.5", kExample).has_value());
  EXPECT_FALSE(retry_after_seconds("soon", kExample).has_value());
  // Absurd values stay finite for the caller's cap.
  EXPECT_EQ(retry_after_seconds("99999999999999999999999", kExample), 1e12);
}

}  // namespace
}  // namespace kiln::hub
