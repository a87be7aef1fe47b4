// run_process on its own: argv without a shell, exit status and signals, start failures, and
// that only the given environment reaches the child.
#include <gtest/gtest.h>

#include "qualify/process.h"

namespace kiln::qualify {
namespace {

ProcessSpec spec(std::vector<std::string> argv) {
  ProcessSpec s;
  s.argv = std::move(argv);
  s.working_directory = "/tmp";
  s.environment = {"PATH=/usr/bin:/bin"};
  s.timeout_seconds = 10;
  return s;
}

TEST(Process, PassesArgvVerbatimWithoutAShell) {
  Result<ProcessOutcome> o = run_process(spec({QUALIFY_CASE_HELPER, "print", "stdout", "$HOME; echo `id` *"}));
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->exited);
  EXPECT_EQ(o->exit_code, 0);
  EXPECT_EQ(o->stdout_text, "$HOME; echo `id` *\n");
}

TEST(Process, ReportsExitCodeAndStderr) {
  Result<ProcessOutcome> o = run_process(spec({QUALIFY_CASE_HELPER, "exit", "42"}));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->exit_code, 42);
  Result<ProcessOutcome> e = run_process(spec({QUALIFY_CASE_HELPER, "print", "stderr", "oops"}));
  EXPECT_EQ(e->stderr_text, "oops\n");
  EXPECT_EQ(e->combined_text, "oops\n");
  EXPECT_TRUE(e->stdout_text.empty());
}

TEST(Process, MissingProgramDoesNotStart) {
  Result<ProcessOutcome> o = run_process(spec({"kiln-no-such-program"}));
  ASSERT_TRUE(o.ok());
  EXPECT_FALSE(o->started);
  EXPECT_NE(o->start_error.find("not found on PATH=/usr/bin:/bin"), std::string::npos);
  ProcessSpec bad_dir = spec({QUALIFY_CASE_HELPER, "exit", "0"});
  bad_dir.working_directory = "/nonexistent/dir";
  Result<ProcessOutcome> d = run_process(bad_dir);
  EXPECT_FALSE(d->started);
  EXPECT_NE(d->start_error.find("/nonexistent/dir"), std::string::npos);
}

TEST(Process, OnlyTheGivenEnvironmentIsVisible) {
  ProcessSpec s = spec({QUALIFY_CASE_HELPER, "env"});
  s.environment.push_back("ONLY_THIS=1");
  Result<ProcessOutcome> o = run_process(s);
  EXPECT_EQ(o->stdout_text, "PATH=/usr/bin:/bin\nONLY_THIS=1\n");
}

TEST(Process, DeadlineSendsInterruptFirst) {
  ProcessSpec s = spec({QUALIFY_CASE_HELPER, "sleep", "30"});
  s.timeout_seconds = 0.3;
  s.interrupt_grace_seconds = 2;
  Result<ProcessOutcome> o = run_process(s);
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->timed_out);
  EXPECT_FALSE(o->exited);
  EXPECT_EQ(o->term_signal, 2);  // SIGINT was enough
  EXPECT_EQ(o->signals_sent, std::vector<std::string>{"SIGINT"});
  EXPECT_LT(o->duration_seconds, 2.0);
}

TEST(Process, KillsWhenInterruptAndTerminateAreIgnored) {
  ProcessSpec s = spec({QUALIFY_CASE_HELPER, "sleep", "30", "ignore-sigint"});
  s.timeout_seconds = 0.2;
  s.interrupt_grace_seconds = 0.2;
  s.terminate_grace_seconds = 0.2;
  Result<ProcessOutcome> o = run_process(s);
  EXPECT_TRUE(o->timed_out);
  EXPECT_EQ(o->term_signal, 15);  // the helper ignores SIGINT only
  EXPECT_EQ(o->signals_sent, (std::vector<std::string>{"SIGINT", "SIGTERM"}));
}

TEST(Process, ResolvesProgramsOnThePathItIsGiven) {
  EXPECT_EQ(resolve_program("./x", "/usr/bin"), "./x");
  EXPECT_EQ(resolve_program("git", "/nonexistent:/usr/bin"), "/usr/bin/git");
  EXPECT_EQ(resolve_program("git", "/nonexistent"), "");
}

}  // namespace
}  // namespace kiln::qualify
