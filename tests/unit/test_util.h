// Helpers shared by the unit tests: a self-cleaning temp directory, file I/O, and a writer for
// small safetensors files built byte by byte (no Python).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace hfx::test {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed (with its contents) on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string tag = info ? std::string(info->test_suite_name()) + "." + info->name() : "hfx";
    for (char& c : tag)
      if (c == '/') c = '_';
    path_ = fs::temp_directory_path() /
            ("hfx-unit-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + tag);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

inline void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  std::string out(static_cast<size_t>(in.tellg()), '\0');
  in.seekg(0);
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  return out;
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  std::string out(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

template <class T>
std::vector<T> values_of(const std::string& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

inline std::string le64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xffu);
  return out;
}

// File bytes: 8-byte little-endian header length, header text, data section.
inline std::string safetensors_bytes(const std::string& header_text, const std::string& data) {
  return le64(header_text.size()) + header_text + data;
}

inline std::string safetensors_bytes(const nlohmann::json& header, const std::string& data) {
  return safetensors_bytes(header.dump(), data);
}

// Builds a well-formed safetensors file tensor by tensor, laying the data out back to back.
class SafetensorsWriter {
 public:
  SafetensorsWriter& add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                         const std::string& bytes) {
    const uint64_t begin = data_.size();
    data_ += bytes;
    header_[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, data_.size()}}};
    return *this;
  }
  SafetensorsWriter& add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    return add(name, "F32", std::move(shape), bytes_of(v));
  }
  SafetensorsWriter& metadata(const std::string& key, const std::string& value) {
    header_["__metadata__"][key] = value;
    return *this;
  }
  nlohmann::json& header() { return header_; }
  std::string& data() { return data_; }
  std::string bytes() const { return safetensors_bytes(header_, data_); }
  void write(const fs::path& path) const { write_file(path, bytes()); }

 private:
  nlohmann::json header_ = nlohmann::json::object();
  std::string data_;
};

// Runs `fn`, expecting an hfx::Error; returns its message ("" and a test failure otherwise).
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const hfx::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected hfx::Error, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected hfx::Error, nothing was thrown";
  return {};
}

inline ::testing::AssertionResult contains_fmt(const char* text_expr, const char* part_expr,
                                               const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << text_expr << " does not contain " << part_expr << "\n  text: \""
                                       << text << "\"\n  part: \"" << part << "\"";
}

}  // namespace hfx::test

// EXPECT_HAS(text, part): `text` contains the substring `part` (gmock is not linked).
#define EXPECT_HAS(text, part) EXPECT_PRED_FORMAT2(::hfx::test::contains_fmt, text, part)
