// DeviceRunner: how work that runs off the engine's thread gets its device calls made. A server
// passes one that runs the work on the engine's thread at a cycle boundary
// (EngineActor::run_between_cycles), so that one thread owns the device and nothing else is on its
// stream while a decode step is being recorded; where no engine runs (tools, tests) it is empty
// and the work runs on the caller's thread.
#pragma once

#include <functional>
#include <optional>
#include <type_traits>

#include "core/status.h"

namespace kiln {

using DeviceRunner = std::function<Status(const std::function<Status()>& work)>;

// Runs `work` through `runner`, or here when there is none; returns its status.
inline Status run_on_device(const DeviceRunner& runner, const std::function<Status()>& work) {
  return runner ? runner(work) : work();
}

template <typename T>
struct IsResult : std::false_type {};
template <typename T>
struct IsResult<Result<T>> : std::true_type {};

// As above for work that yields a Result<T>: its value comes back to the caller's thread.
template <typename F>
  requires IsResult<std::invoke_result_t<F&>>::value
std::invoke_result_t<F&> run_on_device(const DeviceRunner& runner, F&& work) {
  std::optional<std::invoke_result_t<F&>> out;
  const Status st = run_on_device(runner, std::function<Status()>([&] {
                                    out.emplace(work());
                                    return out->status();
                                  }));
  if (!st.ok()) return st;
  return std::move(*out);
}

}  // namespace kiln
