// Checkpoint writing (collective MPI-IO or gather-to-rank-0), reading by blocks, and discovery.
#include "io/checkpoint.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <regex>

#include "comm/mpi_check.hpp"
#include "comm/world.hpp"

namespace mpitron::io {

namespace fs = std::filesystem;

// ---- blocks -------------------------------------------------------------------------------------

namespace {

int64_t block_numel(const Block& b) {
  return numel(b.count);
}

bool is_u8(const TensorPiece& t) {
  return t.type == ElementType::u8;
}

size_t element_bytes(const TensorPiece& t) {
  return is_u8(t) ? sizeof(uint8_t) : sizeof(float);
}

// The piece's elements as bytes (data, or codes for a u8 piece).
char* piece_bytes(const TensorPiece& t) {
  return is_u8(t) ? reinterpret_cast<char*>(t.codes) : reinterpret_cast<char*>(t.data);
}

hid_t memory_type(const TensorPiece& t) {
  return is_u8(t) ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT;
}

// Appends blocks for [begin, end) of the sub-tensor of `shape` from dimension d on, under the
// fixed leading indices `prefix` (one per dimension before d).
void range_blocks(const std::vector<int64_t>& shape, size_t d, std::vector<int64_t>& prefix,
                  int64_t begin, int64_t end, std::vector<Block>& out) {
  if (begin >= end) return;
  const size_t rank = shape.size();
  auto make = [&](int64_t first, int64_t n) {  // whole slabs [first, first+n) of dimension d
    Block b;
    b.start = prefix;
    b.count.assign(prefix.size(), 1);
    b.start.push_back(first);
    b.count.push_back(n);
    for (size_t k = d + 1; k < rank; ++k) {
      b.start.push_back(0);
      b.count.push_back(shape[k]);
    }
    out.push_back(std::move(b));
  };
  int64_t inner = 1;
  for (size_t k = d + 1; k < rank; ++k) inner *= shape[k];
  if (d + 1 == rank) {
    make(begin, end - begin);
    return;
  }
  int64_t i0 = begin / inner, r0 = begin % inner;
  const int64_t i1 = end / inner, r1 = end % inner;
  auto recurse = [&](int64_t i, int64_t b, int64_t e) {
    prefix.push_back(i);
    range_blocks(shape, d + 1, prefix, b, e, out);
    prefix.pop_back();
  };
  if (i0 == i1) {
    recurse(i0, r0, r1);
    return;
  }
  if (r0 != 0) recurse(i0++, r0, inner);
  if (i1 > i0) make(i0, i1 - i0);
  if (r1 != 0) recurse(i1, 0, r1);
}

// Row-major flat index of a multi-index.
int64_t flat_index(const std::vector<int64_t>& shape, const std::vector<int64_t>& idx) {
  int64_t f = 0;
  for (size_t k = 0; k < shape.size(); ++k) f = f * shape[k] + idx[k];
  return f;
}

// Fails (a caller bug, not user input) unless every block lies inside the tensor.
void check_blocks(const TensorPiece& t) {
  const size_t rank = t.global_shape.size();
  for (int64_t d : t.global_shape)
    MPITRON_REQUIRE(d >= 0, "tensor " + t.dataset + " has a negative dimension");
  for (const Block& b : t.blocks) {
    MPITRON_REQUIRE(b.start.size() == rank && b.count.size() == rank,
                    "tensor " + t.dataset + ": block rank differs from the tensor's");
    for (size_t k = 0; k < rank; ++k)
      MPITRON_REQUIRE(
          b.start[k] >= 0 && b.count[k] >= 0 && b.start[k] + b.count[k] <= t.global_shape[k],
          "tensor " + t.dataset + ": block outside shape " + shape_string(t.global_shape));
  }
  MPITRON_REQUIRE(
      t.blocks.empty() || piece_bytes(t) != nullptr ||
          [&] {
            for (const Block& b : t.blocks)
              if (block_numel(b) > 0) return false;
            return true;
          }(),
      "tensor " + t.dataset + " has blocks but no data");
}

// A piece written from its fill: the whole tensor, in flat order, by one rank writing alone.
void check_filled(const TensorPiece& t, MPI_Comm comm) {
  int size = 0;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  MPITRON_REQUIRE(size == 1 && t.data == nullptr,
                  "tensor " + t.dataset + ": fill is for one rank writing alone, without data");
  const std::vector<Block> whole = flat_range_blocks(t.global_shape, 0, numel(t.global_shape));
  MPITRON_REQUIRE(std::equal(whole.begin(), whole.end(), t.blocks.begin(), t.blocks.end(),
                             [](const Block& a, const Block& b) {
                               return a.start == b.start && a.count == b.count;
                             }),
                  "tensor " + t.dataset + ": a filled piece holds the whole tensor");
}

// Splits a piece's non-empty blocks into runs whose concatenation is in increasing flat order:
// within a run each block ends before the next begins, so one OR-ed selection (which HDF5 walks
// in file order) matches the data laid out block after block.
std::vector<std::vector<const Block*>> ordered_runs(const TensorPiece& t) {
  std::vector<std::vector<const Block*>> runs;
  int64_t last_end = -1;  // flat index of the previous block's last element
  for (const Block& b : t.blocks) {
    if (block_numel(b) == 0) continue;
    std::vector<int64_t> first = b.start, last = b.start;
    for (size_t k = 0; k < last.size(); ++k) last[k] += b.count[k] - 1;
    const int64_t f = flat_index(t.global_shape, first);
    if (runs.empty() || f <= last_end) runs.emplace_back();
    runs.back().push_back(&b);
    last_end = flat_index(t.global_shape, last);
  }
  return runs;
}

// File dataspace of a tensor: simple at its shape, scalar for shape {}.
Handle tensor_space(const std::vector<int64_t>& shape) {
  if (shape.empty()) return Handle(H5_CHECK(H5Screate(H5S_SCALAR)));
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  return Handle(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)));
}

