/*
 * umap/umap.h: LLNL UMap 2.x's C API, served by umio (libumio).
 *
 * Programs written for UMap build unchanged:
 *     cc prog.c -I crates/ffi/include -lumio    (or: pkg-config --cflags --libs umio)
 * This header is written by hand to keep UMap's declarations;
 * crates/ffi/tests/headers.rs checks it against libumio's exports.
 * umio's own, fuller API is in <umio.h>; the two may be used together.
 *
 * C++ programs get UMap's C++ API too, header-only over the C API:
 * Umap::umap_ex (below) with a Umap::Store (umap/store/Store.hpp),
 * Umap::StoreFile (umap/store/StoreFile.h) and Umap::SparseStore
 * (umap/store/SparseStore.h).
 *
 * Where umio differs from UMap, it is on purpose:
 * - The offset is honoured; the length need not be a multiple of the
 *   page size; bytes past the end of the file read as zeros (a PROT_WRITE
 *   mapping reaching past the end extends the file when it is mapped).
 * - Errors return UMAP_FAILED or -1 with a positive errno (EINVAL, EBADF,
 *   EACCES, ENODEV, EEXIST, ENOMEM, ...): nothing throws or aborts. What
 *   the errno cannot tell (a setting refused, and why) is printed on
 *   stderr, as UMAP_LOG_LEVEL's default, WARNING, has it (and a store
 *   that fails, or a fault that has waited seconds, and on what);
 *   UMAP_LOG_LEVEL=OFF prints nothing.
 * - UMAP_PRIVATE and MAP_SHARED behave alike: writes reach the file when
 *   their page is evicted at the latest, and are durable when umap_flush()
 *   or uunmap() returns, or the process exits normally (exit, a return
 *   from main: every region still mapped is written back then, as a
 *   MAP_SHARED mapping's writes survive its process; what other threads
 *   write while the process exits may be lost).
 * - uunmap(addr, length) with addr the start of a region and length 0 or
 *   at least the region's length writes back and unmaps the whole region,
 *   as UMap's does. A shorter length writes back and unmaps exactly the
 *   pages of [addr, addr + length) (addr on a page boundary of the region,
 *   length rounded up to whole pages); the rest stays mapped. A range umap
 *   never mapped, or already unmapped, fails with EINVAL.
 * - umap_fetch_and_pin pins: pinned pages are not evicted, and their
 *   writes are written back like any page's.
 *
 * Environment, read when the first region is mapped (a malformed value
 * makes that umap fail with EINVAL); the umapcfg_get_* getters report the
 * values in force (before the first mapping, the values it would use).
 * As in UMap, a variable set to nothing is unset, and so is one of the
 * numbers below set to 0, except UMAP_READ_AHEAD, whose 0 means none:
 *   UMAP_PAGESIZE                   page size in bytes, a multiple of 4096
 *                                   (default 4096, as UMap's)
 *   UMAP_BUFSIZE                    cache size in pages of UMAP_PAGESIZE,
 *                                   at least 4 (default: a quarter of
 *                                   physical memory, 64 MiB to 4 GiB)
 *   UMAP_PAGE_FILLERS               fault-serving threads (default: CPUs (1-4) + 1)
 *   UMAP_PAGE_EVICTORS              eviction threads (default 1)
 *   UMAP_EVICT_HIGH_WATER_THRESHOLD percent full to start evicting (90)
 *   UMAP_EVICT_LOW_WATER_THRESHOLD  percent full to stop evicting (70)
 *   UMAP_READ_AHEAD                 largest read-ahead in pages (0: none;
 *                                   default 2 MiB worth)
 *   UMAP_MAX_FAULT_EVENTS           fault events a filler reads at once
 *                                   (default 256, 1 to 4096)
 *   UMAP_LOG_LEVEL                  ERROR, WARNING (default), INFO, DEBUG
 *                                   or OFF: umio's log records printed
 *                                   on stderr
 *   UMAP_MONITOR_FREQ               seconds between two lines of runtime
 *                                   statistics printed on stderr by a
 *                                   monitor thread (default 0: none)
 * umio.h's umio_config_set_* calls, made before the first mapping,
 * override these.
 */
