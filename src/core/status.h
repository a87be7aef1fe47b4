// Errors as values: a Status names what went wrong and which input is at fault; Result<T>
// carries either a value or that Status.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace kiln {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,    // the caller's input is malformed or out of range
  kNotFound,           // a named file, tensor, key or backend does not exist
  kIoError,            // the operating system refused a read, write or map
  kFormatError,        // a file exists but its contents are malformed
  kUnsupported,        // valid input that this build or backend cannot handle
  kFailedPrecondition, // the system is not in a state that allows the operation
  kResourceExhausted,  // out of memory, blocks, slots or queue space
  kInternal,           // a bug: an invariant did not hold
};

const char* error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return {}; }
  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "code: message", for logs and the CLI.
  std::string to_string() const;
  // Prefixes the message with where it happened ("loading model.safetensors: ...").
  Status with_context(const std::string& context) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
inline Status io_error(std::string m) { return {ErrorCode::kIoError, std::move(m)}; }
inline Status format_error(std::string m) { return {ErrorCode::kFormatError, std::move(m)}; }
inline Status unsupported(std::string m) { return {ErrorCode::kUnsupported, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {ErrorCode::kFailedPrecondition, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {ErrorCode::kResourceExhausted, std::move(m)}; }
inline Status internal_error(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}           // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {     // NOLINT: implicit by design
    assert(!std::get<Status>(v_).ok() && "Result built from an OK status has no value");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  // The value, or `fallback` when this holds an error.
  T value_or(T fallback) const& { return ok() ? value() : std::move(fallback); }
  T value_or(T fallback) && { return ok() ? std::get<T>(std::move(v_)) : std::move(fallback); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kiln

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when it is not OK.
#define KILN_RETURN_IF_ERROR(expr)              \
  do {                                          \
    ::kiln::Status kiln_status_ = (expr);       \
    if (!kiln_status_.ok()) return kiln_status_; \
  } while (0)

// `KILN_ASSIGN_OR_RETURN(auto x, f());` binds the value or returns the error.
#define KILN_ASSIGN_OR_RETURN(lhs, expr) KILN_ASSIGN_OR_RETURN_IMPL(KILN_CONCAT(kiln_result_, __LINE__), lhs, expr)
#define KILN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
