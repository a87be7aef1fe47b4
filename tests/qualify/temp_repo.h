// A throwaway git repository under /tmp for runner tests: files are written, committed with a
// local identity, and the directory is removed at the end. Never touches the project's own repo.
#pragma once

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kiln::qualify::testing {

class TempRepo {
 public:
  TempRepo() {
    char tmpl[] = "/tmp/kiln-qualify-test-XXXXXX";
    root_ = mkdtemp(tmpl);
    git({"init", "-q", "-b", "main"});
    git({"config", "user.name", "Kiln Test"});
    git({"config", "user.email", "test@kiln.invalid"});
    git({"config", "commit.gpgsign", "false"});
  }
  ~TempRepo() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  TempRepo(const TempRepo&) = delete;
  TempRepo& operator=(const TempRepo&) = delete;

  const std::string& root() const { return root_; }
  std::string path(const std::string& rel) const { return root_ + "/" + rel; }

  void write(const std::string& rel, const std::string& contents) const {
    std::filesystem::create_directories(std::filesystem::path(path(rel)).parent_path());
    std::ofstream(path(rel), std::ios::binary | std::ios::trunc) << contents;
  }
  std::string read(const std::string& rel) const {
    std::ifstream in(path(rel), std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  void commit_all(const std::string& message = "fixture") const {
    git({"add", "-A"});
    git({"commit", "-q", "-m", message});
  }
  // Runs git in the repository without a shell; returns the exit status.
  int git(const std::vector<std::string>& args) const {
    pid_t pid = fork();
    if (pid == 0) {
      std::vector<char*> argv;
      std::string g = "git", c = "-C";
      argv.push_back(g.data());
      argv.push_back(c.data());
      argv.push_back(const_cast<char*>(root_.c_str()));
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execvp("git", argv.data());
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  std::string root_;
};

}  // namespace kiln::qualify::testing
