// Safetensors reader (mmap, header checked before any data is touched) and streaming writer, in
// the layout of Hugging Face's safetensors library (docs: huggingface.co/docs/safetensors).
// Every malformed file gives one UsageError naming the file and what is wrong with it.
#include "io/safetensors.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/check.hpp"

namespace mpitron::io {

namespace {

// The safetensors library refuses headers above 100 MB; so do we (a corrupt length would
// otherwise ask for gigabytes).
constexpr uint64_t kMaxHeader = 100'000'000;

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = man;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400u) == 0);
      bits = sign | (uint32_t(127 - 15 - e) << 23) | ((m & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  return std::bit_cast<float>(bits);
}

template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t safetensors_dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

bool safetensors_dtype_readable(const std::string& d) {
  return d == "F32" || d == "F16" || d == "BF16" || d == "F64";
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const std::string what = "safetensors file " + path;
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw UsageError(fmt::format("cannot open {}: {}", what, errno_text()));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const std::string e = errno_text();
    ::close(fd_);
    throw UsageError(fmt::format("cannot stat {}: {}", what, e));
  }
  file_size_ = uint64_t(st.st_size);
  auto fail = [&](const std::string& problem) {
    if (map_) ::munmap(map_, file_size_);
    ::close(fd_);
    map_ = nullptr;
    fd_ = -1;
    return UsageError(fmt::format("{}: {}", what, problem));
  };
  if (!S_ISREG(st.st_mode)) throw fail("not a regular file");
  if (file_size_ < 8)
    throw fail(
        fmt::format("bad header length: the file has {} bytes, fewer than the 8 of the "
                    "length field",
                    file_size_));
  map_ = ::mmap(nullptr, file_size_, PROT_READ, MAP_SHARED, fd_, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw fail(fmt::format("cannot mmap it: {}", errno_text()));
  }
  const auto* base = static_cast<const unsigned char*>(map_);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base[i];  // little-endian
  header_len_ = n;
  if (n == 0 || n > kMaxHeader || n > file_size_ - 8)
    throw fail(fmt::format(
        "bad header length {}: the file has {} bytes after the length field (limit {} bytes)", n,
        file_size_ - 8, kMaxHeader));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(base + 8, base + 8 + n);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number
    throw fail(fmt::format("header is not JSON ({})", e.what()));
  }
  if (!header.is_object())
    throw fail(fmt::format("header is not a JSON object but {}", header.type_name()));
  data_present_ = file_size_ - 8 - n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw fail("header's __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw fail(fmt::format("header's __metadata__.{} is not a string", m.key()));
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) throw fail(fmt::format("header entry '{}' is not an object", name));
    SafetensorsEntry e;
    e.name = name;
    if (!v.contains("dtype") || !v["dtype"].is_string())
      throw fail(fmt::format("tensor '{}' has no dtype string", name));
    e.dtype = v["dtype"].get<std::string>();
    const size_t esize = safetensors_dtype_size(e.dtype);
    if (esize == 0) throw fail(fmt::format("tensor '{}' has unknown dtype '{}'", name, e.dtype));
    if (!v.contains("shape") || !v["shape"].is_array())
      throw fail(fmt::format("tensor '{}' has no shape array", name));
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        throw fail(
            fmt::format("tensor '{}' has a shape entry that is not a non-negative integer", name));
      e.shape.push_back(d.get<int64_t>());
    }
    const auto& off = v.contains("data_offsets") ? v["data_offsets"] : nlohmann::json();
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      throw fail(fmt::format("tensor '{}' has no data_offsets [begin, end]", name));
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end)
      throw fail(
          fmt::format("tensor '{}' has reversed data_offsets [{}, {}]", name, e.begin, e.end));
    // Size check without overflow: numel * esize must equal end - begin.
    uint64_t numel = 1;
    bool overflow = false;
    for (int64_t d : e.shape) {
      if (d != 0 && numel > std::numeric_limits<uint64_t>::max() / esize / uint64_t(d))
        overflow = true;
      numel *= uint64_t(d);
    }
    if (overflow || numel * esize != e.bytes())
      throw fail(fmt::format(
          "shape/size mismatch: tensor '{}' of shape {} and dtype {} needs {} bytes, its "
          "data_offsets [{}, {}] hold {}",
          name, nlohmann::json(e.shape).dump(), e.dtype,
          overflow ? std::string("too many") : std::to_string(numel * esize), e.begin, e.end,
          e.bytes()));
    tensors_.push_back(std::move(e));
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : tensors_) {
    if (e.begin < pos)
      throw fail(fmt::format("tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", prev->name,
                             prev->begin, prev->end, e.name, e.begin, e.end));
    if (e.begin > pos)
      throw fail(fmt::format(
          "tensor '{}' has data_offsets [{}, {}] outside the data: the tensors before it end at "
          "byte {} (the data must be covered without gaps)",
          e.name, e.begin, e.end, pos));
    pos = e.end;
    prev = &e;
  }
  data_needed_ = pos;
  if (data_present_ > data_needed_)
    throw fail(fmt::format(
        "{} bytes follow the last tensor's data (the header's offsets end at {}, the data has {})",
        data_present_ - data_needed_, data_needed_, data_present_));
  for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, file_size_);
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::require_complete() const {
  if (data_present_ < data_needed_)
    throw UsageError(fmt::format(
        "safetensors file {} is truncated: its header describes {} bytes of tensor data, the file "
        "holds {} (an interrupted download?)",
        path_, data_needed_, data_present_));
}

void SafetensorsFile::check_present(const SafetensorsEntry& e) const {
  if (e.end > data_present_)
    throw UsageError(fmt::format(
        "safetensors file {} is truncated: tensor '{}' needs data bytes [{}, {}], the file holds "
        "{} (an interrupted download?)",
        path_, e.name, e.begin, e.end, data_present_));
}

