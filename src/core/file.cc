#include "core/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <new>
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

// Note [Names are C strings] in file.h.
void CheckNoNulByte(const std::string& text, const char* component, const char* what) {
  size_t nul = text.find('\0');
  if (nul == std::string::npos) return;
  std::string shown;
  for (char c : text) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
  throw ValueError(detail::Cat("[", component, "] ", what, " '", shown, "' contains a NUL byte (at ", nul,
                               "), which it cannot hold"));
}

namespace {
// A fresh temporary beside `path`, created here (O_EXCL): never a file or link someone else made
// under a guessable name (O_NOFOLLOW), never the one another thread of this process is writing.
int CreateTemp(const std::string& path, std::string& tmp) {
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0;; ++attempt) {
    tmp = detail::Cat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST || attempt == 100) return fd;
  }
}
}  // namespace

// Note [Atomic file writes] in file.h.
void WriteFileAtomic(const std::string& path, const std::vector<std::string_view>& pieces, const char* component) {
  CheckNoNulByte(path, component, "the path");
  std::string tmp;
  int fd = CreateTemp(path, tmp);
  LOOM_CHECK(fd >= 0, IOError, "[", component, "] cannot write '", path, "': cannot open '", tmp,
             "' for writing: ", SysError(errno));
  TempFile file(tmp, fd);
  // Replacing a file keeps its permission bits: a checkpoint made private (0600) stays private.
  struct stat old;
  if (::stat(path.c_str(), &old) == 0 && S_ISREG(old.st_mode))
    LOOM_CHECK(::fchmod(fd, old.st_mode & 07777) == 0, IOError, "[", component, "] cannot write '", path,
               "': cannot give '", tmp, "' the mode of the file it replaces: ", SysError(errno));
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

// Only regular files are read. A FIFO (or a terminal, a socket) would block the reader in open()
// or read() for as long as nothing writes to it, so the kind is checked before the file is
// opened, and opening does not wait (O_NONBLOCK) in case the path changed in between; the
// descriptor is checked again once open.
std::string ReadFile(const std::string& path, const char* component, size_t max_bytes) {
  CheckNoNulByte(path, component, "the path");
  struct stat st;
  LOOM_CHECK(::stat(path.c_str(), &st) == 0, IOError, "[", component, "] cannot open '", path, "': ",
             SysError(errno));
  LOOM_CHECK(S_ISREG(st.st_mode), IOError, "[", component, "] cannot read '", path, "': not a regular file",
             S_ISDIR(st.st_mode) ? " (a directory)" : S_ISFIFO(st.st_mode) ? " (a FIFO)" : "");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  LOOM_CHECK(fd >= 0, IOError, "[", component, "] cannot open '", path, "': ", SysError(errno));
  bool stat_ok = ::fstat(fd, &st) == 0;
  if (!stat_ok || !S_ISREG(st.st_mode)) {
    int err = stat_ok ? 0 : errno;
    ::close(fd);
    LOOM_CHECK(false, IOError, "[", component, "] cannot read '", path, "': ",
               err ? SysError(err) : std::string("not a regular file"));
  }
  if (uint64_t(st.st_size) > max_bytes) {
    ::close(fd);
    LOOM_CHECK(false, IOError, "[", component, "] cannot read '", path, "': it is ", uint64_t(st.st_size),
               " bytes, more than the ", max_bytes, " this reader takes");
  }
  std::string data;
  try {
    data.resize(size_t(st.st_size));
  } catch (const std::bad_alloc&) {
    ::close(fd);
    LOOM_CHECK(false, IOError, "[", component, "] cannot read '", path, "': no memory for its ", uint64_t(st.st_size),
               " bytes");
  }
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
