/* Eviction and prefetch policies written in C.

   The eviction policy is a FIFO ring under a mutex that never evicts the
   pages of a protected range (the first PROTECTED pages): after scans of
   a file 16 times larger than the cache, with writes, those pages are all
   still resident (mincore) while the rest was evicted. The prefetcher
   fetches the page two ahead of each miss: the page is filled in the
   background (umio_stats.prefetched), and reading it later costs no
   fault; the page in between is not fetched, so the built-in read-ahead
   is not what fetched it. Every byte read is checked against the file,
   and the file against a model after flush and unmap. */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>

#include <umap/umap.h>
#include <umio.h>

#include "check.h"

#define PAGE (16u << 10)
#define PAGES 256u         /* 4 MiB file */
#define CACHE (32u * PAGE) /* 512 KiB cache */
#define PROTECTED 8u       /* pages [0, 8) are never evicted */
#define RING 4096u

/* ---- eviction policy ---- */

struct fifo {
  pthread_mutex_t lock;
  struct umio_page_key ring[RING];
  size_t head, len;
  uint64_t region;        /* the one region the test maps */
  unsigned long inserted, prefetched, touched, restored, forgotten;
  unsigned long victims, spared, stale, overflow, wrong_region;
  unsigned long protected_victims, purges;
  int releases;
};

static void push_locked(struct fifo *f, struct umio_page_key key) {
  if (f->region == 0) f->region = key.region;
  if (key.region != f->region) f->wrong_region++;
  if (f->len == RING) {
    f->overflow++;
    return;
  }
  f->ring[(f->head + f->len) % RING] = key;
  f->len++;
}

static struct umio_page_key pop_locked(struct fifo *f) {
  struct umio_page_key k = f->ring[f->head];
  f->head = (f->head + 1) % RING;
  f->len--;
  return k;
}

static void fifo_inserted(void *user, struct umio_page_key key) {
  struct fifo *f = user;
  pthread_mutex_lock(&f->lock);
  f->inserted++;
  push_locked(f, key);
  pthread_mutex_unlock(&f->lock);
}

static void fifo_prefetched(void *user, struct umio_page_key key) {
  struct fifo *f = user;
  pthread_mutex_lock(&f->lock);
  f->prefetched++;
  push_locked(f, key);
  pthread_mutex_unlock(&f->lock);
}

static void fifo_restore(void *user, struct umio_page_key key) {
  struct fifo *f = user;
  pthread_mutex_lock(&f->lock);
  f->restored++;
  push_locked(f, key);
  pthread_mutex_unlock(&f->lock);
}

static void fifo_touched(void *user, struct umio_page_key key, int touch) {
  struct fifo *f = user;
  (void)key;
  pthread_mutex_lock(&f->lock);
  if (touch == UMIO_TOUCH_FIRST_WRITE || touch == UMIO_TOUCH_COALESCED) f->touched++;
  pthread_mutex_unlock(&f->lock);
}

/* Drops the entries of `gone_region` and, with a probe, those of pages
   gone, empty or pinned; keeps the rest in order. */
static void filter_locked(struct fifo *f, umio_probe_fn probe, const void *ctx,
                          uint64_t gone_region) {
  size_t n = f->len;
  for (size_t i = 0; i < n; i++) {
    struct umio_page_key k = pop_locked(f);
    if (k.region == gone_region) continue;
    if (probe != NULL) {
      struct umio_page_probe p;
      if (probe(ctx, k, 0, &p) != 1 || p.state == UMIO_PAGE_EMPTY || p.pinned) {
        f->stale++;
        continue;
      }
    }
    push_locked(f, k);
  }
}

static void fifo_forget_region(void *user, uint64_t region) {
  struct fifo *f = user;
  pthread_mutex_lock(&f->lock);
  f->forgotten++;
  filter_locked(f, NULL, NULL, region);
  pthread_mutex_unlock(&f->lock);
}

static void fifo_purge(void *user, umio_probe_fn probe, const void *ctx) {
  struct fifo *f = user;
  pthread_mutex_lock(&f->lock);
  f->purges++;
  filter_locked(f, probe, ctx, 0);
  pthread_mutex_unlock(&f->lock);
}

