/* umio_advise beside madvise(2) on a MAP_SHARED kernel mapping of an
   identical file: the same writes, the same advice on the same range, then
   the same bytes read back through each mapping and held by each file
   after a flush. */
#include <sys/mman.h>

#include <umap/umap.h>
#include <umio.h>

#include "check.h"

#define PAGE (64u << 10)
#define K4 4096u
#define LEN (16 * PAGE)

struct row {
  const char *name;
  int umio_advice;
  int madvice;
  size_t from, to;
};

static void copy_file(int from, int to) {
  static unsigned char buf[LEN];
  pread_all(from, buf, LEN, 0);
  CHECK(pwrite(to, buf, LEN, 0) == (ssize_t)LEN);
}

int main(void) {
  CHECK(umio_config_set_page_size(PAGE) == 0);
  CHECK(umio_config_set_cache_bytes(8 * PAGE) == 0);
  const struct row rows[] = {
      {"remove whole pages", UMIO_ADVICE_REMOVE, MADV_REMOVE, 2 * PAGE, 4 * PAGE},
      {"remove 4 KiB in a page", UMIO_ADVICE_REMOVE, MADV_REMOVE, 5 * PAGE + K4, 5 * PAGE + 3 * K4},
      {"remove across pages", UMIO_ADVICE_REMOVE, MADV_REMOVE, 7 * PAGE - K4, 8 * PAGE + K4},
      {"pageout", UMIO_ADVICE_PAGEOUT, MADV_PAGEOUT, 0, LEN},
      {"cold", UMIO_ADVICE_COLD, MADV_COLD, PAGE, 3 * PAGE},
      {"willneed", UMIO_ADVICE_WILLNEED, MADV_WILLNEED, 0, LEN},
      {"sequential", UMIO_ADVICE_SEQUENTIAL, MADV_SEQUENTIAL, 0, LEN},
      {"random", UMIO_ADVICE_RANDOM, MADV_RANDOM, 0, LEN},
      {"normal", UMIO_ADVICE_NORMAL, MADV_NORMAL, 0, LEN},
  };
  static unsigned char kfile[LEN], ufile[LEN];
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    const struct row *r = &rows[i];
    char kpath[4096], upath[4096];
    int kfd = make_file(kpath, LEN, O_RDWR);
    int ufd = make_file(upath, LEN, O_RDWR);
    copy_file(kfd, ufd);
    unsigned char *k = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, kfd, 0);
    unsigned char *u = umap(NULL, LEN, PROT_READ | PROT_WRITE, UMAP_PRIVATE, ufd, 0);
    CHECK(k != MAP_FAILED && u != UMAP_FAILED);
    /* Dirty bytes in and around the range, not yet written back. */
    const size_t at[] = {2 * PAGE + 100, 5 * PAGE, 7 * PAGE - 2 * K4, 12 * PAGE + 7};
    const size_t len[] = {5000, 3 * K4, PAGE, 11};
    for (int w = 0; w < 4; w++)
      for (size_t j = 0; j < len[w]; j++) {
        unsigned char b = (unsigned char)(j * 31 + (size_t)w + i);
        k[at[w] + j] = b;
        u[at[w] + j] = b;
      }
    CHECK(madvise(k + r->from, r->to - r->from, r->madvice) == 0);
    if (umio_advise(u + r->from, r->to - r->from, r->umio_advice) != 0) {
      fprintf(stderr, "%s: umio_advise: errno %d\n", r->name, errno);
      exit(1);
    }
    if (memcmp(u, k, LEN) != 0) {
      fprintf(stderr, "%s: the mappings differ\n", r->name);
      exit(1);
    }
    CHECK(msync(k, LEN, MS_SYNC) == 0);
    CHECK(umio_flush(u, LEN) == 0);
    pread_all(kfd, kfile, LEN, 0);
    pread_all(ufd, ufile, LEN, 0);
    if (memcmp(kfile, ufile, LEN) != 0) {
      fprintf(stderr, "%s: the files differ\n", r->name);
      exit(1);
    }
    if (r->umio_advice == UMIO_ADVICE_REMOVE)
      for (size_t j = r->from; j < r->to; j++) CHECK(ufile[j] == 0);
    CHECK(munmap(k, LEN) == 0);
    CHECK(uunmap(u, LEN) == 0);
    close(kfd);
    close(ufd);
    unlink(kpath);
    unlink(upath);
  }
  /* Refused, nothing changed: REMOVE of a read-only mapping, of part of a
     4 KiB page; an unknown advice value. */
  char path[4096];
  int fd = make_file(path, LEN, O_RDWR);
  unsigned char *ro = umap(NULL, LEN, PROT_READ, UMAP_PRIVATE, fd, 0);
  CHECK(ro != UMAP_FAILED);
  errno = 0;
  CHECK(umio_advise(ro, PAGE, UMIO_ADVICE_REMOVE) == -1 && errno == EINVAL);
  CHECK(uunmap(ro, LEN) == 0);
  unsigned char *rw = umap(NULL, LEN, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fd, 0);
  CHECK(rw != UMAP_FAILED);
  errno = 0;
  CHECK(umio_advise(rw + 100, K4, UMIO_ADVICE_REMOVE) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(umio_advise(rw, K4, 12345) == -1 && errno == EINVAL);
  for (size_t j = 0; j < LEN; j += 997) CHECK(rw[j] == pattern(j));
  CHECK(uunmap(rw, LEN) == 0);
  close(fd);
  unlink(path);
  printf("advice: ok\n");
  return 0;
}
