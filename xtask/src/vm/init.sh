#!/bin/busybox sh
# xtask guest /init (busybox). Shipped inside the xtask binary (include_str!), written into
# the initramfs unchanged. Kernel command line parameters it reads:
#   xtask.name=NAME        hostname
#   xtask.argv=A,B,C       the ONE command to run in the chroot (comma-separated, no spaces)
# Layout: host / over 9p (tag hostroot, read-only) + tmpfs overlay -> /newroot;
# per-guest writable share (tag xshare) -> /newroot/xtask-share;
# run-wide sync share (tag xsync) -> /newroot/xtask-sync.
# The command's exit code goes to /xtask-share/exit_code, then the guest powers off.

/bin/busybox mkdir -p /proc /sys /dev /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/sbin:/bin:/usr/sbin:/usr/bin

log() { echo "xtask-init: $*"; }
poweroff_now() {
    sync
    echo 1 > /proc/sys/kernel/sysrq
    echo o > /proc/sysrq-trigger
    sleep 30
}
die() {
    log "FATAL: $*"
    poweroff_now
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo 1 > /proc/sys/kernel/sysrq

for m in $(cat /lib/modules/order); do
    insmod "/lib/modules/$m.ko" || log "insmod $m failed"
done

NAME=guest
ARGV=
for p in $(cat /proc/cmdline); do
    case "$p" in
        xtask.name=*) NAME="${p#xtask.name=}" ;;
        xtask.argv=*) ARGV="${p#xtask.argv=}" ;;
    esac
done
hostname "$NAME"
[ -n "$ARGV" ] || die "no xtask.argv= on the kernel command line"

NINEP="trans=virtio,version=9p2000.L,msize=512000"
mkdir -p /mnt/lower /mnt/rw /newroot
mount -t 9p -o "$NINEP,ro,cache=loose" hostroot /mnt/lower || die "cannot mount the host root (9p tag hostroot)"
mount -t tmpfs -o mode=0755 tmpfs /mnt/rw || die "tmpfs"
mkdir -p /mnt/rw/upper /mnt/rw/work
mount -t overlay overlay -o lowerdir=/mnt/lower,upperdir=/mnt/rw/upper,workdir=/mnt/rw/work /newroot \
    || die "cannot mount the overlay root"
mkdir -p /newroot/xtask-share /newroot/xtask-sync /newroot/proc /newroot/sys /newroot/dev /newroot/run
# cache=none: every read/lookup goes to the host, so markers written by another guest are
# visible at once.
mount -t 9p -o "$NINEP,cache=none" xshare /newroot/xtask-share || die "cannot mount the share (9p tag xshare)"
mount -t 9p -o "$NINEP,cache=none" xsync /newroot/xtask-sync || die "cannot mount the sync share (9p tag xsync)"
mount -t proc proc /newroot/proc
mount -t sysfs sysfs /newroot/sys
mount -t devtmpfs devtmpfs /newroot/dev
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
mount -t tmpfs tmpfs /newroot/dev/shm
# No tmpfs over /tmp: a workspace checked out under the host's /tmp (CI may clone there) must
# stay visible; writes to /tmp land in the overlay's tmpfs upper layer anyway.
mount -t tmpfs tmpfs /newroot/run
ip link set lo up

OLDIFS="$IFS"
IFS=,
set -- $ARGV
IFS="$OLDIFS"
log "running $*"
chroot /newroot /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root TERM=dumb XTASK_GUEST="$NAME" "$@"
rc=$?
echo "$rc" > /newroot/xtask-share/exit_code
log "exit $rc"
poweroff_now
