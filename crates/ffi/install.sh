#!/bin/sh
# Builds and installs umio's C library, or uninstalls it:
#
#   sh crates/ffi/install.sh [PREFIX]                # default PREFIX: /usr/local
#   pkg-config --cflags --libs umio                  # -I$PREFIX/include -L$PREFIX/lib -lumio
#   pkg-config --static --cflags --libs umio         # for cc -static, or libumio.a alone
#   sh crates/ffi/install.sh --uninstall [PREFIX]    # removes what install put there
#
# What it installs, under PREFIX:
#   lib/libumio.so.X.Y.Z        stripped; SONAME libumio.so.A; exports exactly
#                               the C API, each symbol with version UMIO_A
#                               (A: the ABI's major version, from libumio.map)
#   lib/libumio.so.A -> libumio.so.X.Y.Z,  lib/libumio.so -> libumio.so.A
#   lib/libumio.a               without debug information
#   lib/libumio_preload.so      the LD_PRELOAD shim, stripped
#   lib/pkgconfig/umio.pc       Libs.private for static links, fully static
#                               ones included (-lgcc_eh, not -lgcc_s, which
#                               has no archive; -lrados with the rados
#                               feature)
#   include/umio.h, include/umap/umap.h, include/umap/store/Store.hpp,
#   include/umap/store/StoreFile.h, include/umap/store/SparseStore.h
#   share/umio/installed        what was installed, for --uninstall
#
# The shared library is linked here from libumio.a with libumio.map as its
# version script, as cargo-c's conventions have it. Cargo's own
# target/release/libumio.so cannot carry the symbol versions: rustc hands
# the linker a version script of its own first, and GNU ld and lld honour
# the first. Cargo's build stays the unversioned, SONAME-less library the
# source tree's own programs link with (-L target/release -lumio).
#
# The libraries are built first: cargo build -p umio-ffi -p umio-preload
# with the profile UMIO_PROFILE (default release), in CARGO_TARGET_DIR if it
# is set (else target/), with cargo from CARGO (default: cargo).
# UMIO_BUILD_DIR instead names a directory holding libraries built already
# (libumio.a, libumio_preload.so; a build with the rados feature, say):
# nothing is built then. DESTDIR is honoured (staged installs: files go to
# $DESTDIR$PREFIX, umio.pc names $PREFIX). CC and STRIP name the compiler
# driver and strip program (default: cc and strip). Needs a C compiler and
# binutils (strip, nm).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
action=install
if [ "${1:-}" = "--uninstall" ]; then
  action=uninstall
  shift
fi
case "${1:-}" in
-*)
  echo "usage: install.sh [--uninstall] [PREFIX]" >&2
  exit 2
  ;;
esac
prefix=${1:-/usr/local}
dest=${DESTDIR:-}
top=$dest$prefix
manifest=share/umio/installed

# Removes every file the manifest lists, the manifest, then the directories
# install created, deepest first, where they are empty.
uninstall() {
  if [ ! -f "$top/$manifest" ]; then
    echo "install.sh: no umio installed in $top ($manifest not found)" >&2
    exit 1
  fi
  dirs=
  while IFS= read -r line; do
    case "$line" in
    "") ;;
    */) dirs="$line $dirs" ;;
    *) rm -f "$top/$line" ;;
    esac
  done <"$top/$manifest"
  rm -f "$top/$manifest"
  for d in $dirs; do
    rmdir "$top/$d" 2>/dev/null || true
  done
  echo "uninstalled libumio from $top"
}

if [ "$action" = uninstall ]; then
  uninstall
  exit 0
fi

if [ -n "${UMIO_BUILD_DIR:-}" ]; then
  built=$UMIO_BUILD_DIR
