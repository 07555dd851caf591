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
 * reads, each a walk from the root to one leaf. */
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

int main(int argc, char **argv) {
    CHECK(argc == 5 || (argc == 6 && strcmp(argv[3], "points") == 0));
    const char *dir = argv[1];
    unsigned records = (unsigned)atoi(argv[2]);
    if (argc == 6)
        return points(dir, records, (size_t)strtoull(argv[4], NULL, 0), (unsigned)atoi(argv[5]));
    unsigned flags = strcmp(argv[3], "writemap") == 0 ? MDB_WRITEMAP : 0;
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
            unsigned i = (unsigned)(((uint64_t)j * 48271u) % records);
            snprintf(key, sizeof key, "%010u", i);
            MDB_val k = {10, key}, v = {value_of(i, val), val};
            MDB_CHECK(mdb_put(txn, dbi, &k, &v, 0));
        }
        MDB_CHECK(mdb_txn_commit(txn));
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
