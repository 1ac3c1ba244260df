#include "backends/pt2/stored_zip.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <cerrno>
#include <cstring>

#include "backends/weight_file.h"
#include "core/error.h"

namespace hfx {
namespace {

constexpr uint32_t kLocalSignature = 0x04034b50, kCentralSignature = 0x02014b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50, kZip64LocatorSignature = 0x07064b50, kEndSignature = 0x06054b50;
constexpr uint16_t kVersion = 45;         // zip64
constexpr uint16_t kUtf8Names = 0x0800;
constexpr uint16_t kDosDate = 0x21;       // 1980-01-01: records carry no time, so archives are reproducible
constexpr uint16_t kZip64Extra = 0x0001, kPaddingExtra = 0x4246;  // torch's writer pads with id "FB"
constexpr uint32_t kMax32 = 0xffffffffu;
constexpr size_t kLocalFixed = 30, kZip64LocalExtra = 20, kPaddingHeader = 4;

class Bytes {
 public:
  Bytes& u16(uint16_t v) { return put(v, 2); }
  Bytes& u32(uint32_t v) { return put(v, 4); }
  Bytes& u64(uint64_t v) { return put(v, 8); }
  Bytes& str(std::string_view s) {
    out_.append(s);
    return *this;
  }
  Bytes& zeros(size_t n) {
    out_.append(n, '\0');
    return *this;
  }
  const std::string& data() const { return out_; }

 private:
  Bytes& put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  std::string out_;
};

uint64_t align_up(uint64_t v) { return (v + StoredZip::kAlignment - 1) / StoredZip::kAlignment * StoredZip::kAlignment; }

}  // namespace

uint64_t StoredZip::header_reserve(const std::string& name) {
  return kLocalFixed + name.size() + kZip64LocalExtra + kPaddingHeader;
}

StoredZip::StoredZip(const std::filesystem::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(path.string(), ": cannot open: ", std::strerror(errno));
  const off_t end = ::lseek(fd_, 0, SEEK_END);
  if (end < 0) fail(path.string(), ": cannot seek: ", std::strerror(errno));
  end_ = static_cast<uint64_t>(end);
}

StoredZip::~StoredZip() {
  if (fd_ >= 0) ::close(fd_);
}

void StoredZip::write_at(const void* data, size_t n, uint64_t offset) { pwrite_fully(fd_, data, n, offset, path_); }

uint32_t StoredZip::crc_of(uint64_t offset, uint64_t size) {
  std::vector<unsigned char> buf(std::min<uint64_t>(size, 4u << 20));
  uLong crc = crc32(0, nullptr, 0);
  while (size > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(size, buf.size()));
    const ssize_t r = ::pread(fd_, buf.data(), n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) fail(path_.string(), ": cannot read back a record: ", r < 0 ? std::strerror(errno) : "short file");
    crc = crc32(crc, buf.data(), static_cast<uInt>(r));
    offset += static_cast<uint64_t>(r), size -= static_cast<uint64_t>(r);
  }
  return static_cast<uint32_t>(crc);
}

void StoredZip::write_local_header(const Entry& e, uint64_t data_offset) {
  const uint64_t length = data_offset - e.header_offset;
  HFX_CHECK(length >= header_reserve(e.name) && length - header_reserve(e.name) <= 0xffff,
            "zip record ", e.name, ": header room ", length);
  const size_t padding = static_cast<size_t>(length - kLocalFixed - e.name.size() - kZip64LocalExtra - kPaddingHeader);
  Bytes h;
  h.u32(kLocalSignature).u16(kVersion).u16(kUtf8Names).u16(0).u16(0).u16(kDosDate).u32(e.crc);
  h.u32(kMax32).u32(kMax32);  // the sizes are in the zip64 extra field
  h.u16(static_cast<uint16_t>(e.name.size())).u16(static_cast<uint16_t>(length - kLocalFixed - e.name.size()));
  h.str(e.name);
  h.u16(kZip64Extra).u16(16).u64(e.size).u64(e.size);
  h.u16(kPaddingExtra).u16(static_cast<uint16_t>(padding)).zeros(padding);
  write_at(h.data().data(), h.data().size(), e.header_offset);
}

