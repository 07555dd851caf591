/*
 * umio from C: map a file with UMap's API, write to it, read it back
 * through a cache smaller than the file, and make the writes durable.
 *
 *   cargo build --release -p umio-ffi
 *   cc examples/c/quickstart.c -I crates/ffi/include -L target/release -lumio \
 *      -Wl,-rpath,$PWD/target/release -o quickstart
 *   ./quickstart [path]        (as root, or with userfaultfd permission)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <umap/umap.h>
#include <umio.h>

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "/tmp/umio-quickstart.bin";
  const size_t len = 8 << 20; /* 8 MiB file */

  /* Before the first mapping: a 1 MiB cache of 64 KiB pages. The
     environment (UMAP_BUFSIZE, UMAP_PAGESIZE, ...) works too. */
  if (umio_config_set_cache_bytes(1 << 20) != 0 ||
      umio_config_set_page_size(64 << 10) != 0) {
    fprintf(stderr, "configure: %s\n", strerror(errno));
    return 1;
  }

  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
    fprintf(stderr, "%s: %s\n", path, strerror(errno));
    return 1;
  }

  char *p = umap(NULL, len, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fd, 0);
  if (p == UMAP_FAILED) {
    fprintf(stderr, "umap: %s\n", strerror(errno));
    return 1;
  }

  memcpy(p, "hello", 5);
  for (size_t i = 4096; i < len; i += 4096)
    p[i] = (char)(i >> 12); /* touches every page: the cache evicts as it goes */

  unsigned long sum = 0;
  for (size_t i = 4096; i < len; i += 4096)
    sum += (unsigned char)p[i];

  if (umap_flush() != 0) { /* dirty pages written back and fdatasync'd */
    fprintf(stderr, "umap_flush: %s\n", strerror(errno));
    return 1;
  }

  struct umio_stats st = {.size = sizeof st};
  if (umio_stats(p, &st) == 0)
    printf("faults %llu, fills %llu, evictions %llu, write-backs %llu\n",
           (unsigned long long)st.faults, (unsigned long long)st.fills,
           (unsigned long long)st.evictions, (unsigned long long)st.writebacks);

  if (uunmap(p, len) != 0) {
    fprintf(stderr, "uunmap: %s\n", strerror(errno));
    return 1;
  }

  char head[6] = {0};
  if (pread(fd, head, 5, 0) != 5) {
    fprintf(stderr, "pread: %s\n", strerror(errno));
    return 1;
  }
  printf("file starts with \"%s\"; checksum %lu\n", head, sum);
  close(fd);
  unlink(path);
  return strcmp(head, "hello") != 0;
}
