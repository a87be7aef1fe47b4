// Number ranges as digit patterns: [a, b] splits by digit count, and each equal-length range by
// its first differing digit into a prefix, a free middle and a suffix, recursively.
#include "grammar/json_numbers.h"

#include <algorithm>
#include <string>
#include <vector>

namespace kiln::grammar {

namespace {

int digit_count(uint64_t v) {
  int n = 1;
  while (v >= 10) v /= 10, ++n;
  return n;
}

uint64_t power10(int n) {
  uint64_t p = 1;
  for (int i = 0; i < n; ++i) p *= 10;
  return p;
}

// The largest value an open upper bound allows above `from`: max(max_digits, digits of from)
// digits, all nines (at most 19 digits, which uint64 holds).
uint64_t open_max(uint64_t from, int max_digits) { return power10(std::min(19, std::max(max_digits, digit_count(from)))) - 1; }

ExprId any_digits(Grammar& g, int min, int max) { return g.repeat(g.bytes(ByteSet::range('0', '9')), min, max); }

// Digit strings of one length between lo and hi (leading zeros allowed: these are inner digits).
ExprId digit_strings(Grammar& g, const std::string& lo, const std::string& hi) {
  if (lo.empty()) return g.empty();
  if (lo[0] == hi[0]) return g.seq({g.byte(static_cast<uint8_t>(lo[0])), digit_strings(g, lo.substr(1), hi.substr(1))});
  const size_t n = lo.size() - 1;
  const std::string zeros(n, '0'), nines(n, '9');
  const bool lo_whole = lo.substr(1) == zeros, hi_whole = hi.substr(1) == nines;
  const char first_free = lo_whole ? lo[0] : static_cast<char>(lo[0] + 1);
  const char last_free = hi_whole ? hi[0] : static_cast<char>(hi[0] - 1);
  std::vector<ExprId> options;
  if (!lo_whole) options.push_back(g.seq({g.byte(static_cast<uint8_t>(lo[0])), digit_strings(g, lo.substr(1), nines)}));
  if (first_free <= last_free) {
    options.push_back(g.seq({g.bytes(ByteSet::range(static_cast<uint8_t>(first_free), static_cast<uint8_t>(last_free))),
                             any_digits(g, static_cast<int>(n), static_cast<int>(n))}));
  }
  if (!hi_whole) options.push_back(g.seq({g.byte(static_cast<uint8_t>(hi[0])), digit_strings(g, zeros, hi.substr(1))}));
  return g.alt(std::move(options));
}

// Values in [a, b] written without leading zeros.
ExprId naturals(Grammar& g, uint64_t a, uint64_t b) {
  std::vector<ExprId> options;
  for (int len = digit_count(a); len <= digit_count(b); ++len) {
    const uint64_t lo = std::max(a, len == 1 ? 0 : power10(len - 1));
    const uint64_t hi = len >= 20 ? b : std::min(b, power10(len) - 1);
    if (lo <= hi) options.push_back(digit_strings(g, std::to_string(lo), std::to_string(hi)));
  }
  return g.alt(std::move(options));
}

// |v| of a negative int64 without overflow.
uint64_t magnitude_of(int64_t v) { return static_cast<uint64_t>(-(v + 1)) + 1; }

// Magnitudes m (no sign) with `lo` <= m (lo.value >= 0) and m <= `hi`, as I or I.F.
std::optional<ExprId> magnitudes(Grammar& g, NumberBound lo, std::optional<NumberBound> hi, int max_digits) {
  const ExprId any_fraction = g.optional(g.seq({g.byte('.'), any_digits(g, 1, max_digits)}));
  std::vector<ExprId> options;
  // Whole parts I whose every fraction fits: lo <= I (or <) and I + 1 <= hi.
  const int64_t full_lo = lo.exclusive ? lo.value + 1 : lo.value;
  if (!hi) {
    options.push_back(g.seq({naturals(g, static_cast<uint64_t>(full_lo), open_max(static_cast<uint64_t>(full_lo), max_digits)),
                             any_fraction}));
  } else if (hi->value - 1 >= full_lo) {
    options.push_back(g.seq({naturals(g, static_cast<uint64_t>(full_lo), static_cast<uint64_t>(hi->value - 1)), any_fraction}));
  }
  // An inclusive upper bound itself, with zeros only after the point.
  if (hi && !hi->exclusive && (hi->value > lo.value || (hi->value == lo.value && !lo.exclusive))) {
    options.push_back(g.seq({g.literal(std::to_string(hi->value)),
                             g.optional(g.seq({g.byte('.'), g.repeat(g.byte('0'), 1, max_digits)}))}));
  }
  // An exclusive lower bound's whole part, with a fraction that is not all zeros.
  if (lo.exclusive && (!hi || hi->value > lo.value)) {
    options.push_back(g.seq({g.literal(std::to_string(lo.value)), g.byte('.'), g.repeat(g.byte('0'), 0, max_digits - 1),
                             g.bytes(ByteSet::range('1', '9')), any_digits(g, 0, max_digits - 1)}));
  }
  if (options.empty()) return std::nullopt;
  return g.alt(std::move(options));
}

}  // namespace

ExprId json_number(Grammar& g, int max_digits) {
  const ExprId whole = g.alt({g.byte('0'), g.seq({g.bytes(ByteSet::range('1', '9')), any_digits(g, 0, max_digits - 1)})});
  const ExprId fraction = g.seq({g.byte('.'), any_digits(g, 1, max_digits)});
  ByteSet e = ByteSet::of('e');
  e.add('E');
  ByteSet sign = ByteSet::of('+');
  sign.add('-');
  const ExprId exponent = g.seq({g.bytes(e), g.optional(g.bytes(sign)), any_digits(g, 1, 2)});
  return g.seq({g.optional(g.byte('-')), whole, g.optional(fraction), g.optional(exponent)});
}

ExprId json_integer(Grammar& g, std::optional<int64_t> lo, std::optional<int64_t> hi, int max_digits) {
  std::vector<ExprId> options;
  if (!hi || *hi >= 0) {
    const uint64_t a = lo ? static_cast<uint64_t>(std::max<int64_t>(*lo, 0)) : 0;
    const uint64_t b = hi ? static_cast<uint64_t>(*hi) : open_max(a, max_digits);
    if (a <= b) options.push_back(naturals(g, a, b));
  }
  if (!lo || *lo < 0) {
    const uint64_t m_lo = hi && *hi < 0 ? magnitude_of(*hi) : 1;
    const uint64_t m_hi = lo ? magnitude_of(*lo) : open_max(m_lo, max_digits);
    if (m_lo <= m_hi) options.push_back(g.seq({g.byte('-'), naturals(g, m_lo, m_hi)}));
  }
  return g.alt(std::move(options));
}

ExprId json_decimal(Grammar& g, std::optional<NumberBound> lo, std::optional<NumberBound> hi, int max_digits) {
  std::vector<ExprId> options;
  // x >= 0, written as a magnitude.
  if (!hi || hi->value >= 0) {
    NumberBound plo{0, false};
    if (lo && (lo->value > 0 || (lo->value == 0 && lo->exclusive))) plo = *lo;
    if (auto m = magnitudes(g, plo, hi, max_digits)) options.push_back(*m);
  }
  // x < 0, written as "-" and its magnitude m > 0.
  if (!lo || lo->value < 0) {
    NumberBound mlo{0, true};
    if (hi && hi->value < 0) mlo = NumberBound{-hi->value, hi->exclusive};
    std::optional<NumberBound> mhi;
    if (lo) mhi = NumberBound{-lo->value, lo->exclusive};
    if (auto m = magnitudes(g, mlo, mhi, max_digits)) options.push_back(g.seq({g.byte('-'), *m}));
  }
  return g.alt(std::move(options));
}

}  // namespace kiln::grammar
