/* The C library's process-wide runtime: setters before the first mapping,
   EBUSY after it but for the cache bound, which changes the running
   runtime; a failed start remembered until a setter changes the
   configuration; and a fork child, which starts a runtime of its own (its
   parent's threads are not in it) from its own settings. */
#include <sys/wait.h>
#include <umap/umap.h>
#include <umio.h>

#include "check.h"

#define PAGE 4096
#define LEN (64 * PAGE)

static struct umio_config config(void) {
  struct umio_config c;
  CHECK(umio_config_get(&c) == 0);
  return c;
}

static void check_pages(const unsigned char *p) {
  for (size_t off = 0; off < LEN; off += PAGE) CHECK(p[off + 7] == pattern(off + 7));
}

int main(void) {
  char path[4096];
  int fd = make_file(path, LEN, O_RDWR);

  CHECK(config().running == 0);
  CHECK(umio_config_set_fillers(2) == 0);
  CHECK(umio_config_set_page_size(PAGE) == 0);
  /* A cache of 3 pages: the start fails, and the same settings fail again
     without a second start; changed settings start. */
  CHECK(umio_config_set_cache_bytes(3 * PAGE) == 0);
  for (int i = 0; i < 2; i++) {
    errno = 0;
    CHECK(umap(NULL, LEN, PROT_READ, UMAP_PRIVATE, fd, 0) == UMAP_FAILED && errno == EINVAL);
    CHECK(config().running == 0);
  }
  CHECK(umio_config_set_cache_bytes(32 * PAGE) == 0);
  unsigned char *p = umap(NULL, LEN, PROT_READ, UMAP_PRIVATE, fd, 0);
  CHECK(p != UMAP_FAILED);
  check_pages(p);
  struct umio_config c = config();
  CHECK(c.running == 1 && c.fillers == 2 && c.page_size == PAGE && c.cache_bytes == 32 * PAGE);

  /* Running: the cache bound changes at once, other settings are EBUSY. */
  errno = 0;
  CHECK(umio_config_set_fillers(3) == -1 && errno == EBUSY);
  errno = 0;
  CHECK(umio_config_set_cache_bytes(64 * PAGE) == -1 && errno == EBUSY);
  CHECK(umio_set_cache_bytes(48 * PAGE) == 0);
  c = config();
  CHECK(c.cache_bytes == 48 * PAGE && c.fillers == 2);

  /* A fork child has no runtime until its first mapping: its setters work,
     and its mapping is served by a runtime of its own. */
  fflush(stdout);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    CHECK(config().running == 0);
    CHECK(umio_config_set_fillers(1) == 0);
    unsigned char *q = umap(NULL, LEN, PROT_READ, UMAP_PRIVATE, fd, 0);
    CHECK(q != UMAP_FAILED);
    check_pages(q);
    c = config();
    /* The settings made before the parent's start, and the child's own. */
    CHECK(c.running == 1 && c.fillers == 1 && c.cache_bytes == 32 * PAGE);
    errno = 0;
    CHECK(umio_config_set_fillers(2) == -1 && errno == EBUSY);
    CHECK(uunmap(q, LEN) == 0);
    _exit(0);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  /* The parent's runtime is untouched by the child's. */
  /* The parent's pages dropped and faulted in again: its runtime serves them. */
  CHECK(umio_advise(p, LEN, UMIO_ADVICE_DONTNEED) == 0);
  check_pages(p);
  c = config();
  CHECK(c.running == 1 && c.fillers == 2 && c.cache_bytes == 48 * PAGE);
  CHECK(uunmap(p, LEN) == 0);
  printf("process_runtime: ok\n");
  close(fd);
  unlink(path);
  return 0;
}