#ifndef _UMAP_H_
#define _UMAP_H_

#ifdef __cplusplus
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include "store/Store.hpp"
#else
#include <stddef.h>
#include <stdint.h>
#endif

#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef __cplusplus
namespace Umap {
/*
 * Maps length bytes of store from offset, as umap maps a file, with the
 * region's pages read and written by the store's read_from_store and
 * write_to_store (see umap/store/Store.hpp); fd is then ignored. Without a
 * store (nullptr), the same as umap(addr, length, prot, flags, fd,
 * offset). The store stays the caller's, who deletes it once the region
 * is unmapped. Returns the region's address, or UMAP_FAILED with errno.
 * Defined below, over umio_map.
 */
inline void* umap_ex(
    void*         addr
  , std::size_t   length
  , int           prot
  , int           flags
  , int           fd
  , off_t         offset
  , Umap::Store*  store
);

/* Declared by UMap's header too, and defined by neither library. */
extern std::mutex m_mutex;
extern int num_thread;
} // namespace Umap
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Maps length bytes of the file open as fd, from offset (a multiple of
 * 4096), as mmap(2) does, with page faults served by umio. prot:
 * PROT_READ, optionally | PROT_WRITE (fd open O_RDWR). flags: UMAP_PRIVATE
 * or MAP_SHARED, optionally | UMAP_FIXED or MAP_FIXED_NOREPLACE (addr then
 * a non-NULL multiple of 4096). UMAP_FIXED replaces what the range holds,
 * umio regions included (their dirty pages there are written back first;
 * EINVAL, nothing changed, if the range would split one of their pages in
 * use); MAP_FIXED_NOREPLACE fails with EEXIST if the range holds anything.
 * Without either, addr is ignored. Returns the region's address, or
 * UMAP_FAILED with errno.
 */
void* umap(
    void* addr
  , size_t length
  , int prot
  , int flags
  , int fd
  , off_t offset
);

/*
 * Writes back and unmaps the region starting at addr (length 0 or at
 * least its length), or [addr, addr + length) of a region (see above).
 * Returns 0, or -1 with errno: EINVAL for a range umio does not map, or
 * the write-back's errno (the range is unmapped anyway).
 */
int uunmap(
    void*  addr
  , size_t length
);

/*
 * Writes back every region's dirty pages and makes them durable. Returns
 * 0, or -1 with the errno of the first failure (failed pages stay dirty).
 */
int umap_flush(void);

struct umap_prefetch_item {
  void* page_base_addr;
};

/* 1 if regions may be mapped with PROT_WRITE on this kernel, else 0. */
int umap_has_write_support(void);

/*
 * Starts filling the pages holding page_array[0 .. npages - 1]'s
 * addresses in the background. On a bad argument (an address in no
 * region, npages < 0, page_array NULL) nothing is prefetched and errno is
 * set to EINVAL; errno is left alone on success.
 */
void umap_prefetch( int npages, struct umap_prefetch_item* page_array );

/*
 * Reads the pages of [paddr, paddr + size) now and pins them. On failure
 * errno is set (EINVAL; ENOMEM if pinned pages would hold more than half
 * of the cache; the store's errno); errno is left alone on success.
 */
void umap_fetch_and_pin( char* paddr, uint64_t size );

long     umapcfg_get_system_page_size( void );
uint64_t umapcfg_get_umap_page_size( void );
uint64_t umapcfg_get_max_fault_events( void );
uint64_t umapcfg_get_num_fillers( void );
uint64_t umapcfg_get_num_evictors( void );
uint64_t umapcfg_get_max_pages_in_buffer( void );
uint64_t umapcfg_get_read_ahead( void );
int      umapcfg_get_evict_low_water_threshold( void );
int      umapcfg_get_evict_high_water_threshold( void );

#ifdef __cplusplus
}
#endif

/*
 * flags
 */
#define UMAP_PRIVATE    MAP_PRIVATE /* MAP_SHARED is accepted too, with the same behaviour */
#define UMAP_FIXED      MAP_FIXED

/*
 * Return codes
 */
#define UMAP_FAILED ((void *)-1)

#ifdef __cplusplus
#include "../umio.h"

