/* umio_runtime_stats: the runtime's counters across mappings, faults by
   kind, evictions, write-back, the cache's bound and what is resident.
   With UMAP_MONITOR_FREQ set the program stays up a little longer, for
   the monitor thread to print (c_programs.rs checks its lines). */
#include <umio.h>

#include "check.h"

#define PAGE 4096
#define CACHE_PAGES 64

int main(void) {
  CHECK(umio_config_set_page_size(PAGE) == 0);
  CHECK(umio_config_set_cache_bytes(CACHE_PAGES * PAGE) == 0);
  CHECK(umio_config_set_read_ahead(0) == 0);

  /* Before the first mapping: nothing counted, the bound to come. */
  struct umio_runtime_stats rs = {.size = sizeof rs};
  CHECK(umio_runtime_stats(&rs) == 0);
  CHECK(rs.size == sizeof rs && rs.faults == 0 && rs.regions == 0);
  CHECK(rs.cache_bytes == CACHE_PAGES * PAGE);
  struct umio_runtime_stats unset = {0};
  CHECK(umio_runtime_stats(&unset) == -1 && errno == EINVAL);

  /* Two mappings, each four times the cache. */
  char path_a[4096], path_b[4096];
  const size_t len = 4 * CACHE_PAGES * PAGE;
  int fa = make_file(path_a, len, O_RDWR), fb = make_file(path_b, len, O_RDWR);
  unsigned char *a = umio_map(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fa, 0, NULL);
  unsigned char *b = umio_map(NULL, len, PROT_READ, MAP_SHARED, fb, 0, NULL);
  CHECK(a != UMIO_FAILED && b != UMIO_FAILED);
  for (size_t off = 0; off < len; off += PAGE) {
    CHECK(a[off] == pattern(off));
    CHECK(b[off] == pattern(off));
  }
  /* Writes to the last pages read: first writes to clean resident pages,
     or write misses where background eviction took a page meanwhile. */
  for (size_t i = 1; i <= 8; i++) a[len - i * PAGE] ^= 0x5a;
  CHECK(umio_flush(a, len) == 0);

  CHECK(umio_runtime_stats(&rs) == 0);
  const uint64_t pages = 2 * len / PAGE;
  CHECK(rs.regions == 2);
  CHECK(rs.faults >= pages + 8);
  CHECK(rs.read_misses >= pages);
  CHECK(rs.first_writes + rs.write_misses == 8 && rs.first_writes > 0);
  CHECK(rs.store_reads >= pages && rs.bytes_read >= pages * PAGE);
  CHECK(rs.evictions >= pages - CACHE_PAGES);
  CHECK(rs.writebacks >= 1 && rs.bytes_written >= 8 * PAGE && rs.writeback_errors == 0);
  CHECK(rs.read_errors == 0 && rs.no_progress_faults == 0);
  CHECK(rs.cache_bytes == CACHE_PAGES * PAGE);
  CHECK(rs.resident_bytes > 0 && rs.resident_bytes <= rs.cache_bytes);

  /* The fault-latency histogram counts every fault once (a filler records
     a fault after waking its thread: wait for the last one); its sum lies
     within its buckets' bounds. */
  uint64_t counted = 0, lo = 0, hi = 0;
  for (int tries = 0; tries < HANG_MS; tries++) {
    CHECK(umio_runtime_stats(&rs) == 0);
    counted = lo = hi = 0;
    for (int i = 0; i < UMIO_LATENCY_BUCKETS; i++) {
      counted += rs.fault_latency[i];
      lo += rs.fault_latency[i] * (i == 0 ? 0 : 1ull << i);
      hi += rs.fault_latency[i] * (1ull << (i + 1));
    }
    if (counted == rs.faults) break;
    usleep(1000);
  }
  CHECK(counted == rs.faults);
  CHECK(rs.fault_latency_sum_ns >= lo && rs.fault_latency_sum_ns < hi);
  CHECK(rs.fault_latency[0] < rs.faults); /* a fault takes more than 2 ns */

  /* The per-mapping counters add up to the runtime's. An eviction round
     kicked by the last fills may still be counting (the runtime's counter,
     then the mapping's) between the snapshots: take all three again until
     they agree (a minute at most). */
  struct umio_stats sa = {.size = sizeof sa}, sb = {.size = sizeof sb};
  for (int tries = 0; tries < HANG_MS; tries++) {
    CHECK(umio_runtime_stats(&rs) == 0);
    CHECK(umio_stats(a, &sa) == 0 && umio_stats(b, &sb) == 0);
    if (sa.evictions + sb.evictions == rs.evictions) break;
    usleep(1000);
  }
  CHECK(sa.evictions + sb.evictions == rs.evictions);
  CHECK(sa.bytes_read + sb.bytes_read == rs.bytes_read);

  /* A hint's reads go to the store in batches: counted per mapping and
     for the runtime, with the most in flight at once and the mean. */
  char path_c[4096];
  const size_t hinted = 16 * PAGE;
  int fc = make_file(path_c, hinted, O_RDONLY);
  unsigned char *c = umio_map(NULL, hinted, PROT_READ, MAP_SHARED, fc, 0, NULL);
  CHECK(c != UMIO_FAILED);
  struct umio_stats sc = {.size = sizeof sc};
  CHECK(umio_stats(c, &sc) == 0 && sc.size == sizeof sc);
  CHECK(sc.read_submissions == 0 && sc.reads_submitted == 0 && sc.max_reads_in_flight == 0);
  CHECK(sc.mean_reads_in_flight == 0.0);
  CHECK(umio_prefetch(c, hinted) == 0);
  for (int tries = 0; tries < HANG_MS; tries++) {
    CHECK(umio_stats(c, &sc) == 0);
    if (sc.prefetched == hinted / PAGE) break;
    usleep(1000);
  }
  CHECK(sc.prefetched == hinted / PAGE);
  CHECK(sc.read_submissions >= 1 && sc.reads_submitted >= sc.read_submissions);
  CHECK(sc.max_reads_in_flight >= 1 && sc.max_reads_in_flight <= sc.reads_submitted);
  CHECK(sc.mean_reads_in_flight == (double)sc.reads_submitted / (double)sc.read_submissions);
  for (size_t off = 0; off < hinted; off += PAGE) CHECK(c[off] == pattern(off));
  CHECK(umio_runtime_stats(&rs) == 0);
  CHECK(rs.read_submissions >= sc.read_submissions && rs.reads_submitted >= sc.reads_submitted);
  CHECK(rs.max_reads_in_flight >= sc.max_reads_in_flight);
  CHECK(rs.mean_reads_in_flight == (double)rs.reads_submitted / (double)rs.read_submissions);
  CHECK(umio_unmap(c, hinted) == 0);
  close(fc);
  unlink(path_c);

  if (getenv("UMAP_MONITOR_FREQ")) sleep(3);
  CHECK(umio_unmap(a, len) == 0 && umio_unmap(b, len) == 0);
  CHECK(umio_runtime_stats(&rs) == 0 && rs.regions == 0);
  close(fa);
  close(fb);
  unlink(path_a);
  unlink(path_b);
  printf("runtime_stats: ok\n");
  return 0;
}
