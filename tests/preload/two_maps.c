/* Two MAP_SHARED mappings of one file in one process are one, as with the
 * kernel's page cache: each sees the other's writes at once, and the file
 * keeps both after both are unmapped. A thread writing through the first
 * mapping while the second is made loses nothing.
 *
 * usage: two_maps FILE MIB */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>

static size_t len;

static unsigned char *map_rw(int fd) {
    unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    return p;
}

/* Bytes 100-103 through one mapping, bytes 0-3 of the same page through
 * the other: each sees the other's at once; the file keeps both. */
static void each_sees_the_other(const char *path) {
    make_file(path, len, 1);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    unsigned char *a = map_rw(fd);
    CHECK(served_by_umio(a) == expect_umio());
    CHECK(mismatch(a, 0, len, 1) == -1); /* every page resident (or evicted) */
    size_t mid = len / 2 + 4096;          /* a page in the middle too */
    const unsigned char wa[4] = {0xa1, 0xa2, 0xa3, 0xa4}, wb[4] = {0xb1, 0xb2, 0xb3, 0xb4};
    memcpy(a + 100, wa, 4);
    memcpy(a + mid + 100, wa, 4);
    unsigned char *b = map_rw(fd);
    CHECK(memcmp(b + 100, wa, 4) == 0);
    CHECK(memcmp(b + mid + 100, wa, 4) == 0);
    memcpy(b, wb, 4);
    memcpy(b + mid, wb, 4);
    CHECK(memcmp(a, wb, 4) == 0);
    CHECK(memcmp(a + mid, wb, 4) == 0);
    /* Writes after both are mapped, both ways. */
    a[8192 + 7] = 0x5a;
    CHECK(b[8192 + 7] == 0x5a);
    b[len - 1] = 0xa5;
    CHECK(a[len - 1] == 0xa5);
    CHECK(munmap(a, len) == 0);
    CHECK(b[100] == 0xa1);
    CHECK(munmap(b, len) == 0);
    CHECK(close(fd) == 0);
    fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    unsigned char got[104];
    CHECK(pread(fd, got, sizeof got, 0) == (ssize_t)sizeof got);
    CHECK(memcmp(got, wb, 4) == 0 && memcmp(got + 100, wa, 4) == 0);
    CHECK(pread(fd, got, sizeof got, (off_t)mid) == (ssize_t)sizeof got);
    CHECK(memcmp(got, wb, 4) == 0 && memcmp(got + 100, wa, 4) == 0);
    CHECK(pread(fd, got, 1, 8192 + 7) == 1 && got[0] == 0x5a);
    CHECK(pread(fd, got, 1, (off_t)len - 1) == 1 && got[0] == 0xa5);
    /* Everything else as it was. */
    uint64_t w;
    CHECK(pread(fd, &w, 8, 4096) == 8 && w == word(1, 4096));
    CHECK(close(fd) == 0);
}

static uint64_t *writing;
static atomic_size_t written;

/* Writes pattern 7 over the whole mapping, word by word, counting. */
static void *writer(void *arg) {
    (void)arg;
    for (size_t i = 0; i < len / 8; i++) {
        writing[i] = word(7, i * 8);
        atomic_store_explicit(&written, i + 1, memory_order_release);
    }
    return NULL;
}

static void a_writer_meanwhile_loses_nothing(const char *path) {
    make_file(path, len, 1);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    unsigned char *a = map_rw(fd);
    CHECK(served_by_umio(a) == expect_umio());
    writing = (uint64_t *)a;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, writer, NULL) == 0);
    while (atomic_load(&written) < len / 8 / 4)
        sched_yield();
    unsigned char *b = map_rw(fd); /* while the writer writes */
    size_t seen = atomic_load(&written);
    CHECK(mismatch(b, 0, seen * 8, 7) == -1);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(mismatch(b, 0, len, 7) == -1);
    CHECK(mismatch(a, 0, len, 7) == -1);
    CHECK(munmap(b, len) == 0);
    CHECK(munmap(a, len) == 0);
    CHECK(close(fd) == 0);
    CHECK(file_holds(path, 0, len, 7));
}

/* The second mapping at an offset (not a multiple of the umio page): the
 * same bytes at their offsets in both. */
static void at_an_offset(const char *path) {
    make_file(path, len, 1);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    unsigned char *a = map_rw(fd);
    CHECK(served_by_umio(a) == expect_umio());
    fill(a, 0, len, 3);
    size_t off = 8192;
    const unsigned char *b = mmap(NULL, len - off, PROT_READ, MAP_SHARED, fd, (off_t)off);
    CHECK(b != MAP_FAILED);
    CHECK(mismatch(b - off, off, len, 3) == -1);
    a[off + 5] = 0x77;
    CHECK(b[5] == 0x77);
    CHECK(munmap((void *)b, len - off) == 0);
    CHECK(munmap(a, len) == 0);
    CHECK(close(fd) == 0);
    fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    unsigned char got;
    CHECK(pread(fd, &got, 1, (off_t)off + 5) == 1 && got == 0x77);
    CHECK(close(fd) == 0);
    CHECK(file_holds(path, 0, off, 3));
    CHECK(file_holds(path, off + 8, len, 3));
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    len = (size_t)atoi(argv[2]) << 20;
    char path[4096];
    snprintf(path, sizeof path, "%s.1", argv[1]);
    each_sees_the_other(path);
    snprintf(path, sizeof path, "%s.2", argv[1]);
    a_writer_meanwhile_loses_nothing(path);
    snprintf(path, sizeof path, "%s.3", argv[1]);
    at_an_offset(path);
    printf("two_maps ok\n");
    return 0;
}