namespace Umap {
namespace umio_detail {
/* What umio's callbacks need of a Umap::Store mapped by umap_ex. */
struct StoreShim {
  Store* store;
  std::uint64_t page;  /* the region's page size: the largest call */
  std::uint64_t end;   /* offset + length: the store's size as umio sees it */
};

/* A Store's result as umio's: bytes, or a negative errno. */
inline std::int64_t failed(void) { return -(errno > 0 ? errno : EIO); }

/* Calls `call(done, n, at)` for each piece of [offset, offset + len) that
   stays within one page (UMap's stores take at most a page a call), with
   errno cleared and exceptions caught; the first negative result ends the
   walk with that errno. */
template <class Call>
inline std::int64_t by_page(const StoreShim* s, std::uint64_t offset, std::size_t len, Call call) {
  std::size_t done = 0;
  while (done < len) {
    std::uint64_t at = offset + done;
    std::size_t n = (std::size_t)(s->page - at % s->page);
    if (n > len - done) n = len - done;
    ssize_t r;
    errno = 0;
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
    try {
      r = call(done, n, at);
    } catch (...) {
      return -EIO;
    }
#else
    r = call(done, n, at);
#endif
    if (r < 0) return failed();
    done += n;
  }
  return (std::int64_t)len;
}

/* A short read is the store's end: the rest of the piece reads as zeros. */
inline std::int64_t store_read(void* user, std::uint64_t offset, void* buf, std::size_t len) {
  StoreShim* s = static_cast<StoreShim*>(user);
  char* p = static_cast<char*>(buf);
  return by_page(s, offset, len, [&](std::size_t done, std::size_t n, std::uint64_t at) -> ssize_t {
    ssize_t got = s->store->read_from_store(p + done, n, (off_t)at);
    if (got >= 0 && (std::size_t)got < n) std::memset(p + done + got, 0, n - (std::size_t)got);
    return got;
  });
}

/* As UMap takes them, a write's non-negative result is the whole call
   done. */
inline std::int64_t store_write(void* user, std::uint64_t offset, const void* buf, std::size_t len) {
  StoreShim* s = static_cast<StoreShim*>(user);
  /* Store's interface takes char*; stores do not write through it. */
  char* p = static_cast<char*>(const_cast<void*>(buf));
  return by_page(s, offset, len, [&](std::size_t done, std::size_t n, std::uint64_t at) -> ssize_t {
    return s->store->write_to_store(p + done, n, (off_t)at);
  });
}

inline std::int64_t store_size(void* user) {
  return (std::int64_t)static_cast<StoreShim*>(user)->end;
}

inline void store_release(void* user) { delete static_cast<StoreShim*>(user); }
} // namespace umio_detail

inline void* umap_ex(
    void*         addr
  , std::size_t   length
  , int           prot
  , int           flags
  , int           fd
  , off_t         offset
  , Umap::Store*  store
) {
  if (store == nullptr) return ::umap(addr, length, prot, flags, fd, offset);
  if (length == 0 || offset < 0) {
    errno = EINVAL;
    return UMAP_FAILED;
  }
  std::uint64_t page = umapcfg_get_umap_page_size();
  if (page == 0) return UMAP_FAILED; /* a malformed UMAP_* variable: errno says */
  umio_detail::StoreShim* shim = new (std::nothrow) umio_detail::StoreShim;
  if (shim == nullptr) {
    errno = ENOMEM;
    return UMAP_FAILED;
  }
  shim->store = store;
  shim->page = page;
  shim->end = (std::uint64_t)offset + length;
  struct umio_store_ops ops;
  std::memset(&ops, 0, sizeof ops);
  ops.read = umio_detail::store_read;
  ops.write = umio_detail::store_write;
  ops.size = umio_detail::store_size;
  ops.release = umio_detail::store_release;
  ops.user = shim;
  struct umio_map_options options;
  std::memset(&options, 0, sizeof options);
  options.size = sizeof options;
  options.store = &ops;
  /* umio releases the shim, on failure too. */
  return umio_map(addr, length, prot, flags, -1, offset, &options);
}
} // namespace Umap
#endif /* __cplusplus */

#endif /* _UMAP_H_ */
