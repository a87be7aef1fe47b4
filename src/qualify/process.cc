#include "qualify/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

namespace kiln::qualify {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Fd {
  int fd = -1;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

struct ProcStat {
  int pid = 0;
  int ppid = 0;
  int pgrp = 0;
  char state = '?';
};

bool read_proc_stat(int pid, ProcStat& out) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  // The command name may contain spaces and parentheses; fields resume after the last ')'.
  size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 2));
  out.pid = pid;
  rest >> out.state >> out.ppid >> out.pgrp;
  return static_cast<bool>(rest);
}

std::string read_cmdline(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && s.back() == '\0') s.pop_back();
  for (char& c : s) {
    if (c == '\0') c = ' ';
  }
  return s;
}

// Live (non-zombie) processes in process group `pgid`, or reparented to us (we are a
// subreaper, so a double-forked daemon that called setsid() lands here).
std::vector<int> find_leftovers(int pgid) {
  std::vector<int> out;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return out;
  int self = getpid();
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid == self) continue;
    ProcStat st;
    if (!read_proc_stat(static_cast<int>(pid), st) || st.state == 'Z') continue;
    if (st.pgrp == pgid || st.ppid == self) out.push_back(static_cast<int>(pid));
  }
  closedir(dir);
  return out;
}

void reap_children_nonblocking() {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

class Capture {
 public:
  explicit Capture(uint64_t limit) : limit_(limit) {}
  void append(std::string& stream, uint64_t& total, bool& truncated, std::string& combined, const char* data,
              size_t n) {
    total += n;
    size_t room = stream.size() < limit_ ? static_cast<size_t>(limit_ - stream.size()) : 0;
    size_t keep = n < room ? n : room;
    if (keep < n) truncated = true;
    stream.append(data, keep);
    size_t croom = combined.size() < 2 * limit_ ? static_cast<size_t>(2 * limit_ - combined.size()) : 0;
    combined.append(data, keep < croom ? keep : croom);
  }

 private:
  uint64_t limit_;
};

}  // namespace

