/* Integrity under eviction: two threads write and read random bytes of a
   file 16 times larger than the cache, checking every read against a model
   of the file; then the whole mapping, the file after umap_flush, and the
   file after uunmap must equal the model. */
#include <pthread.h>

#include <umap/umap.h>
#include <umio.h>

#include "check.h"

#define PAGE (16u << 10)
#define PAGES 512u            /* 8 MiB file */
#define CACHE (32u * PAGE)    /* 512 KiB cache */
#define OPS 20000

static unsigned char *map;
static unsigned char *model;

struct worker {
  unsigned id;
  uint64_t seed;
  unsigned long reads, writes;
};

/* Thread `id` owns the pages whose index is id modulo 2, so its model of
   them is exact; the other thread's traffic evicts its pages meanwhile. */
static void *work(void *arg) {
  struct worker *w = arg;
  for (int i = 0; i < OPS; i++) {
    uint64_t r = next_random(&w->seed);
    size_t page = (size_t)((r >> 8) % (PAGES / 2)) * 2 + w->id;
    size_t off = page * PAGE + (size_t)((r >> 32) % (PAGE - 8));
    if (r & 1) {
      unsigned char v[8];
      for (int k = 0; k < 8; k++) v[k] = (unsigned char)(r >> (8 * k)) ^ 0x5a;
      memcpy(model + off, v, 8);
      memcpy(map + off, v, 8);
      w->writes++;
    } else {
      CHECK(memcmp(map + off, model + off, 8) == 0);
      w->reads++;
    }
  }
  return NULL;
}

int main(void) {
  char path[4096];
  const size_t len = (size_t)PAGES * PAGE;
  CHECK(umio_config_set_page_size(PAGE) == 0);
  CHECK(umio_config_set_cache_bytes(CACHE) == 0);
  CHECK(umio_config_set_fillers(2) == 0);
  int fd = make_file(path, len, O_RDWR);
  model = malloc(len);
  CHECK(model != NULL);
  pread_all(fd, model, len, 0);

  map = umap(NULL, len, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fd, 0);
  CHECK(map != UMAP_FAILED);
  CHECK(umapcfg_get_max_pages_in_buffer() == CACHE / PAGE);

  struct worker w[2] = {{0, 0x1234567, 0, 0}, {1, 0x89abcdef, 0, 0}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, work, &w[i]) == 0);
  for (int i = 0; i < 2; i++) CHECK(pthread_join(t[i], NULL) == 0);

  CHECK(memcmp(map, model, len) == 0);
  struct umio_stats st = {.size = sizeof st};
  CHECK(umio_stats(map, &st) == 0);
  CHECK(st.evictions > 0);
  CHECK(st.writebacks > 0);
  CHECK(st.fills >= PAGES);

  unsigned char *file = malloc(len);
  CHECK(file != NULL);
  CHECK(umap_flush() == 0);
  pread_all(fd, file, len, 0);
  CHECK(memcmp(file, model, len) == 0);

  /* More writes, then uunmap alone must make them durable. */
  for (size_t page = 0; page < PAGES; page += 7) {
    map[page * PAGE + 3] = model[page * PAGE + 3] = (unsigned char)(page * 3);
  }
  CHECK(uunmap(map, len) == 0);
  pread_all(fd, file, len, 0);
  CHECK(memcmp(file, model, len) == 0);

  printf("eviction_integrity: %lu reads, %lu writes checked; %llu faults, "
         "%llu fills, %llu evictions, %llu write-backs\n",
         w[0].reads + w[1].reads, w[0].writes + w[1].writes,
         (unsigned long long)st.faults, (unsigned long long)st.fills,
         (unsigned long long)st.evictions, (unsigned long long)st.writebacks);
  close(fd);
  unlink(path);
  free(file);
  free(model);
  return 0;
}
