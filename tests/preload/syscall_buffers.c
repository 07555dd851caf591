/* Mapped memory and heap allocations passed to system calls as their
 * buffers, never touched before: the write, read, vectored and socket
 * families read from them and write into them as they do with the
 * kernel's mmap, whichever way umio serves faults (with faults served in
 * the faulting thread, the shim faults the buffers in first). A buffer
 * larger than the cache may come back short; the loops here take what
 * comes, as a program must.
 *
 * usage: syscall_buffers DIR MIB  (MIB: the mapped file's size) */
#include "check.h"

#include <sys/socket.h>
#include <sys/uio.h>

#define CHUNK (64 << 10)

static size_t len;
static char path[4096], src_path[4096], out_path[4096];

static void *map(int fd, int prot, int flags) {
    void *p = mmap(NULL, len, prot, flags, fd, 0);
    CHECK(p != MAP_FAILED);
    CHECK(served_by_umio(p) == expect_umio());
    return p;
}

/* The bytes [off, off + n) of the file `fd`, read with pread into `buf`. */
static void read_back(int fd, void *buf, size_t off, size_t n) {
    CHECK(pread(fd, buf, n, (off_t)off) == (ssize_t)n);
}

static void expect(const char *what, const void *p, size_t off, size_t n, uint64_t seed) {
    const uint64_t *w = p;
    for (size_t i = 0; i < n / 8; i++)
        if (w[i] != word(seed, off + i * 8)) {
            fprintf(stderr, "%s: byte %zu differs\n", what, i * 8);
            exit(1);
        }
}

/* The first `n` bytes of the file `fd` into `buf` with pread(2), taking
 * short counts as a program must. */
static void pread_all(int fd, void *buf, size_t n) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)done);
        CHECK(r > 0);
        done += (size_t)r;
    }
}

