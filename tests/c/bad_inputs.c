/* A table of bad inputs, each failing with its documented errno and
   without printing anything (the test runner checks stderr is empty). */
#include <signal.h>
#include <sys/mman.h>

#include <umap/umap.h>
#include <umio.h>

#include "check.h"

#define PAGE (64u << 10)
#define LEN (4 * PAGE)

static int fd_rw, fd_ro, fd_wo, fd_dir;
static char *region; /* a live read-write region of LEN bytes */

/* Each case returns 0 on success, -1 on failure with errno. */
static int map_rc(void *p) { return p == UMAP_FAILED ? -1 : (uunmap(p, 1), 0); }

static int len_zero(void) { return map_rc(umap(NULL, 0, PROT_READ, UMAP_PRIVATE, fd_rw, 0)); }
static int fd_negative(void) { return map_rc(umap(NULL, LEN, PROT_READ, UMAP_PRIVATE, -1, 0)); }
static int fd_closed(void) { return map_rc(umap(NULL, LEN, PROT_READ, UMAP_PRIVATE, 1000, 0)); }
static int offset_unaligned(void) { return map_rc(umap(NULL, LEN, PROT_READ, UMAP_PRIVATE, fd_rw, 100)); }
static int offset_negative(void) { return map_rc(umap(NULL, LEN, PROT_READ, UMAP_PRIVATE, fd_rw, -4096)); }
static int prot_none(void) { return map_rc(umap(NULL, LEN, PROT_NONE, UMAP_PRIVATE, fd_rw, 0)); }
static int prot_exec(void) { return map_rc(umap(NULL, LEN, PROT_READ | PROT_EXEC, UMAP_PRIVATE, fd_rw, 0)); }
static int flags_none(void) { return map_rc(umap(NULL, LEN, PROT_READ, 0, fd_rw, 0)); }
static int flags_both(void) { return map_rc(umap(NULL, LEN, PROT_READ, MAP_PRIVATE | MAP_SHARED, fd_rw, 0)); }
static int flags_unknown(void) { return map_rc(umap(NULL, LEN, PROT_READ, UMAP_PRIVATE | MAP_GROWSDOWN, fd_rw, 0)); }
static int write_on_read_only_fd(void) {
  return map_rc(umap(NULL, LEN, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fd_ro, 0));
}
static int write_only_fd(void) { return map_rc(umap(NULL, LEN, PROT_READ, UMAP_PRIVATE, fd_wo, 0)); }
static int directory_fd(void) { return map_rc(umap(NULL, LEN, PROT_READ, UMAP_PRIVATE, fd_dir, 0)); }
static int fixed_null(void) { return map_rc(umap(NULL, LEN, PROT_READ, UMAP_PRIVATE | UMAP_FIXED, fd_rw, 0)); }
static int fixed_unaligned(void) {
  return map_rc(umap(region + 100, LEN, PROT_READ, UMAP_PRIVATE | UMAP_FIXED, fd_rw, 0));
}
static int fixed_noreplace_over_a_region(void) {
  return map_rc(umap(region + PAGE, LEN, PROT_READ, UMAP_PRIVATE | MAP_FIXED_NOREPLACE, fd_rw, 0));
}
static int fixed_splitting_a_page_of_a_region(void) {
  /* UMAP_FIXED replaces umio mappings, but not half of one of their pages. */
  return map_rc(umap(region + 4096, PAGE, PROT_READ, UMAP_PRIVATE | UMAP_FIXED, fd_rw, 0));
}
static int length_overflows(void) {
  return map_rc(umap(NULL, SIZE_MAX - 4095, PROT_READ, UMAP_PRIVATE, fd_rw, 4096));
}
static int length_huge(void) { return map_rc(umap(NULL, SIZE_MAX, PROT_READ, UMAP_PRIVATE, fd_rw, 0)); }
static int length_over_half_the_address_space(void) {
  return map_rc(umap(NULL, (size_t)1 << 62, PROT_READ, UMAP_PRIVATE, fd_rw, 0));
}
static int offset_past_end_len_zero(void) {
  return map_rc(umio_map(NULL, 0, PROT_READ, MAP_SHARED, fd_rw, 64 * PAGE, NULL));
}
static int fixed_noreplace_straddling_a_region(void) {
  /* Starts a page before the region and runs into it. */
  return map_rc(umap(region - PAGE, 2 * PAGE, PROT_READ, UMAP_PRIVATE | MAP_FIXED_NOREPLACE, fd_rw, 0));
}
static int umio_map_flags_unknown(void) {
  return map_rc(umio_map(NULL, LEN, PROT_READ, MAP_SHARED | MAP_ANONYMOUS, fd_rw, 0, NULL));
}
static int uunmap_foreign_mmap(void) {
  /* Memory the process mapped itself: refused, and left mapped. */
  char *p = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED);
  p[0] = 'z';
  int rc = uunmap(p, 2 * PAGE);
  int e = errno;
  CHECK(p[0] == 'z');
  CHECK(munmap(p, 2 * PAGE) == 0);
  errno = e;
  return rc;
}
static int uunmap_straddling(void) {
  /* From inside the region to past its end, in one call. */
  return uunmap(region + 3 * PAGE, 2 * PAGE);
}
static int umio_unmap_partial_twice(void) {
  char *p = umap(NULL, 2 * PAGE, PROT_READ, UMAP_PRIVATE, fd_rw, 0);
  CHECK(p != UMAP_FAILED);
  CHECK(umio_unmap(p, PAGE) == 0);
  int rc = umio_unmap(p, PAGE);
  int e = errno;
  CHECK(umio_unmap(p + PAGE, PAGE) == 0);
  errno = e;
  return rc;
}
static int pin_after_partial_unmap(void) {
  char *p = umap(NULL, 2 * PAGE, PROT_READ, UMAP_PRIVATE, fd_rw, 0);
  CHECK(p != UMAP_FAILED);
  CHECK(uunmap(p + PAGE, PAGE) == 0);
  int rc = umio_pin(p, 2 * PAGE);
  int e = errno;
  CHECK(uunmap(p, PAGE) == 0);
  errno = e;
  return rc;
}
static int setter_page_size_after_first_map(void) { return umio_config_set_page_size(PAGE); }
static int setter_uffd_mode_after_first_map(void) { return umio_config_set_uffd_mode("full"); }
static int uunmap_null(void) { return uunmap(NULL, LEN); }
static int uunmap_never_mapped(void) {
  static char stack_page[8192];
  return uunmap(stack_page, 4096);
}
/* Length 0 from a region's start unmaps all of it, as UMap's uunmap does;
   from inside it, it names no range. */
