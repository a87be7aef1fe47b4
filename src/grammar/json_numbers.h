// JSON numbers as grammar expressions: any number, integers within bounds, and decimals within
// whole-number bounds. Digit runs are bounded so that generation ends a number.
#pragma once

#include <cstdint>
#include <optional>

#include "grammar/grammar.h"

namespace kiln::grammar {

struct NumberBound {
  int64_t value = 0;
  bool exclusive = false;
};

// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? with at most `max_digits` digits in the integer
// part and the fraction, and two in the exponent.
ExprId json_number(Grammar& g, int max_digits);

// Decimal integers in [lo, hi] (a missing bound is open; at most `max_digits` digits past it),
// written without leading zeros and never as "-0". The empty language when no integer fits.
ExprId json_integer(Grammar& g, std::optional<int64_t> lo, std::optional<int64_t> hi, int max_digits);

// Numbers without exponent, optionally with a fraction of at most `max_digits` digits, whose value
// lies within the bounds. The empty language when none does.
ExprId json_decimal(Grammar& g, std::optional<NumberBound> lo, std::optional<NumberBound> hi, int max_digits);

}  // namespace kiln::grammar
