#include "qualify/sandbox.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

namespace kiln::qualify {
namespace {

constexpr const char* kCgroupRoot = "/sys/fs/cgroup";

int write_all(const char* path, const char* text, size_t n) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const ssize_t put = write(fd, text, n);
  const int err = put == static_cast<ssize_t>(n) ? 0 : (put < 0 ? errno : EIO);
  close(fd);
  return err;
}

int write_string(const char* path, const std::string& s) { return write_all(path, s.data(), s.size()); }

// A new network namespace starts with its loopback down.
int bring_up_loopback() {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  ifreq ifr;
  std::memset(&ifr, 0, sizeof ifr);
  std::memcpy(ifr.ifr_name, "lo", 3);
  int err = 0;
  if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0) {
    err = errno;
  } else {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0) err = errno;
  }
  close(fd);
  return err;
}

// Cuts the network the way `how` names; async-signal-safe.
int cut_network(std::string_view how, const SandboxChildArgs& args, const char** step) {
  if (how == "network_namespace") {
    *step = "unshare(CLONE_NEWNET)";
    if (unshare(CLONE_NEWNET) != 0) return errno;
  } else {
    *step = "unshare(CLONE_NEWUSER | CLONE_NEWNET)";
    if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) return errno;
    // The runner's own ids, mapped to themselves: files keep their owners.
    *step = "/proc/self/setgroups";
    if (int e = write_all("/proc/self/setgroups", "deny", 4)) return e;
    *step = "/proc/self/uid_map";
    if (int e = write_string("/proc/self/uid_map", args.uid_map)) return e;
    *step = "/proc/self/gid_map";
    if (int e = write_string("/proc/self/gid_map", args.gid_map)) return e;
  }
  *step = "bringing up the namespace's loopback";
  return bring_up_loopback();
}

// Which way of cutting the network works here: a child tries each in turn.
Enforcement probe_network() {
  const SandboxChildArgs args{"", std::to_string(geteuid()) + " " + std::to_string(geteuid()) + " 1\n",
                              std::to_string(getegid()) + " " + std::to_string(getegid()) + " 1\n"};
  std::string why;
  for (const char* how : {"network_namespace", "user_namespace"}) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return {"unenforced", std::string("pipe: ") + std::strerror(errno)};
    const pid_t pid = fork();
    if (pid < 0) {
      close(fds[0]);
      close(fds[1]);
      return {"unenforced", std::string("fork: ") + std::strerror(errno)};
    }
    if (pid == 0) {
      const char* step = "";
      const int err = cut_network(how, args, &step);
      if (err != 0) {
        char msg[256];
        const size_t n = std::strlen(step) < 200 ? std::strlen(step) : 200;
        std::memcpy(msg, step, n);
        std::memcpy(msg + n, ": ", 2);
        const char* e = strerror(err);
        const size_t m = std::strlen(e) < 50 ? std::strlen(e) : 50;
        std::memcpy(msg + n + 2, e, m);
        ssize_t ignored = write(fds[1], msg, n + 2 + m);
        (void)ignored;
      }
      _exit(err == 0 ? 0 : 1);
    }
    close(fds[1]);
    char buf[256];
    const ssize_t got = read(fds[0], buf, sizeof buf);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {how, ""};
    why += (why.empty() ? "" : "; then ") + (got > 0 ? std::string(buf, static_cast<size_t>(got)) : std::string("the probe died"));
  }
  return {"unenforced", why};
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The runner's cgroup v2 where it can delegate pids and memory to a case cgroup, else why not.
std::string delegating_cgroup(std::string& why) {
  struct statfs fs {};
  if (statfs(kCgroupRoot, &fs) != 0 || fs.f_type != CGROUP2_SUPER_MAGIC) {
    why = std::string(kCgroupRoot) + " is not a cgroup v2 hierarchy";
    return "";
  }
  std::string own;
  std::istringstream lines(read_text("/proc/self/cgroup"));
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("0::", 0) == 0) own = line.substr(3);
  if (own.empty()) {
    why = "/proc/self/cgroup names no cgroup v2";
    return "";
  }
  const std::string dir = std::string(kCgroupRoot) + (own == "/" ? "" : own);
  const std::string controllers = read_text(dir + "/cgroup.controllers");
  if (controllers.find("pids") == std::string::npos || controllers.find("memory") == std::string::npos) {
    why = "the runner's cgroup " + dir + " has no pids and memory controllers to delegate";
    return "";
  }
  // A cgroup that holds processes (other than the root) cannot enable controllers for its children.
  if (int e = write_string((dir + "/cgroup.subtree_control").c_str(), "+pids +memory")) {
    why = "enabling pids and memory under " + dir + ": " + std::strerror(e);
    return "";
  }
  return dir;
}