/* The kernel reads mapped pages nobody touched yet. */
static void kernel_reads_mapped_pages(int fd) {
    const unsigned char *p = map(fd, PROT_READ, MAP_SHARED);
    int out = open(out_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(out >= 0);
    uint64_t *check = malloc(4 * CHUNK);
    CHECK(check != NULL);

    size_t at = 0;
    CHECK(write(out, p + at, CHUNK) == CHUNK);
    read_back(out, check, 0, CHUNK);
    expect("write(2) from the mapping", check, at, CHUNK, 1);

    at += CHUNK;
    CHECK(pwrite(out, p + at, CHUNK, 0) == CHUNK);
    read_back(out, check, 0, CHUNK);
    expect("pwrite(2) from the mapping", check, at, CHUNK, 1);

    at += CHUNK;
    struct iovec iov[2] = {{(void *)(p + at), CHUNK / 2},
                           {(void *)(p + at + CHUNK / 2), CHUNK / 2}};
    CHECK(lseek(out, 0, SEEK_SET) == 0);
    CHECK(writev(out, iov, 2) == CHUNK);
    read_back(out, check, 0, CHUNK);
    expect("writev(2) from the mapping", check, at, CHUNK, 1);

    at += CHUNK;
    iov[0].iov_base = (void *)(p + at);
    iov[0].iov_len = CHUNK;
    CHECK(pwritev(out, iov, 1, 0) == CHUNK);
    read_back(out, check, 0, CHUNK);
    expect("pwritev(2) from the mapping", check, at, CHUNK, 1);

    free(check);
    CHECK(close(out) == 0);
    CHECK(munmap((void *)p, len) == 0);
}

/* The kernel writes into mapped pages: never touched, or read once (clean,
 * write-protected by umio), in shared and private mappings. */
static void kernel_writes_mapped_pages(int fd, int flags, const char *kind) {
    unsigned char *p = map(fd, PROT_READ | PROT_WRITE, flags);
    int src = open(src_path, O_RDONLY);
    CHECK(src >= 0);
    size_t at = 0;

    CHECK(read(src, p + at, CHUNK) == CHUNK);
    expect(kind, p + at, 0, CHUNK, 2);

    at += CHUNK;
    CHECK(pread(src, p + at, CHUNK, CHUNK) == CHUNK);
    expect(kind, p + at, CHUNK, CHUNK, 2);

    at += CHUNK;
    volatile unsigned char sink = p[at] + p[at + CHUNK - 1]; /* resident, clean */
    (void)sink;
    CHECK(pread(src, p + at, CHUNK, 0) == CHUNK);
    expect(kind, p + at, 0, CHUNK, 2);

    at += CHUNK;
    struct iovec iov[2] = {{p + at, CHUNK / 2}, {p + at + CHUNK / 2, CHUNK / 2}};
    CHECK(lseek(src, 0, SEEK_SET) == 0);
    CHECK(readv(src, iov, 2) == CHUNK);
    expect(kind, p + at, 0, CHUNK, 2);

    at += CHUNK;
    iov[0].iov_base = p + at;
    iov[0].iov_len = CHUNK;
    CHECK(preadv(src, iov, 1, 0) == CHUNK);
    expect(kind, p + at, 0, CHUNK, 2);

    /* What the kernel wrote reaches the file (shared) or stays private. */
    CHECK(msync(p, len, MS_SYNC) == 0);
    uint64_t *check = malloc(CHUNK);
    CHECK(check != NULL);
    read_back(fd, check, 0, CHUNK);
    expect(kind, check, 0, CHUNK, (flags & MAP_SHARED) ? 2 : 1);
    free(check);
    CHECK(close(src) == 0);
    CHECK(munmap(p, len) == 0);
    /* Put the file back as it was for the next case. */
    make_file(path, len, 1);
}

/* Sockets: send from and receive into mapped pages never touched. */
static void sockets_use_mapped_pages(int fd) {
    unsigned char *p = map(fd, PROT_READ | PROT_WRITE, MAP_PRIVATE);
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    size_t n = 16 << 10; /* within the socket's buffer */
    size_t out = 0, in = len / 2;

    CHECK(send(sv[0], p + out, n, 0) == (ssize_t)n);
    CHECK(recv(sv[1], p + in, n, MSG_WAITALL) == (ssize_t)n);
    expect("send, recv", p + in, out, n, 1);

    out += n, in += n;
    CHECK(sendto(sv[0], p + out, n, 0, NULL, 0) == (ssize_t)n);
    CHECK(recvfrom(sv[1], p + in, n, MSG_WAITALL, NULL, NULL) == (ssize_t)n);
    expect("sendto, recvfrom", p + in, out, n, 1);

    out += n, in += n;
    struct iovec siov = {p + out, n}, riov = {p + in, n};
    struct msghdr smsg = {.msg_iov = &siov, .msg_iovlen = 1};
    struct msghdr rmsg = {.msg_iov = &riov, .msg_iovlen = 1};
    CHECK(sendmsg(sv[0], &smsg, 0) == (ssize_t)n);
    CHECK(recvmsg(sv[1], &rmsg, MSG_WAITALL) == (ssize_t)n);
    expect("sendmsg, recvmsg", p + in, out, n, 1);

    out += n, in += n;
    struct iovec siov2 = {p + out, n}, riov2 = {p + in, n};
    struct mmsghdr sm = {.msg_hdr = {.msg_iov = &siov2, .msg_iovlen = 1}};
    struct mmsghdr rm = {.msg_hdr = {.msg_iov = &riov2, .msg_iovlen = 1}};
    CHECK(sendmmsg(sv[0], &sm, 1, 0) == 1);
    CHECK(sm.msg_len == n);
    CHECK(recvmmsg(sv[1], &rm, 1, MSG_WAITALL, NULL) == 1);
    CHECK(rm.msg_len == n);
    expect("sendmmsg, recvmmsg", p + in, out, n, 1);

    CHECK(close(sv[0]) == 0 && close(sv[1]) == 0);
    CHECK(munmap(p, len) == 0);
}

/* A buffer as large as the whole mapping (larger than the cache under
 * the test's settings): read into it and write from it in loops that take
 * short counts, as a program must. */
static void whole_mapping_as_one_buffer(int fd) {
    unsigned char *p = map(fd, PROT_READ | PROT_WRITE, MAP_PRIVATE);
    int big = open(src_path, O_RDONLY);
    CHECK(big >= 0);
    pread_all(big, p, len);
    expect("one large read", p, 0, len, 2);
    int out = open(out_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(out >= 0);
    size_t done = 0;
    while (done < len) {
        ssize_t r = write(out, p + done, len - done);
        CHECK(r > 0);
        done += (size_t)r;
    }
    CHECK(file_holds(out_path, 0, len, 2));
    CHECK(close(out) == 0 && close(big) == 0);
    CHECK(munmap(p, len) == 0);
}

/* Large allocations (umio's heap when heap mode is on): read into them
 * and write from them before they were ever touched. */
static void heap_buffers(void) {
    size_t n = 4 << 20;
    unsigned char *a = malloc(n);
    CHECK(a != NULL);
    int src = open(src_path, O_RDONLY);
    CHECK(src >= 0);
    pread_all(src, a, n);
    expect("read(2) into a large allocation", a, 0, n, 2);
    unsigned char *b = malloc(n); /* never touched */
    CHECK(b != NULL);
    int out = open(out_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(out >= 0);
    CHECK(write(out, b, 4096) == 4096);
    CHECK(close(out) == 0 && close(src) == 0);
    free(a);
    free(b);
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    len = (size_t)atoi(argv[2]) << 20;
    snprintf(path, sizeof path, "%s/mapped.bin", argv[1]);
    snprintf(src_path, sizeof src_path, "%s/source.bin", argv[1]);
    snprintf(out_path, sizeof out_path, "%s/out.bin", argv[1]);
    make_file(path, len, 1);
    make_file(src_path, len, 2);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    kernel_reads_mapped_pages(fd);
    kernel_writes_mapped_pages(fd, MAP_SHARED, "into a shared mapping");
    kernel_writes_mapped_pages(fd, MAP_PRIVATE, "into a private mapping");
    sockets_use_mapped_pages(fd);
    whole_mapping_as_one_buffer(fd);
    heap_buffers();
    CHECK(close(fd) == 0);
    puts("syscall buffers ok");
    return 0;
}