// Selects the union of blocks in a tensor's file space (none when blocks is empty).
void select_blocks(hid_t space, const std::vector<const Block*>& blocks) {
  H5_CHECK(H5Sselect_none(space));
  for (const Block* b : blocks) {
    if (b->start.empty()) {  // the scalar's one element
      H5_CHECK(H5Sselect_all(space));
      continue;
    }
    std::vector<hsize_t> start(b->start.begin(), b->start.end());
    std::vector<hsize_t> count(b->count.begin(), b->count.end());
    H5_CHECK(
        H5Sselect_hyperslab(space, H5S_SELECT_OR, start.data(), nullptr, count.data(), nullptr));
  }
}

// 1-D memory space of n floats; n == 0 selects nothing (of a 1-element extent).
Handle memory_space(int64_t n) {
  const hsize_t dims[1] = {static_cast<hsize_t>(std::max<int64_t>(n, 1))};
  Handle space(H5_CHECK(H5Screate_simple(1, dims, nullptr)));
  if (n == 0) H5_CHECK(H5Sselect_none(space));
  return space;
}

uint64_t fnv1a(uint64_t h, const void* p, size_t n) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

// Checks that every rank passes the same datasets in the same order with the same shapes (a
// mismatch would hang or corrupt the collective writes) and returns, per tensor, the largest
// number of ordered runs any rank writes (the number of collective H5Dwrite calls).
std::vector<int64_t> agree_on_tensors(const std::vector<TensorPiece>& tensors, MPI_Comm comm) {
  uint64_t h = 14695981039346656037ull;
  for (const TensorPiece& t : tensors) {
    h = fnv1a(h, t.dataset.data(), t.dataset.size() + 1);
    const int64_t rank = static_cast<int64_t>(t.global_shape.size());
    h = fnv1a(h, &rank, sizeof rank);
    h = fnv1a(h, t.global_shape.data(), t.global_shape.size() * sizeof(int64_t));
    h = fnv1a(h, &t.type, sizeof t.type);
  }
  std::vector<uint64_t> v(2 + tensors.size());
  v[0] = h;
  v[1] = ~h;
  for (size_t i = 0; i < tensors.size(); ++i) v[2 + i] = ordered_runs(tensors[i]).size();
  // Different counts of tensors would make this allreduce itself mismatch: agree on that first.
  uint64_t n[2] = {tensors.size(), ~static_cast<uint64_t>(tensors.size())};
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, n, 2, MPI_UINT64_T, MPI_MAX, comm));
  MPITRON_REQUIRE(n[0] == ~n[1], "write_checkpoint: ranks pass different numbers of tensors");
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_UINT64_T, MPI_MAX,
                          comm));
  MPITRON_REQUIRE(v[0] == ~v[1],
                  "write_checkpoint: ranks pass different dataset names, order or shapes");
  return std::vector<int64_t>(v.begin() + 2, v.end());
}

