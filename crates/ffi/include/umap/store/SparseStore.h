/*
 * umap/store/SparseStore.h: LLNL UMap 2.x's Umap::SparseStore, a store
 * spread over a directory of fixed-size files, so that a large region
 * takes disk space only where it was written. Header-only (see
 * umap/store/Store.hpp); the directory's layout is UMap's, so either
 * library opens what the other made:
 *   root_path/_metadata   the file size, a newline, the capacity (bytes)
 *   root_path/<n>         bytes [n * file size, (n + 1) * file size) of
 *                         the store, made (and allocated in full) by the
 *                         first write into them
 *
 * Create mode, SparseStore(rsize, aligned_size, root_path, file_size):
 * makes root_path (which must not exist) and its _metadata for a store of
 * rsize bytes in files of file_size rounded up to a multiple of
 * aligned_size (the region's page size). Open mode, SparseStore(root_path,
 * read_only): opens one made before, of the capacity its _metadata
 * records; read-only, writes fail with EBADF.
 *
 * Bytes never written read as zeros. A write past the capacity fails with
 * EFBIG, a read past it gives zeros. The constructors and get_capacity
 * throw std::system_error (a std::exception, as UMap's Umap::Exception
 * is) where UMap's throw: the directory exists (create mode) or does not
 * (open mode), or _metadata cannot be written or read. Files are read and
 * written through the kernel's page cache (UMap asks O_DIRECT of them
 * where the file system allows).
 */
#ifndef _UMAP_SPARSE_STORE_H_
#define _UMAP_SPARSE_STORE_H_

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "Store.hpp"
#include "../umap.h"

namespace Umap {
  class SparseStore : public Store {
  public:
    /* Create mode. */
    SparseStore(std::size_t _rsize_, std::size_t _aligned_size_, std::string _root_path_, std::size_t _file_Size_)
      : file_size(0), current_capacity(0), num_files(0), rsize(_rsize_),
        aligned_size(_aligned_size_), read_only(false), root_path(_root_path_),
        numreads(0), numwrites(0)
    {
      if (aligned_size == 0 || _file_Size_ == 0)
        fail(EINVAL, "SparseStore: aligned_size and file_size must not be 0");
      file_size = (_file_Size_ + aligned_size - 1) / aligned_size * aligned_size;
      current_capacity = std::max(file_size, rsize);
      num_files = (current_capacity + file_size - 1) / file_size;
      DIR* dir = opendir(root_path.c_str());
      if (dir != NULL) {
        closedir(dir);
        fail(EEXIST, "SparseStore: " + root_path
                     + " exists; open it with SparseStore(root_path, read_only)");
      }
      if (mkdir(root_path.c_str(), S_IRWXU | S_IRWXG | S_IROTH | S_IXOTH) != 0)
        fail(errno, "SparseStore: cannot create " + root_path);
      std::ofstream metadata((root_path + "/_metadata").c_str());
      if (!metadata.is_open())
        fail(errno ? errno : EIO, "SparseStore: cannot create " + root_path + "/_metadata");
      metadata << file_size << std::endl << current_capacity;
      metadata.close();
      if (metadata.fail())
        fail(EIO, "SparseStore: cannot write " + root_path + "/_metadata");
      make_table();
    }

    /* Open mode. */
    SparseStore(std::string _root_path, bool _read_only_)
      : file_size(0), current_capacity(0), num_files(0), rsize(0), aligned_size(0),
        read_only(_read_only_), root_path(_root_path), numreads(0), numwrites(0)
    {
      DIR* dir = opendir(root_path.c_str());
      if (dir == NULL)
        fail(errno, "SparseStore: cannot open " + root_path);
      closedir(dir);
      read_metadata(root_path, file_size, current_capacity);
      if (file_size == 0)
        fail(EINVAL, "SparseStore: " + root_path + "/_metadata gives a file size of 0");
      rsize = current_capacity;
      num_files = (current_capacity + file_size - 1) / file_size;
      make_table();
    }

    ~SparseStore() { close_files(); }

    ssize_t read_from_store(char* buf, std::size_t nb, off_t off)
    {
      int r = by_file(off, nb, [&](std::uint64_t index, std::uint64_t in_file, std::size_t done, std::size_t n) {
        if (index >= num_files) {
          std::memset(buf + done, 0, nb - done);
          return 1;
        }
        int fd = get_fd(index, false);
        if (fd == -1)
          return -1;
        std::size_t got = 0;
        while (fd >= 0 && got < n) {
          ssize_t r = pread(fd, buf + done + got, n - got, (off_t)(in_file + got));
          if (r < 0 && errno == EINTR)
            continue;
          if (r < 0)
            return -1;
          if (r == 0)
            break;
          got += (std::size_t)r;
        }
        /* No file yet, or a short one: never written. */
        std::memset(buf + done + got, 0, n - got);
        return 0;
      });
      if (r < 0)
        return -1;
      numreads++;
      return (ssize_t)nb;
    }