void StoredZip::adopt_all(const std::vector<Adopted>& records) {
  std::vector<uint32_t> crcs(records.size());
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (size_t i = next++; i < records.size(); i = next++) {
      try {
        HFX_CHECK(records[i].data_offset + records[i].size <= end_, "zip record ", records[i].name, " lies past the end");
        crcs[i] = crc_of(records[i].data_offset, records[i].size);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        next = records.size();
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t workers = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 4);
  for (size_t i = 1; i < std::min(workers, records.size()); ++i) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  for (size_t i = 0; i < records.size(); ++i) {
    entries_.push_back({records[i].name, records[i].header_offset, records[i].size, crcs[i]});
    write_local_header(entries_.back(), records[i].data_offset);
  }
}

void StoredZip::append(const std::string& name, std::string_view data) {
  const uint64_t header = end_, data_offset = align_up(header + header_reserve(name));
  write_at(data.data(), data.size(), data_offset);
  entries_.push_back({name, header, data.size(),
                      static_cast<uint32_t>(crc32(crc32(0, nullptr, 0), reinterpret_cast<const Bytef*>(data.data()),
                                                  static_cast<uInt>(data.size())))});
  write_local_header(entries_.back(), data_offset);
  end_ = data_offset + data.size();
}

void StoredZip::finish() {
  Bytes cd;
  for (const Entry& e : entries_) {
    const bool big = e.size >= kMax32, far = e.header_offset >= kMax32;
    Bytes extra;
    if (big) extra.u64(e.size).u64(e.size);
    if (far) extra.u64(e.header_offset);
    const std::string& x = extra.data();
    cd.u32(kCentralSignature).u16(kVersion).u16(kVersion).u16(kUtf8Names).u16(0).u16(0).u16(kDosDate).u32(e.crc);
    cd.u32(big ? kMax32 : static_cast<uint32_t>(e.size)).u32(big ? kMax32 : static_cast<uint32_t>(e.size));
    cd.u16(static_cast<uint16_t>(e.name.size())).u16(static_cast<uint16_t>(x.empty() ? 0 : 4 + x.size()));
    cd.u16(0).u16(0).u16(0).u32(0).u32(far ? kMax32 : static_cast<uint32_t>(e.header_offset));
    cd.str(e.name);
    if (!x.empty()) cd.u16(kZip64Extra).u16(static_cast<uint16_t>(x.size())).str(x);
  }
  const uint64_t cd_offset = end_, cd_size = cd.data().size(), zip64_end = cd_offset + cd_size;
  const uint64_t count = entries_.size();
  Bytes tail;
  tail.u32(kZip64EndSignature).u64(44).u16(kVersion).u16(kVersion).u32(0).u32(0).u64(count).u64(count);
  tail.u64(cd_size).u64(cd_offset);
  tail.u32(kZip64LocatorSignature).u32(0).u64(zip64_end).u32(1);
  const auto count16 = static_cast<uint16_t>(std::min<uint64_t>(count, 0xffff));
  tail.u32(kEndSignature).u16(0).u16(0).u16(count16).u16(count16);
  tail.u32(static_cast<uint32_t>(std::min<uint64_t>(cd_size, kMax32)));
  tail.u32(static_cast<uint32_t>(std::min<uint64_t>(cd_offset, kMax32))).u16(0);
  write_at(cd.data().data(), cd.data().size(), cd_offset);
  write_at(tail.data().data(), tail.data().size(), zip64_end);
  end_ = zip64_end + tail.data().size();
  if (::ftruncate(fd_, static_cast<off_t>(end_)) != 0 || ::close(fd_) != 0)
    fail(path_.string(), ": cannot finish: ", std::strerror(errno));
  fd_ = -1;
}

}  // namespace hfx
