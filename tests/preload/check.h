/* What the preload test programs share: checks that exit with a message,
 * a data pattern, and whether a mapping is umio's (anonymous memory in
 * /proc/self/maps) or the kernel's (the file's path). */
#ifndef UMIO_PRELOAD_CHECK_H
#define UMIO_PRELOAD_CHECK_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(c)                                                               \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "%s:%d: check failed: %s (errno %d: %s)\n",        \
                    __FILE__, __LINE__, #c, errno, strerror(errno));           \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* The word at byte offset `off` of the file in pattern `seed`. */
static inline uint64_t word(uint64_t seed, size_t off) {
    return ((uint64_t)(off / 8) + 1) * 0x9E3779B97F4A7C15ull ^ (seed << 56);
}

/* Writes pattern `seed` to [from, to) of mapped memory `p` (bytes). */
static inline void fill(void *p, size_t from, size_t to, uint64_t seed) {
    uint64_t *w = (uint64_t *)p;
    for (size_t off = from; off < to; off += 8)
        w[off / 8] = word(seed, off);
}

/* Index of the first word of [from, to) not in pattern `seed`, or -1. */
static inline long mismatch(const void *p, size_t from, size_t to, uint64_t seed) {
    const uint64_t *w = (const uint64_t *)p;
    for (size_t off = from; off < to; off += 8)
        if (w[off / 8] != word(seed, off))
            return (long)(off / 8);
    return -1;
}

/* Creates `path` holding `len` bytes of pattern `seed`, written with write(2). */
static inline void make_file(const char *path, size_t len, uint64_t seed) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    size_t chunk = 1 << 20;
    uint64_t *buf = malloc(chunk);
    CHECK(buf != NULL);
    for (size_t at = 0; at < len; at += chunk) {
        size_t n = len - at < chunk ? len - at : chunk;
        for (size_t i = 0; i < n / 8; i++)
            buf[i] = word(seed, at + i * 8);
        CHECK(pwrite(fd, buf, n, (off_t)at) == (ssize_t)n);
    }
    free(buf);
    CHECK(close(fd) == 0);
}

/* Whether the file at `path` holds pattern `seed` in [from, to), read with pread(2). */
static inline int file_holds(const char *path, size_t from, size_t to, uint64_t seed) {
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    size_t chunk = 1 << 20;
    uint64_t *buf = malloc(chunk);
    CHECK(buf != NULL);
    int ok = 1;
    for (size_t at = from; at < to && ok; at += chunk) {
        size_t n = to - at < chunk ? to - at : chunk;
        CHECK(pread(fd, buf, n, (off_t)at) == (ssize_t)n);
        for (size_t i = 0; i < n / 8; i++)
            if (buf[i] != word(seed, at + i * 8)) {
                fprintf(stderr, "file %s: word at %zu differs\n", path, at + i * 8);
                ok = 0;
                break;
            }
    }
    free(buf);
    close(fd);
    return ok;
}

/* 1 if the mapping holding `p` is anonymous in /proc/self/maps (served by
 * umio), 0 if it names a file (the kernel's). */
static inline int served_by_umio(const void *p) {
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    char line[4096];
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int path_at = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &path_at) < 2)
            continue;
        if ((unsigned long)p >= lo && (unsigned long)p < hi) {
            found = line[path_at] != '/';
            break;
        }
    }
    fclose(f);
    CHECK(found >= 0);
    return found;
}

/* EXPECT_UMIO=1 in the environment: the test runs under the shim with the
 * file selected; 0 or unset: the kernel serves it. */
static inline int expect_umio(void) {
    const char *v = getenv("EXPECT_UMIO");
    return v != NULL && strcmp(v, "1") == 0;
}

/* Runs `f` in a child and returns its wait status. */
static inline int in_child(void (*f)(void *), void *arg) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        f(arg);
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    return status;
}

#endif
