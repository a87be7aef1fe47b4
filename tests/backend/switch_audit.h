// The switch audit: for every native switch of a backend (backend/native_switches.h, the code's
// own table) and every value it is audited with, native_switch_probe runs under that one setting
// and is held to the run without switches by the rule of switch_rule.h.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/native_switches.h"
#include "backend/switch_rule.h"

namespace kiln::testing {

// The probe beside this binary (a pack of test binaries) or where the build put it.
inline std::string switch_probe_path() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    const auto beside = std::filesystem::path(self).parent_path() / "native_switch_probe";
    if (std::filesystem::exists(beside)) return beside.string();
  }
  return KILN_SWITCH_PROBE;
}

// The probe's JSON for `backend` with `assignment` ("NAME=value", or "" for none) added to this
// process's environment; every listed switch not assigned is cleared, so that each run differs
// from the baseline in that one setting.
inline nlohmann::json run_switch_probe(const std::string& backend, const std::string& assignment) {
  std::string cmd = "env";
  for (const NativeSwitch& s : native_switches()) cmd += " -u " + std::string(switch_variable(s));
  if (!assignment.empty()) cmd += " '" + assignment + "'";
  cmd += " '" + switch_probe_path() + "' " + backend + " 2>/dev/null";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
    pclose(p);
  }
  auto j = nlohmann::json::parse(out, nullptr, false);
  return j.is_discarded() ? nlohmann::json{{"error", "no JSON from " + cmd + ": " + out}} : j;
}

// Runs the audit for every switch of `backend`; returns how many settings were audited.
inline int audit_native_switches(const std::string& backend) {
  const nlohmann::json base = run_switch_probe(backend, "");
  EXPECT_FALSE(base.contains("error")) << base.dump();
  if (base.contains("error")) return 0;
  EXPECT_EQ(base["host_fallbacks"], 0) << "without switches, serving on " << backend << " counted host fallbacks";
  int audited = 0;
  for (const NativeSwitch& s : native_switches()) {
    if (s.backend != backend) continue;
    for (const std::string& value : switch_audit_values(s)) {
      const std::string assignment = std::string(switch_variable(s)) + "=" + value;
      ++audited;
      for (const std::string& v : switch_rule_violations(base, run_switch_probe(backend, assignment)))
        ADD_FAILURE() << assignment << ": " << v;
    }
  }
  return audited;
}

}  // namespace kiln::testing