static size_t fifo_select(void *user, umio_probe_fn probe, const void *ctx,
                          struct umio_page_key *out, size_t max) {
  struct fifo *f = user;
  size_t n = 0;
  pthread_mutex_lock(&f->lock);
  /* One pass at most over the entries there now, oldest first. */
  for (size_t budget = f->len; budget > 0 && n < max; budget--) {
    struct umio_page_key k = pop_locked(f);
    struct umio_page_probe p;
    int found = probe(ctx, k, 1, &p);
    CHECK(found == 0 || found == 1);
    if (found == 0 || p.state == UMIO_PAGE_EMPTY || p.pinned) {
      f->stale++; /* gone, evicted or pinned: forget it */
    } else if (k.index < PROTECTED) {
      f->spared++;
      push_locked(f, k);
    } else if (p.busy) {
      push_locked(f, k);
    } else {
      out[n++] = k;
    }
  }
  f->victims += n;
  for (size_t i = 0; i < n; i++)
    if (out[i].index < PROTECTED) f->protected_victims++;
  pthread_mutex_unlock(&f->lock);
  return n;
}

static size_t fifo_tracked(void *user) {
  struct fifo *f = user;
  pthread_mutex_lock(&f->lock);
  size_t n = f->len;
  pthread_mutex_unlock(&f->lock);
  return n;
}

static void fifo_release(void *user) {
  struct fifo *f = user;
  pthread_mutex_lock(&f->lock);
  f->releases++;
  pthread_mutex_unlock(&f->lock);
}

/* ---- prefetcher ---- */

struct ahead {
  atomic_ulong faults, misses, asked;
  atomic_int releases;
};

static size_t ahead_on_fault(void *user, const struct umio_fault *fault,
                             struct umio_page_range *out, size_t cap) {
  struct ahead *a = user;
  atomic_fetch_add(&a->faults, 1);
  if (cap < 1 || fault->kind != UMIO_FAULT_MISS) return 0;
  atomic_fetch_add(&a->misses, 1);
  if (fault->offset != fault->page * PAGE || fault->page >= fault->pages) return 0;
  if (fault->page + 2 >= fault->pages) return 0;
  out[0].start = fault->page + 2;
  out[0].end = fault->page + 3;
  atomic_fetch_add(&a->asked, 1);
  return 1;
}

static void ahead_release(void *user) {
  struct ahead *a = user;
  atomic_fetch_add(&a->releases, 1);
}

/* ---- helpers ---- */

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Whether the first system page of page `i` of `map` is resident. */
static int resident(unsigned char *map, size_t i) {
  unsigned char v = 0;
  CHECK(mincore(map + i * PAGE, 4096, &v) == 0);
  return v & 1;
}

static size_t resident_in(unsigned char *map, size_t from, size_t to) {
  size_t n = 0;
  for (size_t i = from; i < to; i++) n += (size_t)resident(map, i);
  return n;
}

static int released(atomic_int *count) {
  WAIT_UNTIL(atomic_load(count) != 0);
  return atomic_load(count);
}

static int int_release_count;
static void count_release(void *user) {
  (void)user;
  int_release_count++;
}

