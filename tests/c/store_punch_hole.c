/* A C store's optional punch_hole (umio_map_options.store_punch_hole):
   UMIO_ADVICE_REMOVE on its mapping writes dirty pages back, calls it with
   the store's offset and length, and the range reads zeros after, in the
   mapping and in the store; without it (or from a program built against a
   header without the member) REMOVE fails with EOPNOTSUPP. */
#include <pthread.h>
#include <stddef.h>

#include <umio.h>

#include "check.h"

#define PAGE (16u << 10)
#define K4 4096u
#define LEN (8 * PAGE)

struct mem {
  pthread_mutex_t lock;
  unsigned char bytes[LEN];
  int punches, releases;
  uint64_t last_off, last_len;
  int punch_errno; /* when set, punch_hole fails with it */
};

static int64_t mem_read(void *user, uint64_t off, void *buf, size_t len) {
  struct mem *m = user;
  pthread_mutex_lock(&m->lock);
  size_t n = off < LEN ? (LEN - (size_t)off < len ? LEN - (size_t)off : len) : 0;
  memcpy(buf, m->bytes + off, n);
  pthread_mutex_unlock(&m->lock);
  return (int64_t)n;
}

static int64_t mem_write(void *user, uint64_t off, const void *buf, size_t len) {
  struct mem *m = user;
  if (off + len > LEN) return -ENOSPC;
  pthread_mutex_lock(&m->lock);
  memcpy(m->bytes + off, buf, len);
  pthread_mutex_unlock(&m->lock);
  return (int64_t)len;
}

static int64_t mem_size(void *user) {
  (void)user;
  return LEN;
}

static void mem_release(void *user) {
  struct mem *m = user;
  pthread_mutex_lock(&m->lock);
  m->releases++;
  pthread_mutex_unlock(&m->lock);
}

static int mem_punch(void *user, uint64_t off, uint64_t len) {
  struct mem *m = user;
  pthread_mutex_lock(&m->lock);
  int fail = m->punch_errno;
  if (!fail) {
    CHECK(off + len <= LEN);
    memset(m->bytes + off, 0, len);
    m->punches++;
    m->last_off = off;
    m->last_len = len;
  }
  pthread_mutex_unlock(&m->lock);
  return fail ? -fail : 0;
}

static void fill(struct mem *m) {
  for (size_t i = 0; i < LEN; i++) m->bytes[i] = pattern(i);
}

/* Maps the store from `PAGE` on (the store's offset of mapping byte i is
   PAGE + i), writable, with options of `size` bytes. */
static unsigned char *map(struct umio_store_ops *ops, struct umio_map_options *o) {
  o->store = ops;
  o->page_size = PAGE;
  o->prefetch = "none";
  return umio_map(NULL, LEN - PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, -1, PAGE, o);
}

int main(void) {
  static struct mem m;
  pthread_mutex_init(&m.lock, NULL);
  fill(&m);
  struct umio_store_ops ops = {mem_read, mem_write, NULL, mem_size, NULL, mem_release, &m};

  /* With the callback: dirty bytes outside the range survive, the range
     (4 KiB into page 1 to 4 KiB into page 3 of the mapping) reads zeros
     in the mapping and the store. */
  struct umio_map_options o = {.size = sizeof o};
  o.store_punch_hole = mem_punch;
  unsigned char *p = map(&ops, &o);
  CHECK(p != UMIO_FAILED);
  CHECK(p[PAGE + 5] == pattern(2 * PAGE + 5));
  memset(p, 'a', 2 * PAGE); /* pages 0 and 1 dirty */
  const size_t from = PAGE + K4, to = 3 * PAGE + K4;
  CHECK(umio_advise(p + from, to - from, UMIO_ADVICE_REMOVE) == 0);
  CHECK(m.punches == 1 && m.last_off == PAGE + from && m.last_len == to - from);
  for (size_t i = 0; i < LEN - PAGE; i++) {
    unsigned char want = i < from ? 'a' : i < to ? 0 : pattern(PAGE + i);
    CHECK(p[i] == want);
  }
  CHECK(umio_flush(p, 0) == 0);
  for (size_t i = 0; i < LEN - PAGE; i++) {
    unsigned char want = i < from ? 'a' : i < to ? 0 : pattern(PAGE + i);
    CHECK(m.bytes[PAGE + i] == want);
  }

  /* The callback's errno is the advice's; the bytes stay as they were. */
  m.punch_errno = EIO;
  errno = 0;
  CHECK(umio_advise(p + 4 * PAGE, PAGE, UMIO_ADVICE_REMOVE) == -1 && errno == EIO);
  m.punch_errno = 0;
  CHECK(p[4 * PAGE + 1] == pattern(5 * PAGE + 1));
  CHECK(umio_unmap(p, LEN - PAGE) == 0);
  WAIT_UNTIL(m.releases >= 1);
  CHECK(m.releases == 1);

  /* Without the callback: EOPNOTSUPP, and nothing is lost. */
  fill(&m);
  o.store_punch_hole = NULL;
  p = map(&ops, &o);
  CHECK(p != UMIO_FAILED);
  p[K4] = 'd';
  errno = 0;
  CHECK(umio_advise(p, 2 * PAGE, UMIO_ADVICE_REMOVE) == -1 && errno == EOPNOTSUPP);
  CHECK(p[K4] == 'd' && p[PAGE] == pattern(2 * PAGE));
  CHECK(umio_unmap(p, LEN - PAGE) == 0);
  CHECK(m.bytes[PAGE + K4] == 'd' && m.punches == 1);

  /* A program built against a header without the member: its options end
     before it, and umio reads no byte past `size` (the callback set past
     it is not seen): EOPNOTSUPP. */
  fill(&m);
  o.store_punch_hole = mem_punch;
  o.size = offsetof(struct umio_map_options, store_punch_hole);
  p = map(&ops, &o);
  CHECK(p != UMIO_FAILED);
  errno = 0;
  CHECK(umio_advise(p, PAGE, UMIO_ADVICE_REMOVE) == -1 && errno == EOPNOTSUPP);
  CHECK(m.punches == 1 && p[7] == pattern(PAGE + 7));
  CHECK(umio_unmap(p, LEN - PAGE) == 0);

  /* A punch_hole without a store is a mistake: EINVAL. */
  char path[4096];
  int fd = make_file(path, LEN, O_RDWR);
  struct umio_map_options f = {.size = sizeof f};
  f.store_punch_hole = mem_punch;
  errno = 0;
  CHECK(umio_map(NULL, LEN, PROT_READ, MAP_SHARED, fd, 0, &f) == UMIO_FAILED && errno == EINVAL);
  close(fd);
  unlink(path);

  WAIT_UNTIL(m.releases >= 3);
  CHECK(m.releases == 3);
  pthread_mutex_destroy(&m.lock);
  printf("store_punch_hole: REMOVE through a C store's punch_hole, EOPNOTSUPP without it\n");
  return 0;
}
