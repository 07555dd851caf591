/*
 * umap/store/StoreFile.h: LLNL UMap 2.x's Umap::StoreFile, a store over an
 * open file descriptor (pread and pwrite at the store's offsets), as
 * Umap::Store::make_store returns. Header-only (see umap/store/Store.hpp).
 * The descriptor stays the caller's: StoreFile never closes it.
 */
#ifndef _UMAP_STORE_FILE_H_
#define _UMAP_STORE_FILE_H_

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <sys/types.h>
#include <unistd.h>

#include "Store.hpp"

namespace Umap {
  class StoreFile : public Store {
    public:
      StoreFile(void* _region_, std::size_t _rsize_, std::size_t _alignsize_, int _fd_)
        : fd(_fd_)
      {
        (void)_region_;
        (void)_rsize_;
        (void)_alignsize_;
      }

      /* Reads up to nb bytes at off: fewer only at the end of the file;
         -1 with errno on failure. */
      ssize_t read_from_store(char* buf, std::size_t nb, off_t off)
      {
        std::size_t done = 0;
        while (done < nb) {
          ssize_t n = pread(fd, buf + done, nb - done, off + (off_t)done);
          if (n < 0 && errno == EINTR)
            continue;
          if (n < 0)
            return -1;
          if (n == 0)
            break;
          done += (std::size_t)n;
        }
        return (ssize_t)done;
      }

      /* Writes nb bytes at off; -1 with errno on failure. */
      ssize_t write_to_store(char* buf, std::size_t nb, off_t off)
      {
        std::size_t done = 0;
        while (done < nb) {
          ssize_t n = pwrite(fd, buf + done, nb - done, off + (off_t)done);
          if (n < 0 && errno == EINTR)
            continue;
          if (n < 0)
            return -1;
          if (n == 0) {
            errno = EIO;
            return -1;
          }
          done += (std::size_t)n;
        }
        return (ssize_t)done;
      }

    private:
      int fd;
  };

  inline Store* Store::make_store(void* _region_, std::size_t _rsize_, std::size_t _alignsize_, int _fd_)
  {
    return new StoreFile(_region_, _rsize_, _alignsize_, _fd_);
  }
} // namespace Umap

#endif /* _UMAP_STORE_FILE_H_ */