    ssize_t write_to_store(char* buf, std::size_t nb, off_t off)
    {
      if (read_only) {
        errno = EBADF;
        return -1;
      }
      int r = by_file(off, nb, [&](std::uint64_t index, std::uint64_t in_file, std::size_t done, std::size_t n) {
        if (index >= num_files) {
          errno = EFBIG;
          return -1;
        }
        int fd = get_fd(index, true);
        if (fd < 0)
          return -1;
        std::size_t put = 0;
        while (put < n) {
          ssize_t w = pwrite(fd, buf + done + put, n - put, (off_t)(in_file + put));
          if (w < 0 && errno == EINTR)
            continue;
          if (w < 0)
            return -1;
          if (w == 0) {
            errno = EIO;
            return -1;
          }
          put += (std::size_t)w;
        }
        return 0;
      });
      if (r < 0)
        return -1;
      numwrites++;
      return (ssize_t)nb;
    }

    /* The capacity in bytes. */
    std::size_t get_current_capacity() { return current_capacity; }

    /* The capacity of the store made in base_path, read from its
       _metadata without opening the store. */
    static std::size_t get_capacity(std::string base_path)
    {
      std::size_t file_size = 0, capacity = 0;
      read_metadata(base_path, file_size, capacity);
      return capacity;
    }

    /* Closes the files open now (later accesses open them again); 0, or
       -1 if a close failed. */
    int close_files()
    {
      std::lock_guard<std::mutex> lock(creation_mutex);
      int status = 0;
      for (std::uint64_t i = 0; i < num_files; i++) {
        int fd = fds[i].exchange(-1);
        if (fd >= 0 && close(fd) != 0)
          status = -1;
      }
      return status;
    }

  private:
    /* Calls `call(index, in_file, done, n)` for each piece of
       [off, off + nb) that lies within one of the store's files, in
       order: a negative result ends the walk with -1 (errno set by the
       call), a positive one ends it early with 0. A negative offset is
       EINVAL. */
    template <class Call>
    int by_file(off_t off, std::size_t nb, Call call)
    {
      if (off < 0) {
        errno = EINVAL;
        return -1;
      }
      std::size_t done = 0;
      while (done < nb) {
        std::uint64_t at = (std::uint64_t)off + done;
        std::uint64_t index = at / file_size;
        std::uint64_t in_file = at % file_size;
        std::size_t n = (std::size_t)std::min<std::uint64_t>(nb - done, file_size - in_file);
        int r = call(index, in_file, done, n);
        if (r < 0)
          return -1;
        if (r > 0)
          break;
        done += n;
      }
      return 0;
    }

    std::size_t file_size;
    std::size_t current_capacity;
    std::uint64_t num_files;
    std::size_t rsize;
    std::size_t aligned_size;
    bool read_only;
    std::string root_path;
    /* reads and writes made, as UMap counts them */
    std::atomic<std::int64_t> numreads;
    std::atomic<std::int64_t> numwrites;
    /* file n's descriptor, or -1 while it is not open */
    std::unique_ptr<std::atomic<int>[]> fds;
    std::mutex creation_mutex;

    static void fail(int error, const std::string& what)
    {
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
      throw std::system_error(error, std::generic_category(), what);
#else
      std::fprintf(stderr, "%s: %s\n", what.c_str(), std::strerror(error));
      std::abort();
#endif
    }

    static void read_metadata(const std::string& root, std::size_t& file_size, std::size_t& capacity)
    {
      std::string path = root + "/_metadata";
      std::ifstream metadata(path.c_str());
      if (!metadata.is_open())
        fail(errno ? errno : ENOENT, "SparseStore: cannot open " + path);
      if (!(metadata >> file_size >> capacity))
        fail(EINVAL, "SparseStore: " + path + " holds no file size and capacity");
    }

    void make_table()
    {
      fds.reset(new std::atomic<int>[num_files]);
      for (std::uint64_t i = 0; i < num_files; i++)
        fds[i].store(-1);
    }

    /* File index's descriptor, opened now if need be: made and allocated
       if `create`; -2 if it does not exist (and !create); -1 with errno
       on failure. */
    int get_fd(std::uint64_t index, bool create)
    {
      int fd = fds[index].load(std::memory_order_acquire);
      if (fd >= 0)
        return fd;
      std::lock_guard<std::mutex> lock(creation_mutex);
      fd = fds[index].load(std::memory_order_acquire);
      if (fd >= 0)
        return fd;
      std::string path = root_path + "/" + std::to_string(index);
      int flags = (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
      fd = open(path.c_str(), flags);
      if (fd < 0 && errno == ENOENT && !create)
        return -2;
      if (fd < 0 && errno == ENOENT)
        fd = open(path.c_str(), flags | O_CREAT, S_IRUSR | S_IWUSR);
      if (fd < 0)
        return -1;
      if (create) {
        struct stat st;
        if (fstat(fd, &st) != 0 || (std::uint64_t)st.st_size < file_size) {
          int e = posix_fallocate(fd, 0, (off_t)file_size);
          if (e == EOPNOTSUPP || e == EINVAL)
            e = ftruncate(fd, (off_t)file_size) == 0 ? 0 : errno;
          if (e != 0) {
            close(fd);
            errno = e;
            return -1;
          }
        }
      }
      fds[index].store(fd, std::memory_order_release);
      return fd;
    }
  };
} // namespace Umap

#endif /* _UMAP_SPARSE_STORE_H_ */
