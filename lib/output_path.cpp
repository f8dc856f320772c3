// output_path.cpp: the write probes of output_path.h (POSIX open/access).
#include "output_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "input_error.h"

namespace pb {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void refuse(const std::string& flag, const std::string& path, const std::string& why) {
  throw InputError(flag + " " + path + ": " + why);
}

// `dir` (to be made if missing) can hold new entries.
void check_dir_writable(const std::string& dir, const std::string& flag, const std::string& path) {
  fs::path p = dir.empty() ? fs::path(".") : fs::path(dir);
  // The nearest existing ancestor decides whether the missing ones can be made.
  while (true) {
    struct stat st {};
    if (stat(p.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) refuse(flag, path, p.string() + " is not a directory");
      if (access(p.c_str(), W_OK | X_OK) != 0)
        refuse(flag, path, "cannot write in " + p.string() + ": " + std::strerror(errno));
      return;
    }
    if (errno != ENOENT && errno != ENOTDIR)
      refuse(flag, path, "cannot reach " + p.string() + ": " + std::strerror(errno));
    const fs::path parent = p.parent_path();
    if (parent.empty() || parent == p) p = fs::path(".");
    else p = parent;
  }
}

}  // namespace

void check_output_file(const std::string& path, const std::string& flag) {
  if (path.empty()) refuse(flag, "''", "expected a file path, found an empty string");
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) refuse(flag, path, "is a directory, expected a file");
    if (S_ISFIFO(st.st_mode)) refuse(flag, path, "is a FIFO, expected a regular file");
    // Append: an existing report is not truncated by the probe. O_NONBLOCK: a device never blocks.
    const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) refuse(flag, path, std::string("cannot open for writing: ") + std::strerror(errno));
    close(fd);
    return;
  }
  if (errno != ENOENT && errno != ENOTDIR) refuse(flag, path, std::string("cannot reach: ") + std::strerror(errno));
  const fs::path parent = fs::path(path).parent_path();
  check_dir_writable(parent.string(), flag, path);  // a missing one is made when the report is written
  struct stat pst {};
  if (!parent.empty() && stat(parent.c_str(), &pst) != 0) return;
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) refuse(flag, path, std::string("cannot create: ") + std::strerror(errno));
  close(fd);
  unlink(path.c_str());
}

void check_output_dir(const std::string& path, const std::string& flag) {
  if (path.empty()) refuse(flag, "''", "expected a directory path, found an empty string");
  check_dir_writable(path, flag, path);
}

}  // namespace pb
