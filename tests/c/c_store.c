/* A store written in C: umio reads, writes, flushes and sizes it through
   callbacks, reports their errors, and releases it exactly once. */
#include <pthread.h>

#include <umio.h>

#include "check.h"

#define PAGE (16u << 10)

struct mem {
  pthread_mutex_t lock;
  unsigned char *bytes;
  size_t len;
  int write_errno; /* when set, writes fail with it */
  int reads, writes, flushes, releases;
};

static int64_t mem_read(void *user, uint64_t off, void *buf, size_t len) {
  struct mem *m = user;
  pthread_mutex_lock(&m->lock);
  size_t n = 0;
  if (off < m->len) {
    n = m->len - (size_t)off < len ? m->len - (size_t)off : len;
    memcpy(buf, m->bytes + off, n);
  }
  m->reads++;
  pthread_mutex_unlock(&m->lock);
  return (int64_t)n;
}

static int mem_resize(void *user, uint64_t size) {
  struct mem *m = user;
  pthread_mutex_lock(&m->lock);
  unsigned char *b = realloc(m->bytes, size);
  if (b == NULL) {
    pthread_mutex_unlock(&m->lock);
    return -ENOMEM;
  }
  if (size > m->len) memset(b + m->len, 0, size - m->len);
  m->bytes = b;
  m->len = size;
  pthread_mutex_unlock(&m->lock);
  return 0;
}

static int64_t mem_write(void *user, uint64_t off, const void *buf, size_t len) {
  struct mem *m = user;
  pthread_mutex_lock(&m->lock);
  int fail = m->write_errno;
  pthread_mutex_unlock(&m->lock);
  if (fail) return -fail;
  /* Short writes are allowed: umio calls again for the rest. */
  size_t n = len > 5000 ? 5000 : len;
  if (off + n > m->len && mem_resize(m, off + n) != 0) return -ENOMEM;
  pthread_mutex_lock(&m->lock);
  memcpy(m->bytes + off, buf, n);
  m->writes++;
  pthread_mutex_unlock(&m->lock);
  return (int64_t)n;
}

static int mem_flush(void *user) {
  struct mem *m = user;
  pthread_mutex_lock(&m->lock);
  m->flushes++;
  pthread_mutex_unlock(&m->lock);
  return 0;
}

static int64_t mem_size(void *user) {
  struct mem *m = user;
  pthread_mutex_lock(&m->lock);
  int64_t n = (int64_t)m->len;
  pthread_mutex_unlock(&m->lock);
  return n;
}

static int64_t broken_size(void *user) {
  (void)user;
  return -EIO;
}

static void mem_release(void *user) {
  struct mem *m = user;
  pthread_mutex_lock(&m->lock);
  m->releases++;
  pthread_mutex_unlock(&m->lock);
}

static struct mem *new_mem(size_t len) {
  struct mem *m = calloc(1, sizeof *m);
  CHECK(m != NULL);
  pthread_mutex_init(&m->lock, NULL);
  m->bytes = malloc(len);
  CHECK(m->bytes != NULL);
  m->len = len;
  for (size_t i = 0; i < len; i++) m->bytes[i] = pattern(i);
  return m;
}

int main(void) {
  const size_t len = 10 * PAGE + 123;
  struct mem *m = new_mem(len);
  struct umio_store_ops ops = {mem_read, mem_write, mem_flush, mem_size,
                               mem_resize, mem_release, m};
  struct umio_map_options opts = {.size = sizeof opts};
  opts.store = &ops;
  opts.page_size = PAGE;
  opts.prefetch = "none";

  /* Length 0: the whole store. */
  unsigned char *p = umio_map(NULL, 0, PROT_READ | PROT_WRITE, MAP_SHARED, -1, 0, &opts);
  CHECK(p != UMIO_FAILED);
  for (size_t i = 0; i < len; i += 997) CHECK(p[i] == pattern(i));
  CHECK(p[len - 1] == pattern(len - 1));
  CHECK(m->reads == 11); /* every page once, no read-ahead */

  memcpy(p + PAGE + 7, "written in C", 12);
  p[len - 1] = 'Z';
  CHECK(umio_flush(p, 0) == 0);
  CHECK(memcmp(m->bytes + PAGE + 7, "written in C", 12) == 0 && m->bytes[len - 1] == 'Z');
  CHECK(m->flushes >= 1 && m->writes >= 4); /* 16 KiB pages in 5000-byte writes */

  /* A failing write is reported by the flush, and the page stays dirty. */
  p[3 * PAGE] = 'w';
  m->write_errno = ENOSPC;
  errno = 0;
  CHECK(umio_flush(p, 0) == -1 && errno == ENOSPC);
  m->write_errno = 0;
  CHECK(umio_flush(p, 0) == 0 && m->bytes[3 * PAGE] == 'w');

  struct umio_stats st = {.size = sizeof st};
  CHECK(umio_stats(p, &st) == 0);
  CHECK(st.fills == 11 && st.bytes_read == len && st.bytes_written >= 2 * PAGE);

  CHECK(m->releases == 0);
  CHECK(umio_unmap(p, len) == 0);
  /* Released once umio is done with it: after the unmap, maybe on another
     thread a moment later. */
  WAIT_UNTIL(m->releases != 0);
  CHECK(m->releases == 1);

  /* Growing: a writable mapping past the end resizes the store. */
  struct mem *g = new_mem(PAGE);
  struct umio_store_ops gops = {mem_read, mem_write, NULL, mem_size, mem_resize,
                                mem_release, g};
  opts.store = &gops;
  p = umio_map(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE, -1, 0, &opts);
  CHECK(p != UMIO_FAILED);
  CHECK(g->len == 4 * PAGE && p[PAGE] == 0 && p[PAGE - 1] == pattern(PAGE - 1));
  p[4 * PAGE - 1] = 'g';
  CHECK(umio_unmap(p, 4 * PAGE) == 0);
  CHECK(g->bytes[4 * PAGE - 1] == 'g');

  /* Without resize it cannot grow: EFBIG, and the store is released. */
  gops.resize = NULL;
  int before = g->releases;
  errno = 0;
  p = umio_map(NULL, 8 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE, -1, 0, &opts);
  CHECK(p == UMIO_FAILED && errno == EFBIG && g->releases == before + 1);

  /* Without write it is read-only: PROT_WRITE is EACCES, PROT_READ works. */
  gops.write = NULL;
  errno = 0;
  p = umio_map(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE, -1, 0, &opts);
  CHECK(p == UMIO_FAILED && errno == EACCES && g->releases == before + 2);
  p = umio_map(NULL, PAGE, PROT_READ, MAP_PRIVATE, -1, 0, &opts);
  CHECK(p != UMIO_FAILED && p[5] == pattern(5));
  CHECK(umio_unmap(p, PAGE) == 0);

  /* The size callback's errno is the map's. */
  gops.size = broken_size;
  errno = 0;
  p = umio_map(NULL, 0, PROT_READ, MAP_PRIVATE, -1, 0, &opts);
  CHECK(p == UMIO_FAILED && errno == EIO);

  for (struct mem *x = m; x; x = x == m ? g : NULL) {
    pthread_mutex_destroy(&x->lock);
    free(x->bytes);
    free(x);
  }
  printf("c_store: reads, short writes, flush, write errors, growth and release checked\n");
  return 0;
}
