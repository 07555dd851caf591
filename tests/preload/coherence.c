/* Coherence of file mappings with the system calls that write and read the
 * same file, as Linux's page cache gives it: every write(2)-family call,
 * copy_file_range, sendfile, ftruncate and fallocate shows in the mappings
 * at once, and every read(2)-family call sees what was written through a
 * shared mapping, through any descriptor of the file.
 *
 * usage: coherence FILE MIB */
#include "check.h"

#include <sys/sendfile.h>
#include <sys/uio.h>

static size_t len;

/* Writes pattern `seed` for [off, off + n) of the file to `buf`. */
static void pattern(void *buf, size_t off, size_t n, uint64_t seed) {
    uint64_t *w = buf;
    for (size_t i = 0; i < n / 8; i++)
        w[i] = word(seed, off + i * 8);
}

/* Whether [from, to) of mapping `p` holds pattern `seed` (p maps from 0). */
static void expect(const char *what, const void *p, size_t from, size_t to, uint64_t seed) {
    long at = mismatch(p, from, to, seed);
    if (at >= 0) {
        fprintf(stderr, "%s: the mapping differs at byte %ld\n", what, at * 8);
        exit(1);
    }
}

static void expect_zero(const char *what, const unsigned char *p, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        if (p[i] != 0) {
            fprintf(stderr, "%s: byte %zu is %u, not 0\n", what, i, p[i]);
            exit(1);
        }
}

static void *map(int fd, int prot, int flags) {
    void *p = mmap(NULL, len, prot, flags, fd, 0);
    CHECK(p != MAP_FAILED);
    CHECK(served_by_umio(p) == expect_umio());
    return p;
}

/* A read-only shared mapping over a read-write descriptor (LMDB's default
 * mode): every kind of write through any descriptor shows at once. */
static void writes_show_in_mappings(const char *path) {
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    int fd2 = open(path, O_RDWR); /* the same file, opened again */
    CHECK(fd2 >= 0);
    int dupfd = dup(fd);
    CHECK(dupfd >= 0);
    const unsigned char *p = map(fd, PROT_READ, MAP_SHARED);
    const unsigned char *q = map(fd2, PROT_READ, MAP_PRIVATE);
    /* Resident before the writes: every page read once. */
    expect("initial", p, 0, len, 1);
    expect("initial (private)", q, 0, len, 1);
    uint64_t *buf = malloc(1 << 20);
    CHECK(buf != NULL);

    /* pwrite of part of a page, through each descriptor. */
    size_t at = 3 * 4096 + 512;
    expect("resident before the pwrite", p, at, at + 1024, 1);
    pattern(buf, at, 1024, 2);
    CHECK(pwrite(fd, buf, 1024, (off_t)at) == 1024);
    expect("pwrite", p, at, at + 1024, 2);
    expect("pwrite: the rest of its page", p, at + 1024, 16 * 4096, 1);
    expect("pwrite (private, never written)", q, at, at + 1024, 2);
    at = len / 2;
    expect("resident before the pwrite", p, at, at + 8192, 1);
    pattern(buf, at, 8192, 3);
    CHECK(pwrite(dupfd, buf, 8192, (off_t)at) == 8192);
    expect("pwrite through a dup", p, at, at + 8192, 3);
    at = len / 4 + 4096;
    expect("resident before the pwrite", p, at, at + 4096, 1);
    pattern(buf, at, 4096, 4);
    CHECK(pwrite(fd2, buf, 4096, (off_t)at) == 4096);
    expect("pwrite through a second open", p, at, at + 4096, 4);

    /* write at the position, writev, pwritev, pwritev2 at the position. */
    at = 5 * 65536 + 8;
    CHECK(lseek(fd, (off_t)at, SEEK_SET) == (off_t)at);
    pattern(buf, at, 256, 5);
    CHECK(write(fd, buf, 256) == 256);
    expect("write", p, at, at + 256, 5);
    pattern(buf, at + 256, 8192, 6);
    struct iovec iov[2] = {{buf, 4096}, {(char *)buf + 4096, 4096}};
    CHECK(writev(fd, iov, 2) == 8192);
    expect("writev", p, at + 256, at + 256 + 8192, 6);
    at = 9 * 65536 - 4096; /* across a 64 KiB boundary */
    pattern(buf, at, 8192, 7);
    CHECK(pwritev(fd2, iov, 2, (off_t)at) == 8192);
    expect("pwritev", p, at, at + 8192, 7);
    at = 12 * 65536;
    CHECK(lseek(fd2, (off_t)at, SEEK_SET) == (off_t)at);
    pattern(buf, at, 8192, 8);
    CHECK(pwritev2(fd2, iov, 2, -1, 0) == 8192);
    expect("pwritev2 at the position", p, at, at + 8192, 8);

    /* copy_file_range and sendfile into the file, from another file. */
    char other[4096];
    snprintf(other, sizeof other, "%s.src", path);
    make_file(other, len, 9);
    int src = open(other, O_RDONLY);
    CHECK(src >= 0);
    at = 20 * 65536;
    off_t in_off = (off_t)at, out_off = (off_t)at;
    CHECK(copy_file_range(src, &in_off, fd, &out_off, 65536, 0) == 65536);
    expect("copy_file_range", p, at, at + 65536, 9);
    at = 22 * 65536;
    CHECK(lseek(fd, (off_t)at, SEEK_SET) == (off_t)at);
    in_off = (off_t)at;
    CHECK(sendfile(fd, src, &in_off, 4096) == 4096);
    expect("sendfile", p, at, at + 4096, 9);
    close(src);
    unlink(other);

    /* fallocate: a punched hole reads zeros. */
    at = 30 * 65536 + 4096;
    CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)at, 8192) == 0);
    expect_zero("punched hole", p, at, at + 8192);
    expect("beside the hole", p, at - 4096, at, 1);

    /* ftruncate: the last page's tail past the new end reads zeros; then
     * O_APPEND writes extend the file again and show. */
    size_t end = len - 65536 - 100;
    CHECK(ftruncate(fd, (off_t)end) == 0);
    expect("before the new end", p, end - 4096 - 4, end - 4, 1);
    expect_zero("past the new end", p, end, (end + 4095) / 4096 * 4096);
    int app = open(path, O_WRONLY | O_APPEND);
    CHECK(app >= 0);
    size_t tail = len - end;
    pattern(buf, 0, tail + 8, 10);
    CHECK(write(app, buf, tail) == (ssize_t)tail);
    for (size_t i = 0; i < tail; i++)
        CHECK(p[end + i] == ((unsigned char *)buf)[i]);
    close(app);

    CHECK(munmap((void *)p, len) == 0);
    CHECK(munmap((void *)q, len) == 0);
    free(buf);
    close(fd);
    close(fd2);
    close(dupfd);
}