void create_parent_folder(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);  // a failure shows at H5Fcreate
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Rank 0: makes the finished tmp file durable and moves it to its real name. Returns "" or why not.
std::string publish(const std::string& tmp, const std::string& path) {
  fsync_path(tmp);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec)
    return "cannot rename checkpoint " + tmp + " to " + path + ": " + ec.message() +
           " (is the path a folder, or the folder read-only?)";
  const fs::path parent = fs::path(path).parent_path();
  fsync_path(parent.empty() ? "." : parent.string());
  return "";
}

void write_groups(hid_t file, const Attributes& root_attrs,
                  const std::map<std::string, Attributes>& group_attrs) {
  write_attributes(file, root_attrs);
  Handle lcpl = lcpl_intermediate();
  for (const auto& [name, attrs] : group_attrs) {
    Handle g(path_exists(file, name)
                 ? H5_CHECK(H5Gopen2(file, name.c_str(), H5P_DEFAULT))
                 : H5_CHECK(H5Gcreate2(file, name.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT)));
    write_attributes(g, attrs);
  }
}

// Chunks of whole trailing rows, about 1 Mi elements each (HDF5 caps a chunk at 4 GiB).
std::vector<hsize_t> checksum_chunk(const std::vector<int64_t>& shape) {
  std::vector<hsize_t> chunk(shape.begin(), shape.end());
  int64_t row = 1;
  for (size_t d = 1; d < shape.size(); ++d) row *= shape[d];
  const int64_t rows = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(row, 1));
  chunk[0] = hsize_t(std::min(shape[0], rows));
  return chunk;
}

Handle create_tensor(hid_t file, const TensorPiece& t) {
  Handle lcpl = lcpl_intermediate();
  Handle space = tensor_space(t.global_shape);
  Handle dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));  // every element is written
  if (!t.global_shape.empty() && numel(t.global_shape) > 0) {
    // Fletcher-32 per chunk, checked by HDF5 on every read: a flipped bit fails the read.
    std::vector<hsize_t> chunk = checksum_chunk(t.global_shape);
    H5_CHECK(H5Pset_chunk(dcpl, int(chunk.size()), chunk.data()));
    H5_CHECK(H5Pset_fletcher32(dcpl));
  }
  return Handle(
      H5_CHECK(H5Dcreate2(file, t.dataset.c_str(), is_u8(t) ? H5T_STD_U8LE : H5T_IEEE_F32LE, space,
                          lcpl, dcpl, H5P_DEFAULT)));
}

// "" when the folder of path has room for the checkpoint (its tensors, 4 KiB of metadata each,
// and 256 KiB besides), else the message.
std::string check_room_for(const std::string& path, const std::vector<TensorPiece>& tensors) {
  uint64_t need = uint64_t(256) << 10;
  for (const TensorPiece& t : tensors)
    need += uint64_t(numel(t.global_shape)) * element_bytes(t) + 4096;
  const fs::path dir =
      fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  std::error_code ec;
  const fs::space_info space = fs::space(dir, ec);
  if (ec || space.available >= need) return "";
  const std::string latest = latest_checkpoint(dir.string());
  return fmt::format(
      "no room for checkpoint {}: it needs about {:.1f} MiB, {} has {:.1f} MiB free; {} (free "
      "some space; --keep-last K keeps only the newest K checkpoints)",
      path, double(need) / (1 << 20), dir.string(), double(space.available) / (1 << 20),
      latest.empty() ? "no checkpoint was written" : "the last complete one is " + latest);
}

// Writes a piece from its fill one chunk (checksum_chunk: whole rows) at a time, each chunk written
// whole and once in order as one write of the tensor would, so only one chunk is held.
void write_filled(hid_t file, const TensorPiece& t, hid_t dxpl) {
  Handle dset = create_tensor(file, t);
  Handle fspace(H5_CHECK(H5Dget_space(dset)));
  const int64_t n = numel(t.global_shape);
  int64_t slice = n;  // a scalar or an empty tensor is not chunked
  if (!t.global_shape.empty() && n > 0) {
    slice = 1;
    for (hsize_t c : checksum_chunk(t.global_shape)) slice *= int64_t(c);
  }
  std::vector<float> buf(size_t(std::min(slice, n)));
  for (int64_t begin = 0; begin < n; begin += slice) {
    const int64_t end = std::min(n, begin + slice);
    t.fill(begin, end, buf.data());
    const std::vector<Block> blocks = flat_range_blocks(t.global_shape, begin, end);
    std::vector<const Block*> run;
    for (const Block& b : blocks) run.push_back(&b);
    select_blocks(fspace, run);
    Handle mspace = memory_space(end - begin);
    H5_CHECK(H5Dwrite(dset, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, buf.data()));
  }
}

