#!/bin/sh
# Installs libumio.so, libumio.a, umio.h, umap/umap.h and umio.pc.
#
#   cargo build --release -p umio-ffi
#   sh crates/ffi/install.sh [PREFIX]          # default PREFIX: /usr/local
#   pkg-config --cflags --libs umio            # -I$PREFIX/include -L$PREFIX/lib -lumio
#
# DESTDIR is honoured (staged installs); UMIO_BUILD_DIR names the directory
# holding the built libraries (default: target/release).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
prefix=${1:-/usr/local}
built=${UMIO_BUILD_DIR:-$root/target/release}
dest=${DESTDIR:-}
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)

for f in libumio.so libumio.a; do
  if [ ! -f "$built/$f" ]; then
    echo "install.sh: $built/$f not found; run: cargo build --release -p umio-ffi" >&2
    exit 1
  fi
done
mkdir -p "$dest$prefix/lib/pkgconfig" "$dest$prefix/include/umap"
cp "$built/libumio.so" "$built/libumio.a" "$dest$prefix/lib/"
cp "$here/include/umio.h" "$dest$prefix/include/"
cp "$here/include/umap/umap.h" "$dest$prefix/include/umap/"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" \
  "$here/umio.pc.in" >"$dest$prefix/lib/pkgconfig/umio.pc"
echo "installed libumio $version in $dest$prefix"
