// The answer a backend gives when asked whether it can run one concrete request.
#pragma once

#include <string>
#include <string_view>

namespace kiln {

enum class SupportState : uint8_t {
  kNative,                 // runs on the device as asked
  kNativeWithConstraints,  // runs natively; `constraint` says which condition the request met
  kHostFallbackAllowed,    // not native; policy may route it through host memory (counted)
  kDeclined,               // cannot run; `constraint` names the condition that failed
  kNotBuilt,               // the backend is not compiled into this binary
};

std::string_view support_state_name(SupportState s);  // "native", "declined", ...

struct Support {
  SupportState state = SupportState::kDeclined;
  std::string constraint;  // why it was declined, or what constrained a native yes

  static Support native() { return {SupportState::kNative, {}}; }
  static Support constrained(std::string why) { return {SupportState::kNativeWithConstraints, std::move(why)}; }
  static Support host_fallback(std::string why) { return {SupportState::kHostFallbackAllowed, std::move(why)}; }
  static Support declined(std::string why) { return {SupportState::kDeclined, std::move(why)}; }
  static Support not_built() { return {SupportState::kNotBuilt, "backend not compiled into this binary"}; }

  bool runs_natively() const {
    return state == SupportState::kNative || state == SupportState::kNativeWithConstraints;
  }
};

}  // namespace kiln
