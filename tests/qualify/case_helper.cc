// A stand-in for case commands in runner tests: each mode misbehaves (or behaves) in one
// specific way the runner must detect. Usage: qualify_case_helper MODE [ARGS...]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace {

void write_pid(const char* path, pid_t pid) {
  std::ofstream out(path);
  out << pid << "\n";
}

void sleep_seconds(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// Writes the case result the runner asked for; `body` is the whole document.
int write_result(const std::string& body) {
  const char* path = std::getenv("KILN_QUALIFICATION_CASE_RESULT");
  if (path == nullptr) {
    std::fprintf(stderr, "KILN_QUALIFICATION_CASE_RESULT is not set\n");
    return 3;
  }
  std::ofstream out(path);
  out << body;
  return 0;
}

std::string result_doc(const std::string& case_id, const std::string& status, const std::string& metrics) {
  return "{\"schema_version\": 1, \"case_id\": \"" + case_id + "\", \"status\": \"" + status +
         "\", \"duration_seconds\": 0.5, \"effective_config\": {\"dtype\": \"f32\"}, \"metrics\": [" + metrics +
         "], \"tolerances\": [], \"details\": {}}";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  std::string mode = argv[1];
  if (mode == "exit") return std::atoi(argv[2]);
  if (mode == "print") {  // print STREAM TEXT
    std::fprintf(std::string(argv[2]) == "stderr" ? stderr : stdout, "%s\n", argv[3]);
    return 0;
  }
  if (mode == "sleep") {  // sleep SECONDS [ignore-sigint]
    if (argc > 3 && std::string(argv[3]) == "ignore-sigint") signal(SIGINT, SIG_IGN);
    sleep_seconds(std::atof(argv[2]));
    return 0;
  }
  if (mode == "child-and-sleep") {  // child-and-sleep SECONDS PIDFILE: a descendant in our group
    pid_t child = fork();
    if (child == 0) {
      sleep_seconds(std::atof(argv[2]));
      _exit(0);
    }
    write_pid(argv[3], child);
    sleep_seconds(std::atof(argv[2]));
    return 0;
  }
  if (mode == "daemon") {  // daemon PIDFILE: double fork + setsid, then the parent exits 0
    pid_t first = fork();
    if (first == 0) {
      setsid();
      pid_t second = fork();
      if (second == 0) {
        write_pid(argv[2], getpid());
        sleep_seconds(60);
        _exit(0);
      }
      _exit(0);
    }
    sleep_seconds(0.3);  // let the grandchild write its pid
    return 0;
  }
  if (mode == "spam") {  // spam BYTES
    long n = std::atol(argv[2]);
    std::string chunk(4096, 'x');
    while (n > 0) {
      long k = n < 4096 ? n : 4096;
      fwrite(chunk.data(), 1, static_cast<size_t>(k), stdout);
      n -= k;
    }
    return 0;
  }
  if (mode == "connect") {  // connect PORT: a TCP connection to 127.0.0.1:PORT; prints what happened
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(std::atoi(argv[2])));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      std::printf("connected\n");
      return 0;
    }
    std::printf("not connected: %s\n", std::strerror(errno));
    return 1;
  }
  if (mode == "limits") {  // limits: the process and data-segment rlimits the case runs under
    rlimit n{}, d{};
    getrlimit(RLIMIT_NPROC, &n);
    getrlimit(RLIMIT_DATA, &d);
    std::printf("nproc %llu data %llu\n", static_cast<unsigned long long>(n.rlim_cur),
                static_cast<unsigned long long>(d.rlim_cur));
    return 0;
  }
  if (mode == "env") {  // env: print the environment
    for (char** e = environ; *e; ++e) std::printf("%s\n", *e);
    return 0;
  }
  if (mode == "append") {  // append PATH TEXT
    std::ofstream out(argv[2], std::ios::app);
    out << argv[3];
    return 0;
  }
  if (mode == "result") {  // result CASE_ID KIND [COUNTER_FILE]
    std::string id = argv[2], kind = argv[3];
    if (kind == "malformed") return write_result("{\"schema_version\": 1, \"case_id\": ");
    if (kind == "wrong-case") return write_result(result_doc("other", "passed", "{\"name\": \"err\", \"value\": 1, \"unit\": \"abs\"}"));
    if (kind == "undeclared-metric") return write_result(result_doc(id, "passed", "{\"name\": \"speed\", \"value\": 1, \"unit\": \"abs\"}"));
    if (kind == "skipped") return write_result(result_doc(id, "skipped", "{\"name\": \"err\", \"value\": 0, \"unit\": \"abs\"}"));
    if (kind == "counter") {  // err = how many times this has run (1, 2, ...)
      int count = 0;
      {
        std::ifstream in(argv[4]);
        in >> count;
      }
      ++count;
      std::ofstream(argv[4]) << count;
      return write_result(result_doc(id, "passed", "{\"name\": \"err\", \"value\": " + std::to_string(count) + ", \"unit\": \"abs\"}"));
    }
    return write_result(result_doc(id, "passed", "{\"name\": \"err\", \"value\": 0.25, \"unit\": \"abs\"}"));
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 64;
}
