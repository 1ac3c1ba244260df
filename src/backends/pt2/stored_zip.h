// A zip archive of stored (uncompressed) records, in the layout torch.export.save writes for a
// .pt2: every record's data 64-byte aligned (readers may map it), zip64 where sizes or offsets
// need it. Large records are written first, in place, by someone else (the weight streamer);
// the archive then adopts them, appends the small ones and writes the central directory.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace hfx {

class StoredZip {
 public:
  static constexpr uint64_t kAlignment = 64;
  // The bytes a record named `name` needs ahead of its data (its local header, at least).
  static uint64_t header_reserve(const std::string& name);

  // Opens the file written so far (records adopted later lie in it already).
  explicit StoredZip(const std::filesystem::path& path);
  ~StoredZip();
  StoredZip(const StoredZip&) = delete;
  StoredZip& operator=(const StoredZip&) = delete;

  // Records whose `size` bytes were written at `data_offset`; each local header goes in
  // [header_offset, data_offset), which must hold header_reserve(name) bytes. Their CRCs are
  // read back, on several threads.
  struct Adopted {
    std::string name;
    uint64_t header_offset, data_offset, size;
  };
  void adopt_all(const std::vector<Adopted>& records);
  // A record appended at the end of the archive.
  void append(const std::string& name, std::string_view data);
  // Writes the central directory; the archive is complete once this returns.
  void finish();

 private:
  struct Entry {
    std::string name;
    uint64_t header_offset, size;
    uint32_t crc;
  };
  void write_local_header(const Entry& e, uint64_t data_offset);
  void write_at(const void* data, size_t n, uint64_t offset);
  uint32_t crc_of(uint64_t offset, uint64_t size);

  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t end_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace hfx
