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
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

void MappedFile::release(const std::byte* ptr, size_t n) const {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t begin = static_cast<size_t>(ptr - data_) / page * page;
  const size_t end = static_cast<size_t>(ptr - data_) + n;
  if (end > begin) ::madvise(data_ + begin, end - begin, MADV_DONTNEED);
}

}  // namespace hfx