// RLIMIT_NPROC does not bind the real root of the initial user namespace.
bool exempt_from_nproc() {
  if (getuid() != 0) return false;
  std::istringstream map(read_text("/proc/self/uid_map"));
  uint64_t inside = 1, outside = 1, count = 0;
  map >> inside >> outside >> count;
  return inside == 0 && outside == 0 && count == 4294967295ull;
}

}  // namespace

SandboxPlan plan_sandbox(const SandboxPolicy& policy) {
  SandboxPlan plan;
  plan.policy = policy;
  if (policy.isolate_network) plan.network = probe_network();
  if (policy.max_processes == 0 && policy.max_memory_bytes == 0) return plan;
  std::string cgroup_why;
  plan.cgroup_parent = delegating_cgroup(cgroup_why);
  if (policy.max_processes > 0) {
    if (!plan.cgroup_parent.empty()) plan.processes = {"cgroup_v2", ""};
    else if (exempt_from_nproc())
      plan.processes = {"unenforced", "the runner is root, which RLIMIT_NPROC does not bound, and no cgroup v2 is "
                                      "delegated to it (" + cgroup_why + ")"};
    else plan.processes = {"rlimit", ""};
  }
  if (policy.max_memory_bytes > 0) plan.memory = plan.cgroup_parent.empty() ? Enforcement{"rlimit", ""} : Enforcement{"cgroup_v2", ""};
  return plan;
}

Result<CaseCgroup> CaseCgroup::create(const SandboxPlan& plan) {
  CaseCgroup g;
  if (plan.cgroup_parent.empty()) return g;
  static std::atomic<int> serial{0};
  const std::string path = plan.cgroup_parent + "/kiln-case-" + std::to_string(getpid()) + "-" + std::to_string(serial++);
  if (mkdir(path.c_str(), 0755) != 0) return io_error("cannot make the case cgroup " + path + ": " + std::strerror(errno));
  g.path_ = path;
  g.procs_ = path + "/cgroup.procs";
  auto limit = [&](const char* file, uint64_t value) -> Status {
    if (value == 0) return {};
    if (int e = write_string((path + "/" + file).c_str(), std::to_string(value)))
      return io_error("cannot write " + path + "/" + file + ": " + std::strerror(e));
    return {};
  };
  KILN_RETURN_IF_ERROR(limit("pids.max", plan.policy.max_processes));
  KILN_RETURN_IF_ERROR(limit("memory.max", plan.policy.max_memory_bytes));
  return g;
}

CaseCgroup::~CaseCgroup() {
  if (path_.empty()) return;
  write_all((path_ + "/cgroup.kill").c_str(), "1", 1);
  for (int attempt = 0; attempt < 100 && rmdir(path_.c_str()) != 0 && errno == EBUSY; ++attempt) usleep(10000);
}

SandboxChildArgs sandbox_child_args(const CaseCgroup& cgroup) {
  return {cgroup.procs_path(), std::to_string(geteuid()) + " " + std::to_string(geteuid()) + " 1\n",
          std::to_string(getegid()) + " " + std::to_string(getegid()) + " 1\n"};
}

int apply_sandbox_in_child(const SandboxPlan& plan, const SandboxChildArgs& args, const char** step) {
  if (!args.cgroup_procs.empty()) {
    *step = "joining the case cgroup";
    if (int e = write_all(args.cgroup_procs.c_str(), "0", 1)) return e;
  }
  if (plan.network.enforced())
    if (int e = cut_network(plan.network.how, args, step)) return e;
  if (plan.processes.how == "rlimit") {
    *step = "setrlimit(RLIMIT_NPROC)";
    const rlimit r{plan.policy.max_processes, plan.policy.max_processes};
    if (setrlimit(RLIMIT_NPROC, &r) != 0) return errno;
  }
  if (plan.memory.how == "rlimit") {
    *step = "setrlimit(RLIMIT_DATA)";
    const rlimit r{plan.policy.max_memory_bytes, plan.policy.max_memory_bytes};
    if (setrlimit(RLIMIT_DATA, &r) != 0) return errno;
  }
  return 0;
}

}  // namespace kiln::qualify