int main(void) {
  char path[4096];
  const size_t len = (size_t)PAGES * PAGE;
  CHECK(umio_config_set_page_size(PAGE) == 0);
  CHECK(umio_config_set_cache_bytes(CACHE) == 0);
  CHECK(umio_config_set_fillers(2) == 0);

  /* max_fault_events: range checked, and reported as set. */
  errno = 0;
  CHECK(umio_config_set_max_fault_events(0) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(umio_config_set_max_fault_events(4097) == -1 && errno == EINVAL);
  CHECK(umio_config_set_max_fault_events(32) == 0);
  CHECK(umapcfg_get_max_fault_events() == 32);

  /* Eviction ops: NULL and a missing select_victims are EINVAL (and the
     latter's user is released at once); a replaced policy is released. */
  errno = 0;
  CHECK(umio_config_set_eviction_ops(NULL) == -1 && errno == EINVAL);
  struct umio_eviction_ops bad = {0};
  bad.inserted = fifo_inserted;
  bad.release = count_release;
  errno = 0;
  CHECK(umio_config_set_eviction_ops(&bad) == -1 && errno == EINVAL);
  CHECK(int_release_count == 1);
  struct umio_eviction_ops first = {0};
  first.select_victims = fifo_select;
  first.release = count_release;
  CHECK(umio_config_set_eviction_ops(&first) == 0);
  CHECK(int_release_count == 1);

  static struct fifo f;
  CHECK(pthread_mutex_init(&f.lock, NULL) == 0);
  struct umio_eviction_ops ops = {0};
  ops.inserted = fifo_inserted;
  ops.prefetched = fifo_prefetched;
  ops.touched = fifo_touched;
  ops.restore = fifo_restore;
  ops.forget_region = fifo_forget_region;
  ops.select_victims = fifo_select;
  ops.tracked = fifo_tracked;
  ops.purge = fifo_purge;
  ops.release = fifo_release;
  ops.user = &f;
  CHECK(umio_config_set_eviction_ops(&ops) == 0);
  CHECK(int_release_count == 2); /* `first` was replaced */

  struct umio_config cfg;
  CHECK(umio_config_get(&cfg) == 0);
  CHECK(strcmp(cfg.eviction, "custom") == 0 && cfg.max_fault_events == 32 && !cfg.running);

  int fd = make_file(path, len, O_RDWR);
  unsigned char *model = malloc(len);
  CHECK(model != NULL);
  pread_all(fd, model, len, 0);

  /* Prefetch ops: on_fault is required; a name or window besides them is
     EINVAL; either way their user is released before umio_map returns. */
  static struct ahead a, a_bad;
  struct umio_prefetch_ops pf_bad = {NULL, ahead_release, &a_bad};
  struct umio_map_options opts = {.size = sizeof opts};
  opts.prefetcher = &pf_bad;
  errno = 0;
  CHECK(umio_map(NULL, len, PROT_READ, MAP_SHARED, fd, 0, &opts) == UMIO_FAILED &&
        errno == EINVAL);
  CHECK(atomic_load(&a_bad.releases) == 1);
  pf_bad.on_fault = ahead_on_fault;
  opts.prefetch = "stride";
  errno = 0;
  CHECK(umio_map(NULL, len, PROT_READ, MAP_SHARED, fd, 0, &opts) == UMIO_FAILED &&
        errno == EINVAL);
  CHECK(atomic_load(&a_bad.releases) == 2 && atomic_load(&a_bad.faults) == 0);

  struct umio_prefetch_ops pf = {ahead_on_fault, ahead_release, &a};
  opts.prefetch = NULL;
  opts.prefetcher = &pf;
  unsigned char *map =
      umio_map(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0, &opts);
  CHECK(map != UMIO_FAILED);
  CHECK(umio_config_get(&cfg) == 0 && cfg.running && cfg.max_fault_events == 32);
  CHECK(umapcfg_get_max_fault_events() == 32);

  /* Too late now: EBUSY, and the ops given are released at once. */
  struct umio_eviction_ops late = first;
  errno = 0;
  CHECK(umio_config_set_eviction_ops(&late) == -1 && errno == EBUSY);
  CHECK(int_release_count == 3);
  errno = 0;
  CHECK(umio_config_set_max_fault_events(16) == -1 && errno == EBUSY);

  /* Prefetch: a miss on page 100 fetches page 102 (not 101). First, with
     nothing else touched, so that no other prefetch is in flight: a
     prefetch of a page read before (the protected pages' misses ask for
     pages 2 ahead) could otherwise be counted between the two snapshots
     below. */
  CHECK(!resident(map, 100) && !resident(map, 101) && !resident(map, 102));
  struct umio_stats before = {.size = sizeof before}, after = {.size = sizeof after};
  CHECK(umio_stats(map, &before) == 0);
  CHECK(map[100 * PAGE + 5] == model[100 * PAGE + 5]);
  /* The page is installed before the prefetch is counted: wait for both. */
  for (int i = 0; i < HANG_MS; i++) {
    CHECK(umio_stats(map, &after) == 0);
    if (resident(map, 102) && after.prefetched >= before.prefetched + 1 &&
        after.fills >= before.fills + 2)
      break;
    sleep_ms(1);
  }
  CHECK(resident(map, 102));
  CHECK(!resident(map, 101));
  CHECK(umio_stats(map, &after) == 0);
  CHECK(after.prefetched == before.prefetched + 1);
  CHECK(after.fills == before.fills + 2);
  /* Reading the prefetched page costs no fault: it is resident. */
  CHECK(memcmp(map + 102 * PAGE, model + 102 * PAGE, PAGE) == 0);
  struct umio_stats read_later = {.size = sizeof read_later};
  CHECK(umio_stats(map, &read_later) == 0);
  CHECK(read_later.faults == after.faults);
  CHECK(read_later.fills == after.fills);

  /* The protected pages, read before the scans. */
  for (size_t i = 0; i < PROTECTED; i++)
    CHECK(memcmp(map + i * PAGE, model + i * PAGE, PAGE) == 0);
  CHECK(resident_in(map, 0, PROTECTED) == PROTECTED);

  /* Scans with writes through a cache of 32 pages: everything but the
     protected pages is evicted over and over. */
  uint64_t seed = 0x51ed;
  for (int pass = 0; pass < 3; pass++) {
    for (size_t i = PROTECTED; i < PAGES; i++) {
      unsigned char *pg = map + i * PAGE;
      CHECK(memcmp(pg, model + i * PAGE, PAGE) == 0);
      if (i % 5 == (size_t)pass) {
        uint64_t r = next_random(&seed);
        size_t at = (size_t)(r % (PAGE - 8));
        memcpy(model + i * PAGE + at, &r, 8);
        memcpy(pg + at, &r, 8);
      }
    }
  }
  CHECK(umio_stats(map, &after) == 0);
  CHECK(after.evictions >= 2 * (PAGES - 32));
  CHECK(after.prefetched > read_later.prefetched);
  CHECK(after.writebacks > 0);

  /* The protected pages never left; the rest fits in what is left. */
  CHECK(resident_in(map, 0, PROTECTED) == PROTECTED);
  CHECK(resident_in(map, PROTECTED, PAGES) <= CACHE / PAGE - PROTECTED);
  for (size_t i = 0; i < PROTECTED; i++)
    CHECK(memcmp(map + i * PAGE, model + i * PAGE, PAGE) == 0);

  pthread_mutex_lock(&f.lock);
  CHECK(f.inserted >= PAGES && f.prefetched > 0 && f.touched > 0);
  CHECK(f.victims >= after.evictions && f.spared > 0);
  CHECK(f.protected_victims == 0 && f.overflow == 0 && f.wrong_region == 0);
  CHECK(f.region != 0 && f.releases == 0 && f.forgotten == 0);
  unsigned long victims = f.victims, spared = f.spared;
  pthread_mutex_unlock(&f.lock);
  CHECK(atomic_load(&a.asked) > 0 && atomic_load(&a.misses) >= PAGES);

  /* Integrity: the mapping, then the file after flush and after unmap. */
  CHECK(memcmp(map, model, len) == 0);
  unsigned char *file = malloc(len);
  CHECK(file != NULL);
  CHECK(umio_flush(map, 0) == 0);
  pread_all(fd, file, len, 0);
  CHECK(memcmp(file, model, len) == 0);
  map[PAGES / 2 * PAGE] ^= 0xff;
  model[PAGES / 2 * PAGE] ^= 0xff;
  CHECK(atomic_load(&a.releases) == 0);
  CHECK(umio_unmap(map, len) == 0);
  pread_all(fd, file, len, 0);
  CHECK(memcmp(file, model, len) == 0);

  /* The prefetcher is released once, after the unmap; the region is
     forgotten; the eviction policy stays in use (the runtime runs until
     exit), so it is not released. */
  CHECK(released(&a.releases) == 1);
  sleep_ms(20);
  CHECK(atomic_load(&a.releases) == 1);
  unsigned long forgotten = 0;
  for (int i = 0; i < HANG_MS && forgotten == 0; i++) {
    pthread_mutex_lock(&f.lock);
    forgotten = f.forgotten;
    CHECK(f.releases == 0);
    pthread_mutex_unlock(&f.lock);
    if (forgotten == 0) sleep_ms(1);
  }
  CHECK(forgotten == 1);

  printf("c_policies: %llu evictions (%lu victims, %lu protected spared), "
         "%llu prefetched, integrity checked\n",
         (unsigned long long)after.evictions, victims, spared,
         (unsigned long long)after.prefetched);
  free(file);
  free(model);
  close(fd);
  unlink(path);
  return 0;
}
