/* LMDB (Debian's liblmdb) inserting records and reading every one back.
 * In its default mode LMDB writes pages with pwrite(2) and reads them
 * through a read-only shared mapping of the file, so the mapping must see
 * every write at once; with MDB_WRITEMAP it writes through a read-write
 * mapping and syncs it with msync.
 *
 * usage: lmdb DIR RECORDS default|writemap MAPSIZE_BYTES
 *
 * With "points GETS" after MAPSIZE_BYTES, the program only opens the
 * database that an earlier run made and reads GETS records chosen at
 * random (a fixed seed), checking each value: a B-tree's random point
 * reads, each a walk from the root to one leaf.
 *
 * "killed" for the mode loads with MDB_WRITEMAP | MDB_NOSYNC (no msync
 * ever) and prints "committed N" after each transaction's commit (the
 * first N records of the load order are in), for its parent to SIGKILL it
 * mid-load. "check DONE" after MAPSIZE_BYTES then opens that database and
 * checks that the first DONE records of the load order are there with
 * their values, and that every record it holds has its value. */
#include "check.h"

#include <lmdb.h>

#define MDB_CHECK(call)                                                        \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != MDB_SUCCESS) {                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,      \
                    mdb_strerror(rc_));                                        \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* Record i's value: 40 to 167 bytes derived from i. */
static size_t value_of(unsigned i, unsigned char *out) {
    size_t n = 40 + (i * 2654435761u) % 128;
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + 1;
    for (size_t k = 0; k < n; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[k] = (unsigned char)x;
    }
    return n;
}

static MDB_env *open_env(const char *dir, unsigned flags, size_t mapsize) {
    MDB_env *env;
    MDB_CHECK(mdb_env_create(&env));
    MDB_CHECK(mdb_env_set_mapsize(env, mapsize));
    MDB_CHECK(mdb_env_open(env, dir, flags, 0644));
    return env;
}

/* Record i is in the database with its value; exits otherwise. */
static void check_record(MDB_txn *txn, MDB_dbi dbi, unsigned i) {
    unsigned char val[256];
    char key[16];
    snprintf(key, sizeof key, "%010u", i);
    MDB_val k = {10, key}, v;
    int rc = mdb_get(txn, dbi, &k, &v);
    if (rc != MDB_SUCCESS) {
        fprintf(stderr, "record %u: %s\n", i, mdb_strerror(rc));
        exit(1);
    }
    size_t n = value_of(i, val);
    if (v.mv_size != n || memcmp(v.mv_data, val, n) != 0) {
        fprintf(stderr, "record %u: wrong value\n", i);
        exit(1);
    }
}

/* GETS random point reads of a database of RECORDS records. */
static int points(const char *dir, unsigned records, size_t mapsize, unsigned gets) {
    MDB_env *env = open_env(dir, MDB_RDONLY, mapsize);
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn));
    MDB_CHECK(mdb_dbi_open(txn, NULL, 0, &dbi));
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (unsigned g = 0; g < gets; g++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        unsigned i = (unsigned)(x % records);
        check_record(txn, dbi, i);
    }
    mdb_txn_abort(txn);
    mdb_env_close(env);
    printf("lmdb points ok: %u gets\n", gets);
    return 0;
}

/* The record the load order puts at position j of `records`. */
static unsigned load_order(unsigned j, unsigned records) {
    return (unsigned)(((uint64_t)j * 48271u) % records);
}

/* After a load killed mid-way: the database opens, holds at least the
 * first `done` records of the load order with their values, and every
 * record in it is whole. */
