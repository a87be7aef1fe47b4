#include "hub/retry_after.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string_view>

namespace kiln::hub {

namespace {

constexpr const char* kDays[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
constexpr const char* kLongDays[] = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"};
constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

// Reads the grammar's pieces left to right; every piece is case-sensitive, as RFC 9110 says.
struct Cursor {
  std::string_view s;
  size_t i = 0;
  bool lit(std::string_view t) {
    if (s.substr(i, t.size()) != t) return false;
    i += t.size();
    return true;
  }
  bool digits(int n, int& out) {
    out = 0;
    for (int k = 0; k < n; ++k, ++i) {
      if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
      out = out * 10 + (s[i] - '0');
    }
    return true;
  }
  template <size_t N>
  bool one_of(const char* const (&names)[N], int& out) {
    for (size_t k = 0; k < N; ++k)
      if (lit(names[k])) {
        out = static_cast<int>(k);
        return true;
      }
    return false;
  }
  bool clock(int& h, int& m, int& sec) { return digits(2, h) && lit(":") && digits(2, m) && lit(":") && digits(2, sec); }
  bool end() const { return i == s.size(); }
};

// Days from 1970-01-01 to the civil date (proleptic Gregorian).
int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

bool leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int year_of(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  return tm.tm_year + 1900;
}

}  // namespace

std::optional<std::time_t> parse_http_date(const std::string& value, std::time_t now) {
  int wday = 0, day = 0, month = 0, year = 0, h = 0, m = 0, sec = 0;
  bool ok = false;
  if (Cursor c{value}; c.one_of(kDays, wday) && c.lit(", ")) {  // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
    ok = c.digits(2, day) && c.lit(" ") && c.one_of(kMonths, month) && c.lit(" ") && c.digits(4, year) && c.lit(" ") &&
         c.clock(h, m, sec) && c.lit(" GMT") && c.end();
  } else if (Cursor c2{value}; c2.one_of(kLongDays, wday) && c2.lit(", ")) {  // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
    int yy = 0;
    ok = c2.digits(2, day) && c2.lit("-") && c2.one_of(kMonths, month) && c2.lit("-") && c2.digits(2, yy) &&
         c2.lit(" ") && c2.clock(h, m, sec) && c2.lit(" GMT") && c2.end();
    const int current = year_of(now);
    year = current - current % 100 + yy;
    if (year > current + 50) year -= 100;
  } else if (Cursor c3{value}; c3.one_of(kDays, wday) && c3.lit(" ")) {  // asctime: Sun Nov  6 08:49:37 1994
    ok = c3.one_of(kMonths, month) && c3.lit(" ");
    if (ok && c3.lit(" ")) ok = c3.digits(1, day);
    else ok = ok && c3.digits(2, day);
    ok = ok && c3.lit(" ") && c3.clock(h, m, sec) && c3.lit(" ") && c3.digits(4, year) && c3.end();
  }
  if (!ok) return std::nullopt;
  static constexpr int kMonthDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const int month_days = kMonthDays[month] + (month == 1 && leap(year));
  if (day < 1 || day > month_days || h > 23 || m > 59 || sec > 60) return std::nullopt;
  // The day name is read but not checked against the date, as curl does not.
  const int64_t days = days_from_civil(year, month + 1, day);
  return static_cast<std::time_t>(days * 86400 + h * 3600 + m * 60 + sec);
}

std::optional<double> retry_after_seconds(const std::string& value, std::time_t now) {
  if (value.empty() || value.size() > 64) return std::nullopt;
  bool all_digits = true;
  for (char c : value) all_digits = all_digits && std::isdigit(static_cast<unsigned char>(c));
  if (all_digits) {
    double s = 0;
    for (char c : value) s = std::min(s * 10 + (c - '0'), 1e12);
    return s;
  }
  auto when = parse_http_date(value, now);
  if (!when) return std::nullopt;
  return *when > now ? static_cast<double>(*when - now) : 0.0;
}

}  // namespace kiln::hub