static int uunmap_len_zero(void) { return uunmap(region + PAGE, 0); }
static int uunmap_unaligned(void) { return uunmap(region + 100, PAGE); }
static int uunmap_past_end(void) { return uunmap(region + 2 * PAGE, 3 * PAGE); }
static int uunmap_twice(void) {
  char *p = umap(NULL, PAGE, PROT_READ, UMAP_PRIVATE, fd_rw, 0);
  CHECK(p != UMAP_FAILED);
  CHECK(uunmap(p, PAGE) == 0);
  return uunmap(p, PAGE);
}
static int flush_unmapped(void) {
  int x = 0;
  return umio_flush(&x, sizeof x);
}
static int flush_past_end(void) { return umio_flush(region + PAGE, 4 * PAGE); }
static int advise_unknown(void) { return umio_advise(region, PAGE, 99); }
static int advise_dontneed_unaligned(void) { return umio_advise(region + 1, PAGE, UMIO_ADVICE_DONTNEED); }
static int stats_null(void) { return umio_stats(region, NULL); }
static int stats_misaligned(void) {
  uint64_t buf[16];
  return umio_stats(region, (struct umio_stats *)((char *)buf + 1));
}
static int stats_size_unset(void) {
  struct umio_stats st = {0};
  return umio_stats(region, &st);
}
static int config_get_null(void) { return umio_config_get(NULL); }
static int prefetch_negative(void) {
  struct umap_prefetch_item it = {region};
  errno = 0;
  umap_prefetch(-1, &it);
  return errno ? -1 : 0;
}
static int prefetch_null_array(void) {
  errno = 0;
  umap_prefetch(2, NULL);
  return errno ? -1 : 0;
}
static int prefetch_unmapped(void) {
  int x;
  struct umap_prefetch_item it[2] = {{region}, {&x}};
  errno = 0;
  umap_prefetch(2, it);
  return errno ? -1 : 0;
}
static int pin_unmapped(void) {
  char x[8];
  errno = 0;
  umap_fetch_and_pin(x, sizeof x);
  return errno ? -1 : 0;
}
static int pin_more_than_half_the_cache(void) {
  /* The cache is 16 pages (main sets it): 9 pages are too many. */
  char *p = umap(NULL, 12 * PAGE, PROT_READ, UMAP_PRIVATE, fd_rw, 0);
  CHECK(p != UMAP_FAILED);
  errno = 0;
  umap_fetch_and_pin(p, 9 * PAGE);
  int e = errno;
  CHECK(uunmap(p, 12 * PAGE) == 0);
  errno = e;
  return errno ? -1 : 0;
}
static int setter_after_first_map(void) { return umio_config_set_fillers(2); }
static int setter_eviction_after_first_map(void) { return umio_config_set_eviction("fifo"); }
static int map_options_bad_page_size(void) {
  struct umio_map_options o = {.size = sizeof o};
  o.page_size = 1000;
  return map_rc(umio_map(NULL, LEN, PROT_READ, MAP_SHARED, fd_rw, 0, &o));
}
static int map_options_unknown_prefetch(void) {
  struct umio_map_options o = {.size = sizeof o};
  o.prefetch = "psychic";
  return map_rc(umio_map(NULL, LEN, PROT_READ, MAP_SHARED, fd_rw, 0, &o));
}
static int map_options_other_eviction(void) {
  struct umio_map_options o = {.size = sizeof o};
  o.eviction = "fifo"; /* the runtime runs clock */
  return map_rc(umio_map(NULL, LEN, PROT_READ, MAP_SHARED, fd_rw, 0, &o));
}
static int map_options_size_unset(void) {
  struct umio_map_options o = {0};
  return map_rc(umio_map(NULL, LEN, PROT_READ, MAP_SHARED, fd_rw, 0, &o));
}
/* A newer program's options: a field this library does not know, set. */
static int map_options_unknown_field_set(void) {
  struct {
    struct umio_map_options known;
    uint64_t newer_field;
  } o = {{.size = sizeof o}, 1};
  return map_rc(umio_map(NULL, LEN, PROT_READ, MAP_SHARED, fd_rw, 0, &o.known));
}
static int64_t no_size(void *u) {
  (void)u;
  return 0;
}
static int store_without_read(void) {
  struct umio_store_ops ops = {0};
  ops.size = no_size;
  struct umio_map_options o = {.size = sizeof o};
  o.store = &ops;
  return map_rc(umio_map(NULL, LEN, PROT_READ, MAP_SHARED, -1, 0, &o));
}
static int store_with_fd(void) {
  struct umio_store_ops ops = {0};
  ops.size = no_size;
  struct umio_map_options o = {.size = sizeof o};
  o.store = &ops;
  return map_rc(umio_map(NULL, LEN, PROT_READ, MAP_SHARED, fd_rw, 0, &o));
}