static int check_killed(const char *dir, unsigned records, size_t mapsize, unsigned done) {
    MDB_env *env = open_env(dir, MDB_RDONLY, mapsize);
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_stat st;
    MDB_CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn));
    MDB_CHECK(mdb_dbi_open(txn, NULL, 0, &dbi));
    MDB_CHECK(mdb_stat(txn, dbi, &st));
    if (st.ms_entries < done) {
        fprintf(stderr, "the database holds %zu records, fewer than the %u committed\n",
                st.ms_entries, done);
        exit(1);
    }
    for (unsigned j = 0; j < done; j++)
        check_record(txn, dbi, load_order(j, records));
    /* Every record there, committed before the kill or not, is whole. */
    MDB_cursor *cur;
    MDB_CHECK(mdb_cursor_open(txn, dbi, &cur));
    MDB_val k, v;
    size_t seen = 0;
    int rc;
    while ((rc = mdb_cursor_get(cur, &k, &v, seen ? MDB_NEXT : MDB_FIRST)) == MDB_SUCCESS) {
        char key[16];
        CHECK(k.mv_size == 10);
        memcpy(key, k.mv_data, 10);
        key[10] = 0;
        check_record(txn, dbi, (unsigned)strtoul(key, NULL, 10));
        seen++;
    }
    if (rc != MDB_NOTFOUND || seen != st.ms_entries) {
        fprintf(stderr, "walking the database: %s after %zu of %zu records\n", mdb_strerror(rc),
                seen, st.ms_entries);
        exit(1);
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    printf("lmdb check ok: %zu records, %u committed before the kill\n", seen, done);
    return 0;
}

int main(int argc, char **argv) {
    CHECK(argc == 5 || (argc == 6 && (strcmp(argv[3], "points") == 0 ||
                                      strcmp(argv[3], "check") == 0)));
    const char *dir = argv[1];
    unsigned records = (unsigned)atoi(argv[2]);
    if (argc == 6 && strcmp(argv[3], "check") == 0)
        return check_killed(dir, records, (size_t)strtoull(argv[4], NULL, 0),
                            (unsigned)atoi(argv[5]));
    if (argc == 6)
        return points(dir, records, (size_t)strtoull(argv[4], NULL, 0), (unsigned)atoi(argv[5]));
    int killed = strcmp(argv[3], "killed") == 0;
    unsigned flags = strcmp(argv[3], "writemap") == 0 ? MDB_WRITEMAP
                     : killed                         ? MDB_WRITEMAP | MDB_NOSYNC
                                                      : 0;
    CHECK(flags != 0 || strcmp(argv[3], "default") == 0);
    size_t mapsize = (size_t)strtoull(argv[4], NULL, 0);
    unsigned char val[256];
    char key[16];

    MDB_env *env = open_env(dir, flags, mapsize);
    MDB_dbi dbi;
    /* Keys in a scattered order, so that pages all over the file change. */
    unsigned batch = 2000;
    for (unsigned start = 0; start < records; start += batch) {
        MDB_txn *txn;
        MDB_CHECK(mdb_txn_begin(env, NULL, 0, &txn));
        MDB_CHECK(mdb_dbi_open(txn, NULL, 0, &dbi));
        for (unsigned j = start; j < start + batch && j < records; j++) {
            unsigned i = load_order(j, records);
            snprintf(key, sizeof key, "%010u", i);
            MDB_val k = {10, key}, v = {value_of(i, val), val};
            MDB_CHECK(mdb_put(txn, dbi, &k, &v, 0));
        }
        MDB_CHECK(mdb_txn_commit(txn));
        if (killed) {
            char line[64];
            unsigned done = start + batch < records ? start + batch : records;
            int n = snprintf(line, sizeof line, "committed %u\n", done);
            CHECK(write(1, line, (size_t)n) == n);
        }
    }
    /* Inside the same environment: every record reads back. */
    MDB_txn *txn;
    MDB_CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn));
    MDB_stat st;
    MDB_CHECK(mdb_stat(txn, dbi, &st));
    if (st.ms_entries != records) {
        fprintf(stderr, "the database holds %zu records, not %u\n", st.ms_entries, records);
        exit(1);
    }
    mdb_txn_abort(txn);
    mdb_env_close(env);

    /* Opened again: every record is there with its value. */
    env = open_env(dir, flags | MDB_RDONLY, mapsize);
    MDB_CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn));
    MDB_CHECK(mdb_dbi_open(txn, NULL, 0, &dbi));
    MDB_CHECK(mdb_stat(txn, dbi, &st));
    if (st.ms_entries != records) {
        fprintf(stderr, "reopened, the database holds %zu records, not %u\n", st.ms_entries,
                records);
        exit(1);
    }
    for (unsigned i = 0; i < records; i++) {
        check_record(txn, dbi, i);
    }
    mdb_txn_abort(txn);
    mdb_env_close(env);
    printf("lmdb ok: %u records (%s mode, %zu pages of the tree)\n", records, argv[3],
           st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages);
    return 0;
}
