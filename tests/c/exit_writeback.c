/* Writes through a mapping, then ends in the way argv[2] names; the test
   (crates/ffi/tests/c_programs.rs) then reads the file argv[1] back: every
   byte written must be there, as with mmap's MAP_SHARED.
     exit          umap, then exit(0) without uunmap
     return        umap, then return from main without uunmap
     umio-exit     umio_map, then exit(0) without umio_unmap
     named         as exit, from a main thread the program names umio-app:
                   a name is not what makes a thread one of umio's own
     thread        two threads write a half each; main calls exit(0) while
                   the other still runs, reading its half in a loop
     atexit        a handler the program registers after umap writes the
                   last page at exit
     fork          a fork child exits (0) first: it has none of its
                   parent's regions and writes nothing back; then the
                   parent exits
     uunmap0       uunmap(p, 0): the whole region, written back (checked
                   here, before exit)
     uunmap-long   uunmap(p, length + 12345): the same
     uunmap-holes  a page unmapped with uunmap(p + 4096, 4096) (written
                   back then), then uunmap(p, 0) for the rest
     killed        umio_map with survive_process_death, then the process
                   SIGKILLs itself: its keeper writes the file
   The cache is larger than the file (UMAP_BUFSIZE), so that no eviction
   writes anything back before the end. */
#include <sys/prctl.h>
#include <pthread.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <umap/umap.h>
#include <umio.h>

#include "check.h"

#define LEN (1 << 20)
#define PAGE 4096

static char *base;
static atomic_int other_wrote;

static unsigned char byte_at(size_t off) { return (unsigned char)(pattern(off) ^ 0x5a); }

static void write_range(size_t from, size_t to) {
  for (size_t i = from; i < to; i++) base[i] = (char)byte_at(i);
}

static void *other_half(void *arg) {
  (void)arg;
  write_range(LEN / 2, LEN);
  atomic_store(&other_wrote, 1);
  /* Still running, and touching the region, while main exits. */
  unsigned long sum = 0;
  for (;;)
    for (size_t i = LEN / 2; i < LEN; i += PAGE) sum += (unsigned char)base[i];
  return (void *)sum;
}

static void last_page_at_exit(void) { write_range(LEN - PAGE, LEN); }

/* The file holds what write_range wrote (checked before the process ends). */
static void check_file(int fd) {
  static unsigned char buf[LEN];
  pread_all(fd, buf, LEN, 0);
  for (size_t i = 0; i < LEN; i++) CHECK(buf[i] == byte_at(i));
}

int main(int argc, char **argv) {
  CHECK(argc == 3);
  const char *mode = argv[2];
  int fd = open(argv[1], O_RDWR);
  CHECK(fd >= 0);
  if (strcmp(mode, "named") == 0)
    CHECK(prctl(PR_SET_NAME, "umio-app", 0, 0, 0) == 0);
  if (strcmp(mode, "umio-exit") == 0) {
    base = umio_map(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0, NULL);
    CHECK(base != UMIO_FAILED);
  } else if (strcmp(mode, "killed") == 0) {
    struct umio_map_options o = {.size = sizeof o, .survive_process_death = 1};
    base = umio_map(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0, &o);
    CHECK(base != UMIO_FAILED);
  } else {
    base = umap(NULL, LEN, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fd, 0);
    CHECK(base != UMAP_FAILED);
  }
  printf("exit_writeback: %s\n", mode);
  fflush(stdout);

  if (strcmp(mode, "exit") == 0 || strcmp(mode, "umio-exit") == 0 ||
      strcmp(mode, "named") == 0) {
    write_range(0, LEN);
    exit(0);
  }
  if (strcmp(mode, "killed") == 0) {
    write_range(0, LEN);
    kill(getpid(), SIGKILL);
    for (;;) pause();
  }
  if (strcmp(mode, "return") == 0) {
    write_range(0, LEN);
    return 0;
  }
  if (strcmp(mode, "thread") == 0) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_half, NULL) == 0);
    write_range(0, LEN / 2);
    while (!atomic_load(&other_wrote)) usleep(1000);
    exit(0);
  }
  if (strcmp(mode, "fork") == 0) {
    write_range(0, LEN);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) exit(0);
    int status;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    exit(0);
  }
  if (strcmp(mode, "atexit") == 0) {
    CHECK(atexit(last_page_at_exit) == 0);
    write_range(0, LEN - PAGE);
    return 0;
  }
  if (strcmp(mode, "uunmap0") == 0) {
    write_range(0, LEN);
    CHECK(uunmap(base, 0) == 0);
  } else if (strcmp(mode, "uunmap-long") == 0) {
    write_range(0, LEN);
    CHECK(uunmap(base, LEN + 12345) == 0);
  } else if (strcmp(mode, "uunmap-holes") == 0) {
    write_range(0, LEN);
    CHECK(uunmap(base + PAGE, PAGE) == 0);
    CHECK(uunmap(base, 0) == 0);
  } else {
    CHECK(!"a known mode");
  }
  /* Unmapped: nothing of the region is umio's any more. */
  errno = 0;
  CHECK(uunmap(base, 0) == -1 && errno == EINVAL);
  check_file(fd);
  close(fd);
  return 0;
}