#ifdef MPITRON_PARALLEL_HDF5
void write_collective(const std::string& tmp, const Attributes& root_attrs,
                      const std::map<std::string, Attributes>& group_attrs,
                      const std::vector<TensorPiece>& tensors, const std::vector<int64_t>& writes,
                      MPI_Comm comm, const std::function<void()>& tensor_written) {
  Handle fapl = default_fapl();
  H5_CHECK(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL));
  H5_CHECK(H5Pset_coll_metadata_write(fapl, true));
  H5_CHECK(H5Pset_all_coll_metadata_ops(fapl, true));
  hid_t f = -1;
  {
    QuietErrors quiet;
    f = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  }
  Handle file(f);
  if (!comm::all_ok(f >= 0, comm))
    throw UsageError("cannot create checkpoint " + tmp + " (is its folder writable?)");
  write_groups(file, root_attrs, group_attrs);

  Handle dxpl(H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
  H5_CHECK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
  float dummy = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorPiece& t = tensors[i];
    if (t.fill) {  // one rank (check_filled): no other rank's calls to match
      write_filled(file, t, dxpl);
      if (tensor_written) tensor_written();
      continue;
    }
    Handle dset = create_tensor(file, t);
    Handle fspace(H5_CHECK(H5Dget_space(dset)));
    const auto runs = ordered_runs(t);
    char* p = piece_bytes(t);
    for (int64_t w = 0; w < writes[i]; ++w) {  // same number of collective calls on every rank
      static const std::vector<const Block*> none;
      const auto& run = w < static_cast<int64_t>(runs.size()) ? runs[w] : none;
      int64_t n = 0;
      for (const Block* b : run) n += block_numel(*b);
      select_blocks(fspace, run);
      Handle mspace = memory_space(n);
      H5_CHECK(H5Dwrite(dset, memory_type(t), mspace, fspace, dxpl,
                        n > 0 ? static_cast<void*>(p) : &dummy));
      p += n * int64_t(element_bytes(t));
    }
    if (tensor_written) tensor_written();
  }
  file.close();
}
#endif