/* A shared read-write mapping: reads through descriptors see what was
 * written through the mapping, and a write through a descriptor that
 * overlaps dirty bytes keeps them (outside its range) and wins inside. */
static void reads_see_mapping_writes(const char *path) {
    make_file(path, len, 1);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    int rd = open(path, O_RDONLY);
    CHECK(rd >= 0);
    unsigned char *p = map(fd, PROT_READ | PROT_WRITE, MAP_SHARED);
    uint64_t *buf = malloc(1 << 20);
    CHECK(buf != NULL);

    size_t at = 7 * 65536 + 4096;
    fill(p, at, at + 16384, 20);
    CHECK(pread(rd, buf, 16384, (off_t)at) == 16384);
    for (size_t i = 0; i < 16384 / 8; i++)
        CHECK(buf[i] == word(20, at + i * 8));
    CHECK(lseek(rd, (off_t)at, SEEK_SET) == (off_t)at);
    memset(buf, 0, 16384);
    CHECK(read(rd, buf, 8192) == 8192);
    for (size_t i = 0; i < 8192 / 8; i++)
        CHECK(buf[i] == word(20, at + i * 8));
    struct iovec iov[1] = {{buf, 4096}};
    memset(buf, 0, 4096);
    CHECK(preadv(rd, iov, 1, (off_t)(at + 8192)) == 4096);
    for (size_t i = 0; i < 4096 / 8; i++)
        CHECK(buf[i] == word(20, at + 8192 + i * 8));

    /* Dirty bytes [at, at + 16 KiB); a pwrite of [at + 4 KiB, at + 8 KiB). */
    pattern(buf, at + 4096, 4096, 21);
    CHECK(pwrite(fd, buf, 4096, (off_t)(at + 4096)) == 4096);
    expect("dirty bytes before the pwrite", p, at, at + 4096, 20);
    expect("the pwrite", p, at + 4096, at + 8192, 21);
    expect("dirty bytes after the pwrite", p, at + 8192, at + 16384, 20);
    /* Written through the mapping again, then flushed: the file agrees. */
    fill(p, at + 8192, at + 12288, 22);
    CHECK(msync(p, len, MS_SYNC) == 0);
    CHECK(pread(rd, buf, 16384, (off_t)at) == 16384);
    for (size_t i = 0; i < 16384 / 8; i++) {
        size_t off = at + i * 8;
        uint64_t seed = off < at + 4096 ? 20 : off < at + 8192 ? 21 : off < at + 12288 ? 22 : 20;
        CHECK(buf[i] == word(seed, off));
    }

    /* copy_file_range from the mapped file sees its dirty bytes. */
    at = 40 * 65536;
    fill(p, at, at + 65536, 23);
    char other[4096];
    snprintf(other, sizeof other, "%s.dst", path);
    int dst = open(other, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(dst >= 0);
    off_t in_off = (off_t)at, out_off = 0;
    CHECK(copy_file_range(fd, &in_off, dst, &out_off, 65536, 0) == 65536);
    CHECK(pread(dst, buf, 65536, 0) == 65536);
    for (size_t i = 0; i < 65536 / 8; i++)
        CHECK(buf[i] == word(23, at + i * 8));
    close(dst);
    unlink(other);

    CHECK(munmap(p, len) == 0);
    free(buf);
    close(fd);
    close(rd);
}

/* A private mapping keeps the pages it wrote; pages it never wrote show
 * the file's changes. */
static void private_pages_keep_their_changes(const char *path) {
    make_file(path, len, 1);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    unsigned char *p = map(fd, PROT_READ | PROT_WRITE, MAP_PRIVATE);
    expect("initial", p, 0, len, 1);
    size_t mine = 2 * 65536, theirs = 6 * 65536;
    fill(p, mine, mine + 4096, 30);
    uint64_t *buf = malloc(65536);
    CHECK(buf != NULL);
    pattern(buf, mine, 4096, 31);
    CHECK(pwrite(fd, buf, 4096, (off_t)mine) == 4096);
    pattern(buf, theirs, 4096, 32);
    CHECK(pwrite(fd, buf, 4096, (off_t)theirs) == 4096);
    expect("a page the mapping wrote", p, mine, mine + 4096, 30);
    expect("a page it never wrote", p, theirs, theirs + 4096, 32);
    CHECK(munmap(p, len) == 0);
    free(buf);
    close(fd);
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    const char *path = argv[1];
    len = (size_t)atoi(argv[2]) << 20;
    CHECK(len >= (4u << 20));
    make_file(path, len, 1);
    writes_show_in_mappings(path);
    reads_see_mapping_writes(path);
    private_pages_keep_their_changes(path);
    printf("coherence ok\n");
    return 0;
}
