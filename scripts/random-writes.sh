#!/bin/sh
# Drives examples/random_writes.rs: each side in a cgroup v1 memory cgroup
# of its own with the same limit, sides alternated within each round.
#   scripts/random-writes.sh DIR ROUNDS OPS [SIDES...]
# Needs root and /sys/fs/cgroup/memory. Prints one line per run:
#   round side ops seconds ops_per_s wp_faults first_writes scans evicted_dirty peak_MiB
set -eu
dir=$1; rounds=$2; ops=$3; shift 3
sides=${*:-"mmap umio umio-sync"}
budget=$((256 << 20))
cache_mib=240
bin=${BIN:-target/release/examples/random_writes}
file=$dir/rw-1g.bin
mkdir -p "$dir"
if [ ! -f "$file" ] || [ "$(stat -c %s "$file")" -ne $((1 << 30)) ]; then
    dd if=/dev/urandom of="$file" bs=1M count=1024 status=none
fi
cg=/sys/fs/cgroup/memory/umio-rw-$$
mkdir "$cg"
trap 'rmdir "$cg" 2>/dev/null || true' EXIT
echo $budget > "$cg/memory.limit_in_bytes"
r=1
while [ $r -le "$rounds" ]; do
    for side in $sides; do
        echo 0 > "$cg/memory.max_usage_in_bytes" 2>/dev/null || true
        line=$(sh -c "echo \$\$ > $cg/cgroup.procs && exec $bin $side $file $ops $cache_mib $r" 2>/tmp/rw-$side.err)
        peak=$(( $(cat "$cg/memory.max_usage_in_bytes") >> 20 ))
        echo "$r $line $peak"
    done
    r=$((r + 1))
done