std::string resolve_program(const std::string& program, const std::string& path_value) {
  if (program.find('/') != std::string::npos) return program;
  size_t start = 0;
  while (start <= path_value.size()) {
    size_t end = path_value.find(':', start);
    if (end == std::string::npos) end = path_value.size();
    std::string dir = path_value.substr(start, end - start);
    if (!dir.empty()) {
      std::string candidate = dir + "/" + program;
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    start = end + 1;
  }
  return "";
}

Result<ProcessOutcome> run_process(const ProcessSpec& spec) {
  ProcessOutcome out;
  if (spec.argv.empty()) return invalid_argument("empty argv");
  std::string path_value;
  for (const std::string& kv : spec.environment) {
    if (kv.rfind("PATH=", 0) == 0) path_value = kv.substr(5);
  }
  std::string program = resolve_program(spec.argv[0], path_value);
  if (program.empty()) {
    out.start_error = "program \"" + spec.argv[0] + "\" not found on PATH=" + path_value;
    return out;
  }
  // So that daemons which double-fork and setsid() are re-parented to us, where we can see them.
  prctl(PR_SET_CHILD_SUBREAPER, 1);

  int out_pipe[2], err_pipe[2], exec_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0 || pipe2(exec_pipe, O_CLOEXEC) != 0) {
    return io_error(std::string("pipe: ") + std::strerror(errno));
  }
  Fd out_r{out_pipe[0]}, out_w{out_pipe[1]}, err_r{err_pipe[0]}, err_w{err_pipe[1]}, exec_r{exec_pipe[0]},
      exec_w{exec_pipe[1]};

  std::vector<char*> argv, envp;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : spec.environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  // The case's cgroup and the user namespace's id maps are made before the fork.
  CaseCgroup cgroup;
  SandboxChildArgs sandbox_args;
  if (spec.sandbox != nullptr) {
    KILN_ASSIGN_OR_RETURN(cgroup, CaseCgroup::create(*spec.sandbox));
    sandbox_args = sandbox_child_args(cgroup);
  }
  // What the child reports when it cannot start: the failing step ("" for chdir/exec) and errno.
  struct StartFailure {
    int err = 0;
    char step[64] = {};
  };

  Clock::time_point t0 = Clock::now();
  pid_t pid = fork();
  if (pid < 0) return io_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Child: only async-signal-safe calls from here to exec.
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    StartFailure failure;
    const char* step = nullptr;
    if (spec.sandbox != nullptr) failure.err = apply_sandbox_in_child(*spec.sandbox, sandbox_args, &step);
    if (failure.err != 0) {
      for (size_t i = 0; step != nullptr && step[i] != '\0' && i + 1 < sizeof failure.step; ++i) failure.step[i] = step[i];
    } else if (chdir(spec.working_directory.c_str()) != 0) {
      failure.err = errno;
    } else {
      execve(program.c_str(), argv.data(), envp.data());
      failure.err = errno;
    }
    ssize_t ignored = write(exec_pipe[1], &failure, sizeof failure);
    (void)ignored;
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent, so that signals cannot race the child's own call
  out_w.reset();
  err_w.reset();
  exec_w.reset();
  StartFailure failure;
  if (read(exec_r.fd, &failure, sizeof failure) == static_cast<ssize_t>(sizeof failure)) {
    waitpid(pid, nullptr, 0);
    out.start_error = failure.step[0] != '\0'
                          ? "the sandbox could not be applied to " + program + ": " + failure.step + ": " +
                                std::strerror(failure.err)
                          : "cannot start " + program + " in " + spec.working_directory + ": " + std::strerror(failure.err);
    return out;
  }
  out.started = true;

  Capture capture(spec.capture_limit_bytes);
  auto drain = [&](int timeout_ms) {
    pollfd fds[2] = {{out_r.fd, POLLIN, 0}, {err_r.fd, POLLIN, 0}};
    int n = poll(fds, 2, timeout_ms);
    if (n <= 0) return false;
    char buf[65536];
    bool any = false;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        any = true;
        if (i == 0) capture.append(out.stdout_text, out.stdout_bytes, out.stdout_truncated, out.combined_text, buf, got);
        else capture.append(out.stderr_text, out.stderr_bytes, out.stderr_truncated, out.combined_text, buf, got);
      } else if (got == 0) {
        (i == 0 ? out_r : err_r).reset();
      }
    }
    return any;
  };

  // Escalation: SIGINT at the deadline, SIGTERM after the interrupt grace, SIGKILL after the
  // terminate grace. Each goes to the whole process group.
  Clock::time_point deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(spec.timeout_seconds));
  int stage = 0;
  Clock::time_point next_signal = deadline;
  int status = 0;
  while (true) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    Clock::time_point now = Clock::now();
    if (now >= next_signal) {
      static const int kSignals[] = {SIGINT, SIGTERM, SIGKILL};
      static const char* kNames[] = {"SIGINT", "SIGTERM", "SIGKILL"};
      if (stage < 3) {
        out.timed_out = true;
        kill(-pid, kSignals[stage]);
        out.signals_sent.push_back(kNames[stage]);
        double grace = stage == 0 ? spec.interrupt_grace_seconds : spec.terminate_grace_seconds;
        next_signal = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace));
        ++stage;
      }
    }
    if (out_r.fd < 0 && err_r.fd < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } else {
      drain(10);
    }
  }
  out.duration_seconds = seconds_since(t0);
  if (WIFEXITED(status)) {
    out.exited = true;
    out.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    out.term_signal = WTERMSIG(status);
  }

  // Let output already in flight arrive, then look for anything the case left running.
  Clock::time_point settle = Clock::now();
  while ((out_r.fd >= 0 || err_r.fd >= 0) && seconds_since(settle) < 0.2) drain(20);
  reap_children_nonblocking();
  std::set<int> seen;
  for (int attempt = 0; attempt < 50; ++attempt) {
    std::vector<int> alive = find_leftovers(pid);
    if (alive.empty()) break;
    for (int p : alive) {
      if (seen.insert(p).second) out.leftovers.push_back({p, read_cmdline(p)});
      kill(p, SIGKILL);
    }
    kill(-pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    reap_children_nonblocking();
  }
  // Descendants are gone, so the pipes reach EOF; keep what they wrote.
  Clock::time_point tail = Clock::now();
  while ((out_r.fd >= 0 || err_r.fd >= 0) && seconds_since(tail) < 2.0) drain(50);
  return out;
}

}  // namespace kiln::qualify
