#!/bin/sh
# make bench-peers: attnd's core beside ONNX Runtime's MultiHeadAttention
# and PyTorch's scaled_dot_product_attention, float32 and BF16, one thread
# each, CPU time, on the same inputs (tests/bench/peers.py says what runs
# and how it is timed).  Needs root.
#
# The peers are Debian 13's (python3-onnxruntime, python3-onnx,
# python3-torch: Debian 12 has no ONNX Runtime and a PyTorch without
# scaled_dot_product_attention), so everything runs in a Debian 13 chroot:
# the fresh test's debootstrap minbase rootfs (minbase_tarball in
# tests/deploy/lib.sh) unpacked into $ATTND_CI_CACHE/bench-peers/trixie-root
# with PEER_PKGS below installed from the Debian mirror apt uses here, kept
# for the next run (PEERS_REBUILD=1 starts it afresh; a changed PEER_PKGS
# installs what is new).  attnd's side, build/trixie/attnd-bench, is built
# in the same chroot by Debian 13's gcc against its OpenBLAS, the compiler
# and libraries the peers come with (docs/performance.md).
#
# The chroot gets /proc, /dev, tmpfs on /dev/shm and /tmp (the inputs and
# outputs passed to attnd-bench, up to 100 MB), the host's resolv.conf (for
# apt) and this checkout at /attnd (read-write: the build and
# build/bench-peers/peers.jsonl land in it); all are unmounted on exit.
# One run at a time (a lock under the cache).  The first run adds about a
# minute of apt-get (the chroot takes 1.7 GB); a run takes about a minute
# on a 2-core Xeon, longer where PyTorch's BF16 has no AMX (it then takes
# seconds a call).
set -u
. "$(dirname "$0")/../deploy/lib.sh"

SUITE=trixie
PEERS=$CACHE/bench-peers
CHROOT=$PEERS/$SUITE-root
# python3-torch, python3-onnxruntime, python3-onnx: the peers; gcc, make,
# pkg-config, libc6-dev, libopenblas-dev: attnd-bench (and g++ for the
# Makefile's -lstdc++)
PEER_PKGS="python3 python3-numpy python3-torch python3-onnxruntime python3-onnx
gcc g++ make pkg-config libc6-dev libopenblas-dev"
MARK=$CHROOT/etc/attnd-bench-peers.pkgs
SCRATCH=$(mktemp -d /tmp/attnd-peers.XXXXXX)
MOUNTED=""

unmount_all() {  # innermost first (MOUNTED lists the newest first)
  for _m in $MOUNTED; do
    umount "$_m" 2>/dev/null || umount -l "$_m" ||
      echo "bench-peers: could not unmount $_m" >&2
  done
  MOUNTED=""
}
cleanup() { unmount_all; rm -rf "$SCRATCH"; }
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

die() { echo "bench-peers: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, mount, chroot)"
mkdir -p "$PEERS"
exec 9>"$PEERS/.lock"
flock -n 9 || { log "another bench-peers holds $PEERS/.lock; waiting"; flock 9; }

mounted_below() { grep -q " $1/" /proc/mounts; }

mount_in() {  # mount_in PATH-IN-CHROOT MOUNT-ARGS...
  _t=$CHROOT$1; shift
  mkdir -p "$_t" && mount "$@" "$_t" || die "mount $* $_t"
  MOUNTED="$_t $MOUNTED"
}

in_chroot() {  # in_chroot CMD...: a clean environment, one thread for BLAS and OpenMP
  chroot "$CHROOT" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
    HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$@"
}

# ------------------------------------------------------------- the chroot
mounted_below "$CHROOT" && die "something is still mounted under $CHROOT (grep $CHROOT /proc/mounts)"
if [ "${PEERS_REBUILD:-0}" = 1 ] || [ ! -x "$CHROOT/usr/bin/apt-get" ]; then
  TAR=$(minbase_tarball "$SUITE") || die "debootstrap $SUITE"
  log "unpacking $(basename "$TAR") into $CHROOT"
  rm -rf "$CHROOT" "$CHROOT.new"
  mkdir -p "$CHROOT.new" && tar -C "$CHROOT.new" -xf "$TAR" && mv "$CHROOT.new" "$CHROOT" ||
    die "unpack $TAR"
fi
mount_in /proc -t proc proc
mount_in /dev --bind /dev
mount_in /dev/shm -t tmpfs -o mode=1777,nosuid,nodev tmpfs
mount_in /tmp -t tmpfs -o mode=1777,nosuid,nodev tmpfs
mount_in /attnd --bind "$ROOT"

if [ "$(cat "$MARK" 2>/dev/null)" != "$PEER_PKGS" ]; then
  log "apt-get install in the $SUITE chroot (cached afterwards):" $PEER_PKGS
  cp -L /etc/resolv.conf "$CHROOT/etc/resolv.conf"
  # shellcheck disable=SC2086
  in_chroot sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@"' \
    _ $PEER_PKGS >"$SCRATCH/apt.log" 2>&1 || { tail -n 20 "$SCRATCH/apt.log" >&2; die "apt-get install"; }
  printf '%s' "$PEER_PKGS" >"$MARK"
fi

# ------------------------------------------------------------ attnd's side
# The core and the benchmark only, against OpenBLAS alone (PKGS): the
# chroot has none of the server's libraries.
log "building build/$SUITE/attnd-bench with $(in_chroot gcc --version | head -n 1)"
in_chroot make -C /attnd --no-print-directory -j2 BUILD="build/$SUITE" PKGS=openblas \
  "build/$SUITE/attnd-bench" >"$SCRATCH/build.log" 2>&1 ||
  { tail -n 30 "$SCRATCH/build.log" >&2; die "build build/$SUITE/attnd-bench"; }

# ------------------------------------------------------------- the figures
log "load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
# onnx prints "Schema error: Trying to register schema" lines on import,
# each followed by an empty line, which are harmless (docs/performance.md);
# the rest of stderr is shown.
{
  {
    in_chroot python3 /attnd/tests/bench/peers.py --core "/attnd/build/$SUITE/attnd-bench" \
      --out /attnd/build/bench-peers "$@" 2>&1 >&4 4>&-
    echo $? >"$SCRATCH/rc"
  } | grep -v -e 'Schema error: Trying to register schema' -e '^$' >&2
} 4>&1
rc=$(cat "$SCRATCH/rc")
[ "$rc" = 0 ] || die "peers.py exited $rc"
