// The case sandbox (sandbox.h): a case whose workload forbids the network cannot reach a loopback
// server started outside its namespace; where the platform refuses the namespaces (here, a seccomp
// filter makes unshare fail as an unprivileged runner's would), the case runs unenforced and the
// plan says why; the rlimits reach the case.
#include <gtest/gtest.h>

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "qualify/process.h"
#include "qualify/sandbox.h"

namespace kiln::qualify {
namespace {

// A TCP server on 127.0.0.1 of this (the runner's) namespace, listening for as long as it lives.
class LoopbackServer {
 public:
  LoopbackServer() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(fd_, 8);
    socklen_t n = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n);
    port_ = ntohs(a.sin_port);
  }
  ~LoopbackServer() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

ProcessSpec connect_case(int port, const SandboxPlan* plan) {
  ProcessSpec s;
  s.argv = {QUALIFY_CASE_HELPER, "connect", std::to_string(port)};
  s.working_directory = "/tmp";
  s.environment = {"PATH=/usr/bin:/bin"};
  s.timeout_seconds = 10;
  s.sandbox = plan;
  return s;
}

TEST(Sandbox, AForbiddenCaseCannotReachALoopbackServerOutsideItsNamespace) {
  const SandboxPlan plan = plan_sandbox({true, 0, 0});
  if (!plan.network.enforced())
    GTEST_SKIP() << "SKIPPED: this platform allows no network namespace (" << plan.network.why << ")";
  LoopbackServer server;
  ASSERT_GT(server.port(), 0);
  // The same case unconfined reaches the server: the port is live.
  Result<ProcessOutcome> open = run_process(connect_case(server.port(), nullptr));
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(open->stdout_text, "connected\n");
  Result<ProcessOutcome> cut = run_process(connect_case(server.port(), &plan));
  ASSERT_TRUE(cut.ok());
  ASSERT_TRUE(cut->started) << cut->start_error;
  EXPECT_EQ(cut->exit_code, 1);
  // Its own loopback is up, with nothing listening on it.
  EXPECT_EQ(cut->stdout_text, "not connected: Connection refused\n");
}

// Makes unshare(2) fail with EPERM in this process and its children, as it does for a runner
// without CAP_SYS_ADMIN where user namespaces are off.
void refuse_unshare() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_unshare, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

TEST(Sandbox, WhereNamespacesAreRefusedTheCaseRunsUnenforcedAndThePlanSaysWhy) {
  LoopbackServer server;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // a runner on a platform that refuses namespaces
    close(fds[0]);
    refuse_unshare();
    const SandboxPlan plan = plan_sandbox({true, 0, 0});
    Result<ProcessOutcome> o = run_process(connect_case(server.port(), &plan));
    const std::string report = plan.network.how + "\n" + plan.network.why + "\n" + (o.ok() ? o->stdout_text : "error\n");
    ssize_t ignored = write(fds[1], report.data(), report.size());
    (void)ignored;
    _exit(0);
  }
  close(fds[1]);
  std::string report;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) report.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  EXPECT_EQ(report.substr(0, report.find('\n')), "unenforced") << report;
  EXPECT_NE(report.find("unshare(CLONE_NEWNET): Operation not permitted"), std::string::npos) << report;
  EXPECT_NE(report.find("unshare(CLONE_NEWUSER | CLONE_NEWNET): Operation not permitted"), std::string::npos) << report;
  EXPECT_NE(report.find("connected\n"), std::string::npos) << "unenforced means the case did reach the server: " << report;
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_CASE_HELPER_HAS_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define KILN_CASE_HELPER_HAS_ASAN 1
#endif

TEST(Sandbox, TheRlimitsReachTheCase) {
#ifdef KILN_CASE_HELPER_HAS_ASAN
  GTEST_SKIP() << "SKIPPED: the sanitized case helper's shadow memory counts against RLIMIT_DATA";
#endif
  SandboxPlan plan;
  plan.policy = {false, 300, uint64_t{3} << 30};
  plan.processes = {"rlimit", ""};
  plan.memory = {"rlimit", ""};
  ProcessSpec s = connect_case(0, &plan);
  s.argv = {QUALIFY_CASE_HELPER, "limits"};
  Result<ProcessOutcome> o = run_process(s);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->stdout_text, "nproc 300 data " + std::to_string(uint64_t{3} << 30) + "\n");
}

TEST(Sandbox, RootWithoutADelegatedCgroupSaysItsProcessesAreUnbounded) {
  const SandboxPlan plan = plan_sandbox({false, 64, uint64_t{1} << 30});
  EXPECT_TRUE(plan.network.how == "not_requested");
  EXPECT_EQ(plan.memory.enforced(), true) << "a cgroup or an rlimit always bounds memory";
  if (plan.processes.how == "unenforced") {
    EXPECT_EQ(getuid(), 0u);
    EXPECT_NE(plan.processes.why.find("RLIMIT_NPROC does not bound"), std::string::npos) << plan.processes.why;
  } else {
    EXPECT_TRUE(plan.processes.how == "cgroup_v2" || (plan.processes.how == "rlimit" && getuid() != 0)) << plan.processes.how;
  }
}

}  // namespace
}  // namespace kiln::qualify