static const struct {
  const char *name;
  int (*run)(void);
  int errno_wanted;
} cases[] = {
    {"umap: length 0", len_zero, EINVAL},
    {"umap: fd -1", fd_negative, EBADF},
    {"umap: fd not open", fd_closed, EBADF},
    {"umap: offset not a multiple of 4096", offset_unaligned, EINVAL},
    {"umap: negative offset", offset_negative, EINVAL},
    {"umap: PROT_NONE", prot_none, EINVAL},
    {"umap: PROT_EXEC", prot_exec, EINVAL},
    {"umap: neither private nor shared", flags_none, EINVAL},
    {"umap: both private and shared", flags_both, EINVAL},
    {"umap: unsupported flag", flags_unknown, EINVAL},
    {"umap: PROT_WRITE on an O_RDONLY fd", write_on_read_only_fd, EACCES},
    {"umap: O_WRONLY fd", write_only_fd, EACCES},
    {"umap: a directory", directory_fd, ENODEV},
    {"umap: UMAP_FIXED at NULL", fixed_null, EINVAL},
    {"umap: UMAP_FIXED unaligned", fixed_unaligned, EINVAL},
    {"umap: MAP_FIXED_NOREPLACE over a region", fixed_noreplace_over_a_region, EEXIST},
    {"umap: UMAP_FIXED splitting a page of a region", fixed_splitting_a_page_of_a_region, EINVAL},
    {"umap: offset + length overflows", length_overflows, EINVAL},
    {"umap: length SIZE_MAX", length_huge, EINVAL},
    {"umap: length 2^62 (half the address space)", length_over_half_the_address_space, EINVAL},
    {"umio_map: length 0, offset past the end", offset_past_end_len_zero, EINVAL},
    {"umap: MAP_FIXED_NOREPLACE straddling a region", fixed_noreplace_straddling_a_region, EEXIST},
    {"umio_map: MAP_ANONYMOUS with a descriptor", umio_map_flags_unknown, EINVAL},
    {"uunmap: NULL", uunmap_null, EINVAL},
    {"uunmap: never mapped", uunmap_never_mapped, EINVAL},
    {"uunmap: length 0 inside a region", uunmap_len_zero, EINVAL},
    {"uunmap: not on a page boundary", uunmap_unaligned, EINVAL},
    {"uunmap: past the end of the region", uunmap_past_end, EINVAL},
    {"uunmap: a second time", uunmap_twice, EINVAL},
    {"uunmap: memory umio did not map", uunmap_foreign_mmap, EINVAL},
    {"uunmap: from inside a region past its end", uunmap_straddling, EINVAL},
    {"umio_unmap: a part unmapped already", umio_unmap_partial_twice, EINVAL},
    {"umio_pin: a range with an unmapped part", pin_after_partial_unmap, EINVAL},
    {"umio_config_set_page_size: after the first map", setter_page_size_after_first_map, EBUSY},
    {"umio_config_set_uffd_mode: after the first map", setter_uffd_mode_after_first_map, EBUSY},
    {"umio_flush: not mapped", flush_unmapped, EINVAL},
    {"umio_flush: past the end", flush_past_end, EINVAL},
    {"umio_advise: unknown advice", advise_unknown, EINVAL},
    {"umio_advise: DONTNEED off a page boundary", advise_dontneed_unaligned, EINVAL},
    {"umio_stats: NULL out", stats_null, EINVAL},
    {"umio_stats: misaligned out", stats_misaligned, EINVAL},
    {"umio_stats: size not set", stats_size_unset, EINVAL},
    {"umio_config_get: NULL out", config_get_null, EINVAL},
    {"umap_prefetch: npages < 0", prefetch_negative, EINVAL},
    {"umap_prefetch: NULL array", prefetch_null_array, EINVAL},
    {"umap_prefetch: an address in no region", prefetch_unmapped, EINVAL},
    {"umap_fetch_and_pin: not mapped", pin_unmapped, EINVAL},
    {"umap_fetch_and_pin: over half the cache", pin_more_than_half_the_cache, ENOMEM},
    {"umio_config_set_fillers: after the first map", setter_after_first_map, EBUSY},
    {"umio_config_set_eviction: after the first map", setter_eviction_after_first_map, EBUSY},
    {"umio_map: page size 1000", map_options_bad_page_size, EINVAL},
    {"umio_map: unknown prefetch policy", map_options_unknown_prefetch, EINVAL},
    {"umio_map: eviction other than the runtime's", map_options_other_eviction, EOPNOTSUPP},
    {"umio_map: store without read", store_without_read, EINVAL},
    {"umio_map: options size not set", map_options_size_unset, EINVAL},
    {"umio_map: a newer program's unknown option set", map_options_unknown_field_set, E2BIG},
    {"umio_map: store and an fd", store_with_fd, EINVAL},
};

