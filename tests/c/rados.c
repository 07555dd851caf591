/* The RADOS backend from C: umio_map with backend "rados:..." creates an
   object set (create=1) of 64 KiB objects on the cluster whose ceph.conf
   UMIO_RADOS_CONF names, writes a pattern over all of it, flushes and
   unmaps; a second, read-only mapping of the set reads the pattern back.
   A missing set without create=1 is ENOENT, bad settings and a descriptor
   with "rados:" are EINVAL. Run by crates/ffi/tests/rados.rs, which starts
   the cluster (libumio built with the rados feature). */
#include <sys/mman.h>

#include <umio.h>

#include "check.h"

#define LEN ((size_t)(1 << 20) + 1000) /* 17 objects, the last partial */

int main(void) {
  const char *conf = getenv("UMIO_RADOS_CONF");
  const char *prefix = getenv("UMIO_RADOS_PREFIX");
  CHECK(conf != NULL && prefix != NULL);
  char spec[8192];
  struct umio_map_options o = {.size = sizeof o};
  o.backend = spec;

  snprintf(spec, sizeof spec,
           "rados:pool=umio,prefix=%s,conf=%s,object_size=65536,create=1", prefix,
           conf);
  unsigned char *p = umio_map(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, -1, 0, &o);
  CHECK(p != MAP_FAILED);
  for (size_t i = 0; i < LEN; i += 4093) CHECK(p[i] == 0); /* a new set is zeros */
  for (size_t i = 0; i < LEN; i++) p[i] = pattern(i);
  CHECK(umio_flush(p, 0) == 0);
  CHECK(umio_unmap(p, LEN) == 0);

  /* The same set again, read-only, without create: the bytes written. */
  snprintf(spec, sizeof spec, "rados:pool=umio,prefix=%s,conf=%s", prefix, conf);
  p = umio_map(NULL, LEN, PROT_READ, MAP_SHARED, -1, 0, &o);
  CHECK(p != MAP_FAILED);
  for (size_t i = 0; i < LEN; i++) CHECK(p[i] == pattern(i));
  CHECK(umio_unmap(p, LEN) == 0);

  /* A descriptor with "rados:": EINVAL. */
  errno = 0;
  CHECK(umio_map(NULL, 4096, PROT_READ, MAP_SHARED, 0, 0, &o) == MAP_FAILED && errno == EINVAL);

  /* No such set and no create=1: librados's ENOENT. */
  snprintf(spec, sizeof spec, "rados:pool=umio,prefix=%s-absent,conf=%s", prefix, conf);
  errno = 0;
  CHECK(umio_map(NULL, 4096, PROT_READ, MAP_SHARED, -1, 0, &o) == MAP_FAILED && errno == ENOENT);

  /* Settings without a prefix, or with an unknown key: EINVAL. */
  const char *bad[] = {"rados:pool=umio", "rados:pool=umio,prefix=x,size=1"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    o.backend = bad[i];
    errno = 0;
    CHECK(umio_map(NULL, 4096, PROT_READ, MAP_SHARED, -1, 0, &o) == MAP_FAILED &&
          errno == EINVAL);
  }

  printf("rados: wrote and read back %zu bytes over %zu objects\n", LEN,
         (LEN + 65535) / 65536);
  return 0;
}