// Rank 0 writes alone; the others send it their blocks, one tensor at a time.
void write_gathered(const std::string& tmp, const Attributes& root_attrs,
                    const std::map<std::string, Attributes>& group_attrs,
                    const std::vector<TensorPiece>& tensors, MPI_Comm comm,
                    const std::function<void()>& tensor_written) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  Handle file;
  if (rank == 0) {
    Handle fapl = default_fapl();
    QuietErrors quiet;
    file = Handle(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
  }
  if (!comm::all_ok(rank != 0 || file.valid(), comm))
    throw UsageError("cannot create checkpoint " + tmp + " (is its folder writable?)");
  if (rank == 0) write_groups(file, root_attrs, group_attrs);

  for (const TensorPiece& t : tensors) {
    if (t.fill) {  // one rank (check_filled): nothing to gather
      write_filled(file, t, H5P_DEFAULT);
      if (tensor_written) tensor_written();
      continue;
    }
    const size_t nd = t.global_shape.size();
    // This rank's non-empty blocks as (start..., count...) and its element count.
    std::vector<int64_t> coords;
    int64_t mine[2] = {0, 0};  // blocks, elements
    for (const Block& b : t.blocks) {
      if (block_numel(b) == 0) continue;
      coords.insert(coords.end(), b.start.begin(), b.start.end());
      coords.insert(coords.end(), b.count.begin(), b.count.end());
      ++mine[0];
      mine[1] += block_numel(b);
    }
    const int64_t bytes = int64_t(element_bytes(t));
    std::vector<int64_t> all(rank == 0 ? 2 * size : 0);
    MPI_CHECK(MPI_Gather(mine, 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, 0, comm));
    std::vector<int> ccount(size), cdispl(size), dcount(size), ddispl(size);
    int64_t ctotal = 0, dtotal = 0;
    if (rank == 0) {
      for (int r = 0; r < size; ++r) {
        const int64_t c = all[2 * r] * 2 * static_cast<int64_t>(std::max<size_t>(nd, 1));
        MPITRON_REQUIRE(ctotal + c <= INT_MAX && dtotal + all[2 * r + 1] * bytes <= INT_MAX,
                        "tensor " + t.dataset +
                            " is too large to gather to rank 0 (over 2^31 elements); use a "
                            "parallel HDF5 build");
        ccount[r] = static_cast<int>(nd == 0 ? 0 : c);
        cdispl[r] = static_cast<int>(ctotal);
        dcount[r] = static_cast<int>(all[2 * r + 1] * bytes);
        ddispl[r] = static_cast<int>(dtotal);
        ctotal += ccount[r];
        dtotal += dcount[r];
      }
    }
    std::vector<int64_t> gcoords(ctotal);
    std::vector<char> gdata(dtotal);
    MPI_CHECK(MPI_Gatherv(coords.data(), static_cast<int>(coords.size()), MPI_INT64_T,
                          gcoords.data(), ccount.data(), cdispl.data(), MPI_INT64_T, 0, comm));
    MPI_CHECK(MPI_Gatherv(piece_bytes(t), static_cast<int>(mine[1] * bytes), MPI_BYTE, gdata.data(),
                          dcount.data(), ddispl.data(), MPI_BYTE, 0, comm));
    if (tensor_written) tensor_written();
    if (rank != 0) continue;
    Handle dset = create_tensor(file, t);
    Handle fspace(H5_CHECK(H5Dget_space(dset)));
    const int64_t* c = gcoords.data();
    const char* p = gdata.data();
    for (int r = 0; r < size; ++r) {
      for (int64_t k = 0; k < all[2 * r]; ++k) {
        Block b;
        b.start.assign(c, c + nd);
        b.count.assign(c + nd, c + 2 * nd);
        c += 2 * nd;
        select_blocks(fspace, {&b});
        const int64_t n = block_numel(b);
        Handle mspace = memory_space(n);
        H5_CHECK(H5Dwrite(dset, memory_type(t), mspace, fspace, H5P_DEFAULT, p));
        p += n * bytes;
      }
    }
  }
  if (rank == 0) file.close();
}

}  // namespace

std::vector<Block> flat_range_blocks(const std::vector<int64_t>& shape, int64_t begin,
                                     int64_t end) {
  MPITRON_REQUIRE(0 <= begin && begin <= end && end <= numel(shape),
                  "flat range [" + std::to_string(begin) + ", " + std::to_string(end) +
                      ") outside a tensor of shape " + shape_string(shape));
  std::vector<Block> out;
  if (begin == end) return out;
  if (shape.empty()) return {Block{}};
  std::vector<int64_t> prefix;
  range_blocks(shape, 0, prefix, begin, end, out);
  return out;
}

void write_checkpoint(const std::string& path, const Attributes& root_attrs,
                      const std::map<std::string, Attributes>& group_attrs,
                      const std::vector<TensorPiece>& tensors, MPI_Comm comm,
                      const std::function<void()>& tensor_written) {
#ifdef MPITRON_PARALLEL_HDF5
  write_checkpoint(path, root_attrs, group_attrs, tensors, comm, CheckpointIo::collective,
                   tensor_written);
#else
  write_checkpoint(path, root_attrs, group_attrs, tensors, comm, CheckpointIo::gather,
                   tensor_written);
#endif
}