/* Cases run before the first map: bad settings are refused. */
static int set_page_size_1000(void) { return umio_config_set_page_size(1000); }
static int set_page_size_0(void) { return umio_config_set_page_size(0); }
static int set_page_size_2g(void) { return umio_config_set_page_size((size_t)2 << 30); }
static int set_cache_bytes_0(void) { return umio_config_set_cache_bytes(0); }
static int set_huge_cache_bytes_4m(void) { return umio_config_set_huge_cache_bytes(4 << 20); }
static int set_fillers_0(void) { return umio_config_set_fillers(0); }
static int set_fillers_257(void) { return umio_config_set_fillers(257); }
static int set_evictors_65(void) { return umio_config_set_evictors(65); }
static int set_watermarks_inverted(void) { return umio_config_set_watermarks(50, 60); }
static int set_eviction_unknown(void) { return umio_config_set_eviction("lru-ish"); }
static int set_eviction_null(void) { return umio_config_set_eviction(NULL); }
static int set_max_fault_events_0(void) { return umio_config_set_max_fault_events(0); }
static int set_uffd_mode_unknown(void) { return umio_config_set_uffd_mode("sometimes"); }
static int map_with_cache_of_3_pages(void) {
  /* Accepted by the setter, refused when the runtime starts (fewer than 4
     pages of PAGE, set here: the default is smaller); the failed start is
     remembered only until the settings change, as main's setters do. */
  CHECK(umio_config_set_page_size(PAGE) == 0);
  CHECK(umio_config_set_cache_bytes(3 * PAGE) == 0);
  return map_rc(umap(NULL, LEN, PROT_READ, UMAP_PRIVATE, fd_rw, 0));
}

