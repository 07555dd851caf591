#!/bin/bash
# SQLite UPDATE of every row of a 1,000,000-row table (140 MiB) with
# mmap_size, under the kernel and through the shim (1 GiB cache: it holds
# the file), interleaved, ROUNDS rounds each. The timed part is the UPDATE
# alone (the shell's .timer), after a SELECT that reads the whole table
# (the cache holds it). SYNC='PRAGMA synchronous=OFF;' takes the fsyncs out.
# usage: sqlite-update.sh DIR [ROUNDS]   (needs the sqlite3 shell)
set -euo pipefail
dir=$1 rounds=${2:-3}
lib=$(cd "$(dirname "$0")/../../.." && pwd)/target/release/libumio_preload.so
mkdir -p "$dir" && cd "$dir"
if [ ! -e base.db ]; then
  sqlite3 base.db "PRAGMA page_size=4096; CREATE TABLE t(id INTEGER PRIMARY KEY, a INTEGER, b TEXT);
    WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<1000000)
    INSERT INTO t SELECT x, x, hex(randomblob(64)) FROM c;"
fi
sql=$(printf 'PRAGMA mmap_size=1000000000;\n%s\nSELECT sum(a) FROM t;\n.timer on\nUPDATE t SET a = a + 1;\n.timer off\nSELECT sum(a) FROM t;\n' "${SYNC:-}")
one() {
  cp base.db t.db; rm -f t.db-journal; sync
  if [ "$1" = kernel ]; then
    out=$(sqlite3 t.db <<< "$sql" 2>&1)
  else
    out=$(env LD_PRELOAD="$lib" UMIO_PRELOAD_PATHS="$PWD/t.db" UMIO_CACHE_BYTES=1G UMIO_STATS=1 \
      sqlite3 t.db <<< "$sql" 2>&1)
  fi
  echo "$1: $(echo "$out" | grep '^Run Time' | head -1); sums $(echo "$out" | grep -E '^[0-9]+$' | tail -2 | tr '\n' ' ')"
}
uptime
for _ in $(seq "$rounds"); do one kernel; one shim; done
rm -f t.db t.db-journal