void write_checkpoint(const std::string& path, const Attributes& root_attrs,
                      const std::map<std::string, Attributes>& group_attrs,
                      const std::vector<TensorPiece>& tensors, MPI_Comm comm, CheckpointIo io,
                      const std::function<void()>& tensor_written) {
  for (const TensorPiece& t : tensors) {
    if (t.fill)
      check_filled(t, comm);
    else
      check_blocks(t);
  }
  const std::vector<int64_t> writes = agree_on_tensors(tensors, comm);
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  const std::string tmp = path + ".tmp";
  std::string no_room;
  if (rank == 0) {
    create_parent_folder(path);
    no_room = check_room_for(path, tensors);
  }
  // A full disk is refused before anything is written: every rank stops, the last complete
  // checkpoint stays as it was.
  comm::throw_on_all_ranks(no_room, 0, comm);
  try {
    // An HDF5 failure inside becomes an exception (not an abort at the failing call) so that the
    // partial file can go; every exception below ends the job through MPI_Abort.
    QuietErrors quiet;
    UserFileScope scope(tmp, "checkpoint", UserFileScope::writing);
    if (io == CheckpointIo::collective) {
#ifdef MPITRON_PARALLEL_HDF5
      write_collective(tmp, root_attrs, group_attrs, tensors, writes, comm, tensor_written);
#else
      MPITRON_REQUIRE(false, "collective checkpoint writes need a parallel HDF5 build");
#endif
    } else {
      write_gathered(tmp, root_attrs, group_attrs, tensors, comm, tensor_written);
    }
  } catch (const H5WriteError& e) {
    // A write failed part-way (the disk filled, a file-size limit): the partial file goes, the
    // last complete checkpoint stays. The rank that failed ends the job (a collective write
    // cannot be finished by the others).
    std::error_code ec;
    fs::remove(tmp, ec);
    const std::string dir = fs::path(path).parent_path().empty()
                                ? std::string(".")
                                : fs::path(path).parent_path().string();
    const std::string latest = latest_checkpoint(dir);
    throw std::runtime_error(fmt::format(
        "writing checkpoint {} failed part-way (is the disk full or the file over a size limit?), "
        "its partial file removed: {}; {}",
        path, e.what(),
        latest.empty()
            ? "no checkpoint was written before it"
            : "the last complete one is " + latest + " (--resume auto continues from it)"));
  } catch (const UsageError&) {
    throw;  // raised alike on every rank (a file that cannot be created): an orderly stop
  } catch (...) {
    std::error_code ec;
    if (rank == 0) fs::remove(tmp, ec);  // this rank's failure ends the job; no partial file stays
    throw;
  }
  comm::throw_on_all_ranks(rank == 0 ? publish(tmp, path) : "", 0, comm);
}

// ---- reading ------------------------------------------------------------------------------------

CheckpointHeader read_checkpoint_header(const std::string& path) {
  Handle file = open_user_file(path, "checkpoint");
  UserFileScope scope(path, "checkpoint");
  CheckpointHeader h;
  h.root = read_attributes(file);
  for (const ObjectInfo& o : list_objects(file)) {
    if (o.is_dataset) {
      h.shapes[o.path] = o.shape;
      continue;
    }
    Handle g(H5_CHECK(H5Gopen2(file, o.path.c_str(), H5P_DEFAULT)));
    Attributes a = read_attributes(g);
    if (!a.empty()) h.groups[o.path] = std::move(a);
  }
  return h;
}

void read_checkpoint_tensors(const std::string& path, const std::vector<TensorPiece>& tensors) {
  for (const TensorPiece& t : tensors) check_blocks(t);
  Handle file = open_user_file(path, "checkpoint");
  UserFileScope scope(path, "checkpoint");
  std::vector<Handle> dsets;
  for (const TensorPiece& t : tensors) {
    if (!path_exists(file, t.dataset))
      throw UsageError("checkpoint " + path + " has no " + t.dataset +
                       " (was it written for another model?)");
    Handle d(H5_CHECK(H5Dopen2(file, t.dataset.c_str(), H5P_DEFAULT)));
    const std::vector<int64_t> shape = dataset_shape(d);
    if (shape != t.global_shape)
      throw UsageError("checkpoint " + path + " has " + t.dataset + " of shape " +
                       shape_string(shape) + "; this model expects " +
                       shape_string(t.global_shape) +
                       " (was it written for another model config?)");
    Handle type(H5_CHECK(H5Dget_type(d)));
    require_sound_numeric_type(type, t.dataset);
    if (is_u8(t) ? H5Tget_class(type) != H5T_INTEGER || H5Tget_size(type) != 1 ||
                       H5Tget_sign(type) != H5T_SGN_NONE
                 : H5Tget_class(type) != H5T_FLOAT)
      throw UsageError("checkpoint " + path + " has " + t.dataset + " of type " + dtype_name(type) +
                       (is_u8(t) ? "; expected uint8" : "; expected floating point"));
    dsets.push_back(std::move(d));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorPiece& t = tensors[i];
    Handle fspace(H5_CHECK(H5Dget_space(dsets[i])));
    char* p = piece_bytes(t);
    for (const Block& b : t.blocks) {
      const int64_t n = block_numel(b);
      if (n == 0) continue;
      select_blocks(fspace, {&b});
      Handle mspace = memory_space(n);
      herr_t read = 0;
      {
        QuietErrors quiet;
        read = H5Dread(dsets[i], memory_type(t), mspace, fspace, H5P_DEFAULT, p);
      }
      if (read < 0)
        throw UsageError("checkpoint " + path + ": " + t.dataset +
                         " fails its checksum or cannot be read (the file is corrupt; resume "
                         "from another checkpoint)");
      p += n * int64_t(element_bytes(t));
    }
  }
}

