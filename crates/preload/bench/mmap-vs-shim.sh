#!/usr/bin/env bash
# The same unmodified program, fio --ioengine=mmap, over one file four
# times the memory budget: once on the kernel's mmap with the budget as a
# cgroup v1 memory limit, once under libumio_preload.so with the budget as
# umio's cache (the process in a cgroup of the same limit too, so that the
# page cache its reads leave behind is bounded alike).
#
# The file lives on ext4 over a loop device backed by a tmpfs file: a fast
# "device" (a memory copy), so the numbers compare the software paths, and
# the kernel run cannot keep the file in tmpfs pages the cgroup does not
# charge. Root only. About two minutes.
#
# Usage: sh crates/preload/bench/mmap-vs-shim.sh [BUDGET_MIB] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../../.."

budget_mib=${1:-64}
secs=${2:-10}
file_mib=$((4 * budget_mib))
# What umio's cache may hold: the budget less room for fio itself, umio's
# threads and page tables (the kernel run gets the same room for its page
# cache).
cache_mib=$((budget_mib - 16))

command -v fio >/dev/null || apt-get install -y --no-install-recommends fio >/dev/null
cargo build --release --quiet -p umio-preload
shim=$PWD/target/release/libumio_preload.so

work=$(mktemp -d /dev/shm/umio-bench.XXXXXX)
mnt=$work/mnt
cg=/sys/fs/cgroup/memory/umio-bench-$$
loopdev=
cleanup() {
    set +e
    mountpoint -q "$mnt" && umount "$mnt"
    [ -n "$loopdev" ] && losetup -d "$loopdev"
    [ -d "$cg" ] && rmdir "$cg"
    rm -rf "$work"
}
trap cleanup EXIT

truncate -s $((file_mib + 128))M "$work/disk.img"
mkfs.ext4 -q -F "$work/disk.img"
loopdev=$(losetup --find --show "$work/disk.img")
mkdir -p "$mnt"
mount "$loopdev" "$mnt"
fio --name=prep --filename="$mnt/data" --size=${file_mib}M --bs=1M --rw=write \
    --ioengine=psync --end_fsync=1 --minimal >/dev/null

mkdir "$cg"
echo $((budget_mib << 20)) >"$cg/memory.limit_in_bytes"

# run LABEL PRELOAD(0|1) PAGE_SIZE FIO_ARGS...: prints "LABEL <MiB/s> <IOPS>".
run() {
    local label=$1 preload=$2 page=$3
    shift 3
    local vars=()
    if [ "$preload" = 1 ]; then
        vars=("LD_PRELOAD=$shim" "UMIO_PRELOAD_PATHS=$mnt/*" "UMIO_CACHE_BYTES=${cache_mib}M" "UMIO_PAGE_SIZE=$page")
    fi
    local out
    # The whole process joins the cgroup before fio starts.
    out=$(env -u LD_PRELOAD sh -c 'echo $$ >"$0/cgroup.procs"; exec "$@"' "$cg" \
        env "${vars[@]}" \
        fio --name=bench --filename="$mnt/data" --size=${file_mib}M --ioengine=mmap \
        --thread --time_based --runtime="$secs" --invalidate=1 --minimal "$@")
    # --minimal (terse v3): field 7 is read bandwidth in KiB/s, 8 read IOPS.
    echo "$out" | awk -F';' -v l="$label" '{ printf "%-34s %9.1f MiB/s %9d IOPS\n", l, $7 / 1024, $8 }'
}

echo "fio --ioengine=mmap, ${file_mib} MiB file on ext4 (loop over tmpfs), budget ${budget_mib} MiB, ${secs} s each"
echo "(umio: cache ${cache_mib} MiB, process in the same ${budget_mib} MiB cgroup)"
for rw in randread read; do
    run "kernel mmap, $rw 4k" 0 - --rw=$rw --bs=4k
    run "umio shim 4 KiB pages, $rw 4k" 1 4096 --rw=$rw --bs=4k
    run "umio shim 64 KiB pages, $rw 4k" 1 65536 --rw=$rw --bs=4k
done
