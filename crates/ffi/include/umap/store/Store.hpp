/*
 * umap/store/Store.hpp: LLNL UMap 2.x's C++ store interface, served by
 * umio (header-only: umio's library is C; Umap::umap_ex in umap/umap.h
 * hands a Store to umio_map as a struct umio_store_ops).
 *
 * Subclass Umap::Store and pass an instance to Umap::umap_ex: the region's
 * pages are read with read_from_store and written back with
 * write_to_store, at byte offsets of the store (the region's offset plus
 * the position in it), a page (umapcfg_get_umap_page_size()) or less at a
 * time, from umio's threads and from the threads calling umap_flush or
 * uunmap, several at once: the methods must be thread-safe. As in UMap,
 * each returns the bytes it read or wrote, or -1 with errno set; a read of
 * fewer bytes than asked leaves the rest of the page zero, and an
 * exception thrown by either is taken as -1 with EIO (it never reaches
 * umio). The program keeps the store alive until the region is unmapped
 * (uunmap, or the process's end) and deletes it after.
 */
#ifndef _UMAP_STORE_H_
#define _UMAP_STORE_H_

#include <cstddef>
#include <cstdint>
#include <sys/types.h>
#include <unistd.h>

namespace Umap {
class Store {
  public:
    /* A Umap::StoreFile reading and writing fd (umap/store/StoreFile.h). */
    static Store* make_store(void* _region_, std::size_t _rsize_, std::size_t _alignsize_, int _fd_);

    virtual ssize_t read_from_store(char* buf, std::size_t nb, off_t off) = 0;
    virtual ssize_t  write_to_store(char* buf, std::size_t nb, off_t off) = 0;

    /* Not in UMap's class; lets `delete` through a Store* (or a subclass
       pointer, with -Wall) destroy the whole object. */
    virtual ~Store() {}
};
} // namespace Umap

/* Store::make_store's definition. */
#include "StoreFile.h"

#endif /* _UMAP_STORE_H_ */
