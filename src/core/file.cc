#include "core/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace loom {

namespace {

std::string SysError(int err) { return std::strerror(err); }

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Closes the descriptor and removes the temporary file unless Commit() was called.
class TempFile {
 public:
  TempFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  int fd() const { return fd_; }
  int Close() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }
  void Commit() { committed_ = true; }

 private:
  std::string path_;
  int fd_;
  bool committed_ = false;
};

}  // namespace

std::string TempPathFor(const std::string& path) { return path + ".tmp." + std::to_string(::getpid()); }

// Note [Atomic file writes] in file.h.
void WriteFileAtomic(const std::string& path, const std::vector<std::string_view>& pieces, const char* component) {
  const std::string tmp = TempPathFor(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  LOOM_CHECK(fd >= 0, IOError, "[", component, "] cannot write '", path, "': cannot open '", tmp,
             "' for writing: ", SysError(errno));
  TempFile file(tmp, fd);
  for (std::string_view piece : pieces) {
    const char* p = piece.data();
    size_t left = piece.size();
    while (left > 0) {
      ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      LOOM_CHECK(n > 0, IOError, "[", component, "] cannot write '", path, "': writing '", tmp,
                 "' failed: ", n < 0 ? SysError(errno) : std::string("no progress"));
      p += n;
      left -= size_t(n);
    }
  }
  LOOM_CHECK(::fsync(fd) == 0, IOError, "[", component, "] cannot write '", path, "': fsync of '", tmp,
             "' failed: ", SysError(errno));
  LOOM_CHECK(file.Close() == 0, IOError, "[", component, "] cannot write '", path, "': closing '", tmp,
             "' failed: ", SysError(errno));
  LOOM_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, IOError, "[", component, "] cannot write '", path,
             "': renaming '", tmp, "' failed: ", SysError(errno));
  file.Commit();
  // Make the rename durable. Failure here is not worth an error: the data is complete either way.
  int dfd = ::open(DirName(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string ReadFile(const std::string& path, const char* component) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LOOM_CHECK(fd >= 0, IOError, "[", component, "] cannot open '", path, "': ", SysError(errno));
  struct stat st;
  bool stat_ok = ::fstat(fd, &st) == 0;
  if (!stat_ok || !S_ISREG(st.st_mode)) {
    int err = stat_ok ? 0 : errno;
    ::close(fd);
    LOOM_CHECK(false, IOError, "[", component, "] cannot read '", path, "': ",
               err ? SysError(err) : std::string("not a regular file"));
  }
  std::string data;
  data.resize(size_t(st.st_size));
  size_t got = 0;
  while (got < data.size()) {
    ssize_t n = ::read(fd, &data[got], data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      LOOM_CHECK(false, IOError, "[", component, "] cannot read '", path, "': ",
                 n < 0 ? SysError(err) : "the file shrank while it was read");
    }
    got += size_t(n);
  }
  ::close(fd);
  return data;
}

}  // namespace loom
