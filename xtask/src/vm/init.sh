#!/bin/busybox sh
# xtask guest /init (busybox). Shipped inside the xtask binary (include_str!), written into
# the initramfs unchanged. Kernel command line parameters it reads:
#   xtask.name=NAME        hostname
#   xtask.argv=A,B,C       the ONE command to run in the chroot (comma-separated, no spaces)
#   xtask.init=systemd     optional: instead of the chroot, `switch_root` into the prepared
#                          root with the host's systemd as PID 1, booting xtask.target (the
#                          basic system and xtask-guest.service, which runs the command,
#                          records its exit code and powers off). Default: busybox (chroot).
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
INIT=busybox
for p in $(cat /proc/cmdline); do
    case "$p" in
        xtask.name=*) NAME="${p#xtask.name=}" ;;
        xtask.argv=*) ARGV="${p#xtask.argv=}" ;;
        xtask.init=*) INIT="${p#xtask.init=}" ;;
    esac
done
hostname "$NAME"
[ -n "$ARGV" ] || die "no xtask.argv= on the kernel command line"
case "$INIT" in
    busybox|systemd) ;;
    *) die "xtask.init=$INIT: busybox or systemd" ;;
esac

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
ENV="/usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb XTASK_GUEST=$NAME"

# xtask.init=systemd: the host's systemd boots the overlay root. Only what the overlay adds is
# ours: xtask.target (the basic system and the command's unit), the command's unit and script,
# and masks for what cannot work in a guest of the host's root (udev would rename eth0 by the
# host's link policy; the host's modules, fstab, timers, network and time services).
if [ "$INIT" = systemd ]; then
    [ -x /newroot/lib/systemd/systemd ] || die "xtask.init=systemd: no /lib/systemd/systemd in the host root"
    # The arguments, each single-quoted (xtask.argv= carries no quotes, spaces or commas).
    Q=
    for a in "$@"; do Q="$Q '$a'"; done
    cat > /newroot/xtask-run <<EOF || die "cannot write /xtask-run"
#!/bin/sh
# xtask.init=systemd: the guest's one command (xtask-guest.service), then its exit code and
# the power-off, as busybox's /init does.
echo "xtask-init: running$Q" > /dev/console
$ENV$Q
rc=\$?
echo "\$rc" > /xtask-share/exit_code
echo "xtask-init: exit \$rc" > /dev/console
sync
echo o > /proc/sysrq-trigger
sleep 30
EOF
    U=/newroot/etc/systemd/system
    mkdir -p "$U"
    cat > "$U/xtask.target" <<EOF || die "cannot write xtask.target"
[Unit]
Description=xtask guest: the basic system and the guest's command
Requires=basic.target
Wants=xtask-guest.service
After=basic.target
AllowIsolate=yes
EOF
    # No start timeout: the guest's deadline (QEMU killed) bounds the command.
    cat > "$U/xtask-guest.service" <<EOF || die "cannot write xtask-guest.service"
[Unit]
Description=xtask guest command (xtask.argv)
[Service]
Type=oneshot
ExecStart=/bin/sh /xtask-run
TimeoutStartSec=infinity
StandardOutput=journal+console
StandardError=journal+console
EOF
    for u in systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket \
        systemd-udev-trigger.service systemd-udev-settle.service systemd-modules-load.service \
        kmod-static-nodes.service systemd-remount-fs.service systemd-fsck-root.service \
        systemd-timesyncd.service systemd-pstore.service systemd-repart.service \
        systemd-binfmt.service proc-sys-fs-binfmt_misc.automount timers.target getty.target \
        networking.service systemd-networkd.service systemd-networkd-wait-online.service \
        ifupdown-wait-online.service NetworkManager-wait-online.service packagekit.service; do
        ln -sf /dev/null "$U/$u"
    done
    # /tmp and /var/tmp are the host's (under the overlay): Debian's tmp.conf would have
    # systemd-tmpfiles empty /tmp at boot, walking all of the host's /tmp and hiding from the
    # guest a workspace checked out there (its xtask among it). Created, never cleaned.
    mkdir -p /newroot/etc/tmpfiles.d
    printf 'd /tmp 1777 root root -\nd /var/tmp 1777 root root -\n' \
        > /newroot/etc/tmpfiles.d/tmp.conf || die "cannot write tmpfiles.d/tmp.conf"
    # A host that is a container says so in its root: systemd would believe the guest is one.
    rm -f /newroot/.dockerenv /newroot/run/.containerenv
    log "starting systemd (xtask.target) for: $*"
    exec switch_root /newroot /lib/systemd/systemd --unit=xtask.target
fi

log "running $*"
chroot /newroot $ENV "$@"
rc=$?
echo "$rc" > /newroot/xtask-share/exit_code
log "exit $rc"
poweroff_now
