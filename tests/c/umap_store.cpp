/* A C++ program written for UMap's Umap::umap_ex: a store of its own (a
   Umap::Store subclass in memory, counting its calls) under a cache of a
   quarter of the region, so that pages are written to it and read back
   from it; a write error of the store is uunmap's errno; and
   Umap::Store::make_store's StoreFile over a file. */
#include <umap/umap.h>

#include <atomic>
#include <vector>

#include "check.h"

class MemoryStore : public Umap::Store {
 public:
  explicit MemoryStore(size_t len) : bytes(len, 0), reads(0), writes(0), fail_writes(false) {}

  ssize_t read_from_store(char* buf, size_t nb, off_t off) {
    CHECK(off >= 0 && (size_t)off + nb <= bytes.size());
    CHECK(nb <= umapcfg_get_umap_page_size()); /* a page at most, as UMap */
    memcpy(buf, &bytes[(size_t)off], nb);
    reads++;
    return (ssize_t)nb;
  }

  ssize_t write_to_store(char* buf, size_t nb, off_t off) {
    if (fail_writes) {
      errno = ENOSPC;
      return -1;
    }
    CHECK(off >= 0 && (size_t)off + nb <= bytes.size());
    memcpy(&bytes[(size_t)off], buf, nb);
    writes++;
    return (ssize_t)nb;
  }

  std::vector<unsigned char> bytes;
  std::atomic<long> reads, writes;
  std::atomic<bool> fail_writes;
};

int main() {
  const size_t psize = umapcfg_get_umap_page_size();
  CHECK(psize == 4096);
  /* The test sets UMAP_BUFSIZE=64: a region of 256 pages is 4 times it. */
  CHECK(umapcfg_get_max_pages_in_buffer() == 64);
  const size_t pages = 256, len = pages * psize;

  MemoryStore* store = new MemoryStore(len);
  for (size_t i = 0; i < len; i++) store->bytes[i] = pattern(i);
  char* region = (char*)Umap::umap_ex(NULL, len, PROT_READ | PROT_WRITE, UMAP_PRIVATE, -1, 0, store);
  CHECK(region != UMAP_FAILED);
  /* Read all, write every other page, read all again. */
  for (size_t i = 0; i < len; i += 512) CHECK((unsigned char)region[i] == pattern(i));
  for (size_t p = 0; p < pages; p += 2)
    for (size_t i = p * psize; i < (p + 1) * psize; i += 64) region[i] = (char)(pattern(i) ^ 0xff);
  for (size_t i = 0; i < len; i += 64) {
    unsigned char want = (i / psize) % 2 == 0 ? (unsigned char)(pattern(i) ^ 0xff) : pattern(i);
    CHECK((unsigned char)region[i] == want);
  }
  CHECK(store->writes > 0); /* evicted dirty pages went to the store */
  CHECK(uunmap(region, len) == 0);
  for (size_t i = 0; i < len; i += 64) {
    unsigned char want = (i / psize) % 2 == 0 ? (unsigned char)(pattern(i) ^ 0xff) : pattern(i);
    CHECK(store->bytes[i] == want);
  }
  CHECK(store->reads >= (long)pages);
  long reads = store->reads, writes = store->writes;

  /* A store's failed write (-1, errno) is the write-back's error. */
  region = (char*)Umap::umap_ex(NULL, len, PROT_READ | PROT_WRITE, UMAP_PRIVATE, -1, 0, store);
  CHECK(region != UMAP_FAILED);
  region[0] = 'x';
  store->fail_writes = true;
  errno = 0;
  CHECK(umap_flush() == -1 && errno == ENOSPC);
  store->fail_writes = false;
  CHECK(uunmap(region, 0) == 0);
  CHECK(store->bytes[0] == 'x');
  CHECK(store->reads > reads && store->writes > writes);
  delete store;

  /* A length of 0 is refused, as by UMap. */
  errno = 0;
  CHECK(Umap::umap_ex(NULL, 0, PROT_READ, UMAP_PRIVATE, -1, 0, store) == UMAP_FAILED && errno == EINVAL);

  /* make_store: a StoreFile over a file descriptor, the store umap uses. */
  char path[4096];
  int fd = make_file(path, len, O_RDWR);
  Umap::Store* file_store = Umap::Store::make_store(NULL, len, psize, fd);
  region = (char*)Umap::umap_ex(NULL, len, PROT_READ | PROT_WRITE, UMAP_PRIVATE, -1, 0, file_store);
  CHECK(region != UMAP_FAILED);
  for (size_t i = 0; i < len; i += 256) CHECK((unsigned char)region[i] == pattern(i));
  memset(region + psize, 'f', psize);
  CHECK(uunmap(region, len) == 0);
  delete file_store;
  char c;
  pread_all(fd, &c, 1, (off_t)(psize + 17));
  CHECK(c == 'f');
  pread_all(fd, &c, 1, (off_t)(2 * psize));
  CHECK((unsigned char)c == pattern(2 * psize));
  close(fd);
  unlink(path);

  printf("umap_store: ok (%ld reads, %ld writes of the memory store)\n", reads, writes);
  return 0;
}