const unsigned char* SafetensorsFile::bytes(const SafetensorsEntry& e) const {
  check_present(e);
  return static_cast<const unsigned char*>(map_) + 8 + header_len_ + e.begin;
}

const float* SafetensorsFile::f32_data(const SafetensorsEntry& e) const {
  const unsigned char* p = bytes(e);
  if (e.dtype != "F32" || reinterpret_cast<uintptr_t>(p) % alignof(float) != 0) return nullptr;
  return reinterpret_cast<const float*>(p);
}

void SafetensorsFile::read(const SafetensorsEntry& e, int64_t first, int64_t count, int64_t stride,
                           float* out) const {
  if (!safetensors_dtype_readable(e.dtype))
    throw UsageError(fmt::format(
        "safetensors file {}: tensor '{}' has dtype {}, which is not read as float (F32, F16, "
        "BF16, F64 are)",
        path_, e.name, e.dtype));
  MPITRON_REQUIRE(
      first >= 0 && count >= 0 && (count == 0 || first + (count - 1) * stride < e.numel()),
      fmt::format("{}: read outside the tensor", e.name));
  const unsigned char* p = bytes(e);
  if (e.dtype == "F32") {
    if (stride == 1) {
      std::memcpy(out, p + size_t(first) * 4, size_t(count) * 4);
    } else {
      for (int64_t i = 0; i < count; ++i) out[i] = load<float>(p + size_t(first + i * stride) * 4);
    }
  } else if (e.dtype == "F16") {
    for (int64_t i = 0; i < count; ++i)
      out[i] = half_to_float(load<uint16_t>(p + size_t(first + i * stride) * 2));
  } else if (e.dtype == "BF16") {
    for (int64_t i = 0; i < count; ++i)
      out[i] =
          std::bit_cast<float>(uint32_t(load<uint16_t>(p + size_t(first + i * stride) * 2)) << 16);
  } else {  // F64
    for (int64_t i = 0; i < count; ++i)
      out[i] = float(load<double>(p + size_t(first + i * stride) * 8));
  }
}

void SafetensorsFile::release(const SafetensorsEntry& e, int64_t first, int64_t count) const {
  MPITRON_REQUIRE(first >= 0 && count >= 0 && first + count <= e.numel(),
                  fmt::format("{}: release outside the tensor", e.name));
  if (e.end > data_present_ || count == 0) return;
  const long page = ::sysconf(_SC_PAGESIZE);
  const uint64_t size = safetensors_dtype_size(e.dtype);
  const uint64_t begin = 8 + header_len_ + e.begin + uint64_t(first) * size;
  const uint64_t end = begin + uint64_t(count) * size;
  // Whole pages inside the range only: its neighbours may still be in use.
  const uint64_t a = (begin + uint64_t(page) - 1) / uint64_t(page) * uint64_t(page);
  const uint64_t b = end / uint64_t(page) * uint64_t(page);
  if (b > a) ::madvise(static_cast<char*>(map_) + a, b - a, MADV_DONTNEED);
}

void SafetensorsFile::release_all() const {
  if (map_) ::madvise(map_, file_size_, MADV_DONTNEED);
}

// ---- writer -------------------------------------------------------------------------------------

SafetensorsWriter::SafetensorsWriter(const std::string& path,
                                     std::vector<SafetensorsTensorSpec> tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), tmp_(path + ".tmp") {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  for (const SafetensorsTensorSpec& t : tensors) {
    uint64_t n = 1;
    for (int64_t d : t.shape) {
      MPITRON_REQUIRE(d >= 0, t.name + ": negative dimension");
      n *= uint64_t(d);
    }
    MPITRON_REQUIRE(!header.contains(t.name), t.name + ": written twice");
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = "F32";
    e["shape"] = t.shape;
    e["data_offsets"] = {total_, total_ + n * 4};
    header[t.name] = e;
    total_ += n * 4;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_)
    throw UsageError(fmt::format("cannot create safetensors file {}: {}", tmp_, errno_text()));
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
  if (std::fwrite(len, 1, 8, f_) != 8 ||
      std::fwrite(text.data(), 1, text.size(), f_) != text.size())
    throw UsageError(fmt::format("cannot write {}: {}", tmp_, errno_text()));
}

SafetensorsWriter::~SafetensorsWriter() {
  if (f_) {
    std::fclose(f_);
    std::remove(tmp_.c_str());
  }
}

void SafetensorsWriter::write(const float* data, size_t count) {
  MPITRON_REQUIRE(f_ && written_ + count * 4 <= total_,
                  fmt::format("{}: more data than the header describes", path_));
  static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
  if (std::fwrite(data, sizeof(float), count, f_) != count)
    throw UsageError(fmt::format("cannot write {}: {}", tmp_, errno_text()));
  written_ += count * 4;
}

void SafetensorsWriter::finish() {
  MPITRON_REQUIRE(f_ && written_ == total_,
                  fmt::format("{}: {} of {} data bytes written", path_, written_, total_));
  const bool ok = std::fflush(f_) == 0 && ::fsync(::fileno(f_)) == 0;
  const std::string why = ok ? "" : errno_text();
  const bool closed = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!ok || !closed) {
    std::remove(tmp_.c_str());
    throw UsageError(fmt::format("cannot write {}: {}", tmp_, ok ? errno_text() : why));
  }
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) {
    std::remove(tmp_.c_str());
    throw UsageError(fmt::format("cannot rename {} to {}: {}", tmp_, path_, ec.message()));
  }
}

}  // namespace mpitron::io