else
  profile=${UMIO_PROFILE:-release}
  target=${CARGO_TARGET_DIR:-$root/target}
  case "$target" in
  /*) ;;
  *) target=$root/$target ;; # cargo takes a relative one from the workspace
  esac
  case "$profile" in
  dev) built=$target/debug ;;
  *) built=$target/$profile ;;
  esac
  (cd "$root" && "${CARGO:-cargo}" build --profile "$profile" -p umio-ffi -p umio-preload)
fi
cc=${CC:-cc}
strip=${STRIP:-strip}
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
abi=$(sed -n 's/^UMIO_\([0-9][0-9]*\) *{.*/\1/p' "$here/libumio.map" | head -n 1)
if [ -z "$version" ] || [ -z "$abi" ]; then
  echo "install.sh: no version in Cargo.toml or no UMIO_<n> node in libumio.map" >&2
  exit 1
fi
for f in libumio.a libumio_preload.so; do
  if [ ! -f "$built/$f" ]; then
    echo "install.sh: $built/$f not found (UMIO_BUILD_DIR names a directory without it)" >&2
    exit 1
  fi
done

# What rustc --print native-static-libs reports for libumio.a, and librados
# when the library was built with the rados feature. The shared library
# links the unwinder shared (-lgcc_s), as every library of the process
# does; a static link takes its archive (-lgcc_eh), since libgcc_s has
# none and cc -static would fail.
system_libs="-lutil -lrt -lpthread -lm -ldl -lc"
if nm -u "$built/libumio.a" 2>/dev/null | grep -q ' rados_'; then
  system_libs="-lrados $system_libs"
fi
so_libs="-lgcc_s $system_libs"
libs="-lgcc_eh $system_libs"


work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
real=libumio.so.$version
soname=libumio.so.$abi
"$cc" -shared -o "$work/$real" \
  -Wl,-soname,"$soname" \
  -Wl,--version-script="$here/libumio.map" \
  -Wl,--no-undefined -Wl,--gc-sections -Wl,-z,relro -Wl,-z,now \
  -Wl,--whole-archive "$built/libumio.a" -Wl,--no-whole-archive \
  $so_libs
"$strip" --strip-unneeded "$work/$real"
cp "$built/libumio.a" "$work/libumio.a"
"$strip" --strip-debug "$work/libumio.a"
cp "$built/libumio_preload.so" "$work/libumio_preload.so"
"$strip" --strip-unneeded "$work/libumio_preload.so"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" -e "s|@LIBS_PRIVATE@|$libs|g" \
  "$here/umio.pc.in" >"$work/umio.pc"

# The manifest: files, and directories this install created ("dir/");
# what an earlier install recorded is kept.
: >"$work/installed"
if [ -f "$top/$manifest" ]; then
  cat "$top/$manifest" >>"$work/installed"
fi
mkdir -p "$top"
for d in lib lib/pkgconfig include include/umap include/umap/store share share/umio; do
  if [ ! -d "$top/$d" ]; then
    mkdir "$top/$d"
    echo "$d/" >>"$work/installed"
  fi
done
install -m 0755 "$work/$real" "$top/lib/$real"
ln -sfn "$real" "$top/lib/$soname"
ln -sfn "$soname" "$top/lib/libumio.so"
install -m 0644 "$work/libumio.a" "$top/lib/libumio.a"
install -m 0755 "$work/libumio_preload.so" "$top/lib/libumio_preload.so"
install -m 0644 "$work/umio.pc" "$top/lib/pkgconfig/umio.pc"
install -m 0644 "$here/include/umio.h" "$top/include/umio.h"
install -m 0644 "$here/include/umap/umap.h" "$top/include/umap/umap.h"
for h in Store.hpp StoreFile.h SparseStore.h; do
  install -m 0644 "$here/include/umap/store/$h" "$top/include/umap/store/$h"
done
for f in "lib/$real" "lib/$soname" lib/libumio.so lib/libumio.a lib/libumio_preload.so \
  lib/pkgconfig/umio.pc include/umio.h include/umap/umap.h include/umap/store/Store.hpp \
  include/umap/store/StoreFile.h include/umap/store/SparseStore.h; do
  echo "$f" >>"$work/installed"
done
# Directories last, so that uninstall empties them before removing them.
{
  grep -v '/$' "$work/installed" | sort -u
  grep '/$' "$work/installed" | awk '!seen[$0]++'
} >"$work/manifest"
install -m 0644 "$work/manifest" "$top/$manifest"
echo "installed libumio $version ($soname) in $top"
