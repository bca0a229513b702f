// Safetensors files (Hugging Face's weight format): an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the raw tensor bytes.
// The reader memory-maps the file and reads tensors in place; the writer streams them one by one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace mpitron::io {

// One tensor of a safetensors header. Offsets are relative to the start of the data (the byte
// after the header), as the format stores them.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", "F64", ... (as written)
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // data_offsets
  int64_t numel() const;
  uint64_t bytes() const { return end - begin; }
};

// Bytes per element of a safetensors dtype name; 0 when the name is not a safetensors dtype.
size_t safetensors_dtype_size(const std::string& dtype);
// True for the dtypes read as float: F32 (in place), F16, BF16, F64 (converted).
bool safetensors_dtype_readable(const std::string& dtype);

// A safetensors file, memory-mapped read-only. The constructor reads and checks the header only
// (no tensor data is touched): UsageError naming the file and the problem for a header length
// outside the file, a header that is not JSON or not an object, an entry without a known dtype,
// a shape whose size differs from its data_offsets, reversed, overlapping or gapped offsets, or
// bytes after the last tensor. A file shorter than its header says (an interrupted download) opens,
// so its header can be planned; require_complete() and every read refuse it.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Tensors in the order of their data (increasing offsets).
  const std::vector<SafetensorsEntry>& tensors() const { return tensors_; }
  const SafetensorsEntry* find(const std::string& name) const;  // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t header_bytes() const { return header_len_; }  // the JSON, padding included
  uint64_t data_bytes_needed() const { return data_needed_; }
  uint64_t data_bytes_present() const { return data_present_; }
  uint64_t file_bytes() const { return file_size_; }

  // UsageError "... is truncated ..." when the file holds fewer data bytes than its header needs.
  void require_complete() const;

  // The tensor's F32 data in place (no copy), or nullptr when its dtype is not F32 or it is not
  // 4-byte aligned. UsageError when the file is truncated.
  const float* f32_data(const SafetensorsEntry& e) const;
  // Raw bytes of the tensor in place (UsageError when truncated).
  const unsigned char* bytes(const SafetensorsEntry& e) const;
  // Converts `count` elements starting at element `first` of the tensor, each `stride` elements
  // apart, into out (float). UsageError when its dtype is not readable or the file is truncated.
  void read(const SafetensorsEntry& e, int64_t first, int64_t count, int64_t stride,
            float* out) const;
  // The whole tensor as float, row-major.
  void read(const SafetensorsEntry& e, float* out) const { read(e, 0, e.numel(), 1, out); }
  // Tells the kernel the tensor's pages are not needed any more (keeps the resident set small
  // when a large file is read tensor by tensor). The mapping stays valid.
  void release(const SafetensorsEntry& e) const { release(e, 0, e.numel()); }
  // The same for elements [first, first + count) of the tensor (the whole pages inside them).
  void release(const SafetensorsEntry& e, int64_t first, int64_t count) const;
  // Every page of the file: a read maps the whole large folio around it (recent kernels), so pages
  // of tensors released before come back as their neighbours are read; a reader that needs each
  // byte once releases everything after each read.
  void release_all() const;

 private:
  void check_present(const SafetensorsEntry& e) const;
  std::string path_;
  int fd_ = -1;
  void* map_ = nullptr;
  uint64_t file_size_ = 0, header_len_ = 0, data_needed_ = 0, data_present_ = 0;
  std::vector<SafetensorsEntry> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// One F32 tensor of a file to write.
struct SafetensorsTensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// Writes a safetensors file as the safetensors library does: compact JSON header with
// "__metadata__" first and the tensors in the given order (the library sorts them by name for
// one dtype; pass them so), padded with spaces to a multiple of 8 bytes; then the data. Tensors
// are streamed: write() takes the next tensor's elements (in one or several calls), in order.
// The file is written to path + ".tmp" and renamed by finish(). UsageError when the file cannot
// be created or written.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, std::vector<SafetensorsTensorSpec> tensors,
                    const std::map<std::string, std::string>& metadata);
  ~SafetensorsWriter();  // removes the .tmp file when finish() was not reached
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  void write(const float* data, size_t count);
  void finish();  // requires every element written

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  uint64_t total_ = 0, written_ = 0;
};

}  // namespace mpitron::io