static const struct {
  const char *name;
  int (*run)(void);
  int errno_wanted;
} pre_cases[] = {
    {"umio_config_set_page_size: 1000", set_page_size_1000, EINVAL},
    {"umio_config_set_page_size: 0", set_page_size_0, EINVAL},
    {"umio_config_set_page_size: 2 GiB", set_page_size_2g, EINVAL},
    {"umio_config_set_cache_bytes: 0", set_cache_bytes_0, EINVAL},
    {"umio_config_set_huge_cache_bytes: 4 MiB", set_huge_cache_bytes_4m, EINVAL},
    {"umio_config_set_fillers: 0", set_fillers_0, EINVAL},
    {"umio_config_set_fillers: 257", set_fillers_257, EINVAL},
    {"umio_config_set_evictors: 65", set_evictors_65, EINVAL},
    {"umio_config_set_watermarks: low above high", set_watermarks_inverted, EINVAL},
    {"umio_config_set_eviction: unknown name", set_eviction_unknown, EINVAL},
    {"umio_config_set_eviction: NULL", set_eviction_null, EINVAL},
    {"umio_config_set_max_fault_events: 0", set_max_fault_events_0, EINVAL},
    {"umio_config_set_uffd_mode: unknown mode", set_uffd_mode_unknown, EINVAL},
    {"umap: cache of 3 pages", map_with_cache_of_3_pages, EINVAL},
};

static int run_case(const char *name, int (*run)(void), int errno_wanted) {
  errno = 0;
  int rc = run();
  int e = errno;
  int ok = rc == -1 && e == errno_wanted;
  printf("%-50s %s (errno %d %s, wanted %d)\n", name, ok ? "ok" : "FAILED", e,
         rc == -1 ? strerror(e) : "no error", errno_wanted);
  return !ok;
}

int main(void) {
  char path[4096], ro_path[4096];
  int failed = 0, n_pre = (int)(sizeof pre_cases / sizeof pre_cases[0]);
  fd_rw = make_file(path, 16 * PAGE, O_RDWR);
  for (int i = 0; i < n_pre; i++)
    failed += run_case(pre_cases[i].name, pre_cases[i].run, pre_cases[i].errno_wanted);
  CHECK(umio_config_set_cache_bytes(16 * PAGE) == 0);
  CHECK(umio_config_set_page_size(PAGE) == 0);
  CHECK(umio_config_set_eviction("clock") == 0);

  fd_ro = make_file(ro_path, LEN, O_RDONLY);
  fd_wo = open(ro_path, O_WRONLY);
  CHECK(fd_wo >= 0);
  fd_dir = open("/", O_RDONLY | O_DIRECTORY);
  CHECK(fd_dir >= 0);
  region = umap(NULL, LEN, PROT_READ | PROT_WRITE, UMAP_PRIVATE, fd_rw, 0);
  CHECK(region != UMAP_FAILED);

  int n = (int)(sizeof cases / sizeof cases[0]);
  for (int i = 0; i < n; i++) failed += run_case(cases[i].name, cases[i].run, cases[i].errno_wanted);
  n += n_pre;
  /* The region is still intact after all that. */
  region[0] = 'k';
  CHECK(uunmap(region, LEN) == 0);
  char c;
  pread_all(fd_rw, &c, 1, 0);
  CHECK(c == 'k');
  printf("bad_inputs: %d cases, %d failed\n", n, failed);
  unlink(path);
  unlink(ro_path);
  return failed != 0;
}