CheckpointVerification verify_checkpoint(const std::string& path) {
  Handle file = open_user_file(path, "checkpoint");
  UserFileScope scope(path, "checkpoint");
  CheckpointVerification v;
  std::vector<float> scratch;
  for (const ObjectInfo& o : list_objects(file)) {
    if (!o.is_dataset) continue;
    Handle d(H5_CHECK(H5Dopen2(file, o.path.c_str(), H5P_DEFAULT)));
    Handle dcpl(H5_CHECK(H5Dget_create_plist(d)));
    bool has_checksum = false;
    for (int f = 0, n = H5Pget_nfilters(dcpl); f < n; ++f) {
      unsigned flags = 0;
      size_t nelem = 0;
      unsigned config = 0;
      has_checksum |= H5Pget_filter2(dcpl, unsigned(f), &flags, &nelem, nullptr, 0, nullptr,
                                     &config) == H5Z_FILTER_FLETCHER32;
    }
    Handle type(H5_CHECK(H5Dget_type(d)));
    require_sound_numeric_type(type, "tensor " + o.path);
    // Float tensors, and the uint8 codes of an 8-bit optimizer.
    const bool codes = H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) == 1;
    if (H5Tget_class(type) != H5T_FLOAT && !codes) continue;
    const uintmax_t element = codes ? 1 : 4;
    // Stored uncompressed, a tensor cannot hold more elements than the file has bytes / element.
    if (numel(o.shape) < 0 ||
        uintmax_t(numel(o.shape)) > std::filesystem::file_size(path) / element)
      throw UsageError(
          fmt::format("{}: tensor {} claims shape {}, more than the file can hold "
                      "(a damaged file?)",
                      path, o.path, shape_string(o.shape)));
    scratch.resize(size_t(std::max<int64_t>(1, numel(o.shape))));
    herr_t read = 0;
    {
      QuietErrors quiet;
      read = H5Dread(d, codes ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                     scratch.data());
    }
    ++v.tensors;
    if (read < 0) v.failed.push_back(o.path);
    if (!has_checksum) v.unchecked.push_back(o.path);
  }
  return v;
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir) {
  static const std::regex name(R"(ckpt_(\d{1,18})\.h5)");
  std::error_code ec;
  std::vector<std::pair<int64_t, std::string>> found;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    std::smatch m;
    if (!std::regex_match(file, m, name)) continue;
    if (!it->is_regular_file(ec)) continue;
    found.push_back({std::stoll(m[1].str()), it->path().string()});
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::string latest_checkpoint(const std::string& dir) {
  const auto found = list_checkpoints(dir);
  return found.empty() ? "" : found.back().second;
}

std::vector<std::string> remove_stale_checkpoint_writes(const std::string& dir) {
  static const std::regex name(R"(ckpt_\d{1,18}\.h5\.tmp)");
  std::error_code ec;
  std::vector<std::string> removed;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (std::regex_match(it->path().filename().string(), name) && it->is_regular_file(ec) &&
        fs::remove(it->path(), ec))
      removed.push_back(it->path().string());
  std::sort(removed.begin(), removed.end());
  return removed;
}

std::vector<std::string> remove_old_checkpoints(const std::string& dir, int keep) {
  std::vector<std::string> removed;
  const auto found = list_checkpoints(dir);
  const size_t kept = size_t(std::max(keep, 1));  // the newest complete one always stays
  std::error_code ec;
  for (size_t i = 0; i + kept < found.size(); ++i)
    if (fs::remove(found[i].second, ec)) removed.push_back(found[i].second);
  return removed;
}

}  // namespace mpitron::io
