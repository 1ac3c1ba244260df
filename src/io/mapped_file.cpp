#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace hfx {

MappedFile::MappedFile(const std::filesystem::path& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path.string(), ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path.string(), ": cannot stat: ", std::strerror(err));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail(path.string(), ": cannot mmap: ", std::strerror(err));
    }
    data_ = static_cast<std::byte*>(p);
  }
  fd_ = fd;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
  ::close(fd_);
}

bool MappedFile::copy_to(const std::byte* ptr, size_t n, int fd, uint64_t offset) const {
  auto in = static_cast<loff_t>(ptr - data_);
  auto out = static_cast<loff_t>(offset);
  while (n > 0) {
    const ssize_t c = ::copy_file_range(fd_, &in, fd, &out, n, 0);
    if (c < 0 && errno == EINTR) continue;
    if (c <= 0) {
      if (static_cast<uint64_t>(out) == offset) return false;  // unsupported here: nothing copied yet
      fail(path_.string(), ": copy to the export failed: ", c < 0 ? std::strerror(errno) : "short copy");
    }
    n -= static_cast<size_t>(c);
  }
  return true;
}

void MappedFile::release(const std::byte* ptr, size_t n) const {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t begin = static_cast<size_t>(ptr - data_) / page * page;
  const size_t end = static_cast<size_t>(ptr - data_) + n;
  if (end > begin) ::madvise(data_ + begin, end - begin, MADV_DONTNEED);
}

}  // namespace hfx
