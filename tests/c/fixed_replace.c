/* What UMap's umapsort does with -N 2: umap a range as large as all the
   files, then umap each file with UMAP_FIXED inside it. The fixed
   mappings replace their part of the first one, as mmap's MAP_FIXED does:
   its dirty pages there reach its file first, its other pages keep
   working, and a range that would split one of its pages in use is
   refused (EINVAL) with nothing changed. MAP_FIXED_NOREPLACE still fails
   with EEXIST. */
#include <sys/mman.h>

#include <umap/umap.h>
#include <umio.h>

#include "check.h"

#define FILES 2
#define PAGES_PER_FILE 8

/* The byte sub-file `i` holds at `off`. */
static unsigned char sub_byte(int i, uint64_t off) { return (unsigned char)(pattern(off) ^ (0x5a + i)); }

static int make_sub_file(char *path, int i, size_t len) {
  int fd = make_file(path, len, O_RDWR);
  unsigned char *buf = malloc(len);
  CHECK(buf != NULL);
  for (size_t k = 0; k < len; k++) buf[k] = sub_byte(i, k);
  CHECK(pwrite(fd, buf, len, 0) == (ssize_t)len);
  free(buf);
  return fd;
}

int main(void) {
  CHECK(umio_config_set_read_ahead(0) == 0);
  CHECK(umio_config_set_page_size(65536) == 0);
  const size_t psize = umapcfg_get_umap_page_size();
  CHECK(psize == 65536);
  const size_t sub_len = PAGES_PER_FILE * psize;
  const size_t len = FILES * sub_len;

  /* The whole range, mapped from a file of its own; dirty bytes in it. */
  char whole_path[4096];
  int whole_fd = make_file(whole_path, len, O_RDWR);
  char *base = umap(NULL, len, PROT_READ | PROT_WRITE, UMAP_PRIVATE, whole_fd, 0);
  CHECK(base != UMAP_FAILED);
  base[3] = 'w';
  base[sub_len + 5 * psize + 9] = 'x';

  /* A range cutting through one of its pages in use: refused, nothing
     changed. */
  char paths[FILES][4096];
  int fds[FILES];
  for (int i = 0; i < FILES; i++) fds[i] = make_sub_file(paths[i], i, sub_len);
  errno = 0;
  CHECK(umap(base + 4096, psize, PROT_READ, UMAP_PRIVATE | UMAP_FIXED, fds[0], 0) == UMAP_FAILED);
  CHECK(errno == EINVAL);
  CHECK(base[3] == 'w' && (unsigned char)base[4096] == pattern(4096));
  /* MAP_FIXED_NOREPLACE keeps refusing overlap. */
  errno = 0;
  CHECK(umio_map(base + psize, psize, PROT_READ, MAP_SHARED | MAP_FIXED_NOREPLACE, fds[0], 0, NULL) ==
        UMIO_FAILED);
  CHECK(errno == EEXIST);

  /* Each file at its place in the range, as umapsort -N 2 maps them. */
  char *subs[FILES];
  for (int i = 0; i < FILES; i++) {
    subs[i] = umap(base + i * sub_len, sub_len, PROT_READ | PROT_WRITE, UMAP_PRIVATE | UMAP_FIXED, fds[i], 0);
    CHECK(subs[i] == base + i * sub_len);
    if (i == 0) {
      /* The rest of the first mapping still works, its dirty byte too. */
      CHECK(base[sub_len + 5 * psize + 9] == 'x');
      CHECK((unsigned char)base[sub_len + 7 * psize + 1] == pattern(sub_len + 7 * psize + 1));
    }
  }
  /* The dirty bytes of the replaced mapping reached its file. */
  char c;
  pread_all(whole_fd, &c, 1, 3);
  CHECK(c == 'w');
  pread_all(whole_fd, &c, 1, (off_t)(sub_len + 5 * psize + 9));
  CHECK(c == 'x');

  /* Each sub-mapping shows its file, takes writes, and writes them back. */
  for (int i = 0; i < FILES; i++)
    for (size_t k = 0; k < sub_len; k += 1021) CHECK((unsigned char)subs[i][k] == sub_byte(i, k));
  /* Sort each file's first bytes of every page, the way umapsort sorts in
     place: reversed page order here. */
  for (int i = 0; i < FILES; i++)
    for (size_t p = 0; p < PAGES_PER_FILE; p++) subs[i][p * psize] = (char)sub_byte(i, (PAGES_PER_FILE - 1 - p) * psize);
  struct umio_stats st;
  CHECK(umio_stats(subs[1] + psize, &st) == 0 && st.fills >= PAGES_PER_FILE);
  CHECK(umap_flush() == 0);
  for (int i = 0; i < FILES; i++) {
    for (size_t p = 0; p < PAGES_PER_FILE; p++) {
      pread_all(fds[i], &c, 1, (off_t)(p * psize));
      CHECK((unsigned char)c == sub_byte(i, (PAGES_PER_FILE - 1 - p) * psize));
    }
    CHECK(uunmap(subs[i], sub_len) == 0);
    close(fds[i]);
    unlink(paths[i]);
  }
  printf("fixed_replace: %d files mapped with UMAP_FIXED over a %zu-byte region, its dirty pages kept\n", FILES,
         len);
  close(whole_fd);
  unlink(whole_path);
  return 0;
}
