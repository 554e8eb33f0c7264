#!/usr/bin/env bash
# An RK3588-like arm64 userland on an x86-64 Debian machine, to try the board's install path here:
# Debian 12 (Python 3.11) built with debootstrap and run by qemu user-mode emulation (5-20x slower than a
# board). It has no NPU, no librknnrt.so and no /proc/device-tree: a board command ends at its "no NPU"
# line, and ANIMA_BOARD_ROOT=tests/data/sysfs-rk3588 makes the checkout treat it as an RK3588.
#   tools/arm64-chroot.sh build ROOTFS            # as root: debootstrap (~20 min emulated) + a fresh image's packages
#   tools/arm64-chroot.sh run ROOTFS COMMAND...   # as root: COMMAND inside, with proc/sys/dev mounted and unmounted after
set -euo pipefail
action="${1:?usage: tools/arm64-chroot.sh build|run ROOTFS [COMMAND...]}"
ROOTFS="${2:?usage: tools/arm64-chroot.sh build|run ROOTFS [COMMAND...]}"
shift 2
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
# What a fresh board image has, plus docs/board.md section 2's packages (bin/test adds its own).
IMAGE_PACKAGES=(python3 python3-venv git curl ca-certificates sudo)

build() {
    apt-get install -y -qq qemu-user-static binfmt-support debootstrap > /dev/null
    debootstrap --arch=arm64 --foreign --variant=minbase bookworm "$ROOTFS" "$MIRROR"
    chroot "$ROOTFS" /debootstrap/debootstrap --second-stage
    echo "deb $MIRROR bookworm main" > "$ROOTFS/etc/apt/sources.list"
    run apt-get update -qq
    run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${IMAGE_PACKAGES[@]}"
}

# onnxruntime reads /proc/cpuinfo to pick its kernels and dies on the x86 host's under qemu (signal 11):
# an ARM-shaped one (the RK3588's four Cortex-A55 and four Cortex-A76) is bound over it.
cpuinfo() {
    local n part
    for n in 0 1 2 3 4 5 6 7; do
        part=0xd05; (( n >= 4 )) && part=0xd0b
        printf 'processor\t: %s\nBogoMIPS\t: 48.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\n' "$n"
        printf 'CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x2\nCPU part\t: %s\nCPU revision\t: 0\n\n' "$part"
    done
}

run() {
    mountpoint -q "$ROOTFS/proc" || mount -t proc proc "$ROOTFS/proc"
    mountpoint -q "$ROOTFS/sys" || mount --rbind /sys "$ROOTFS/sys"
    mountpoint -q "$ROOTFS/dev" || mount --rbind /dev "$ROOTFS/dev"
    cpuinfo > "$ROOTFS/etc/cpuinfo.arm64"
    mount --bind "$ROOTFS/etc/cpuinfo.arm64" "$ROOTFS/proc/cpuinfo"
    # this machine's CA bundle, for pip behind its proxy
    mkdir -p "$ROOTFS/etc/ssl/certs" && cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/host-ca.crt"
    local rc=0
    # A clean environment, as on a board: this machine's variables (its pip index, CA paths) stay out.
    chroot "$ROOTFS" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PIP_CERT=/etc/ssl/host-ca.crt \
        SSL_CERT_FILE=/etc/ssl/host-ca.crt REQUESTS_CA_BUNDLE=/etc/ssl/host-ca.crt "$@" || rc=$?
    umount "$ROOTFS/proc/cpuinfo" "$ROOTFS/proc"
    umount -R "$ROOTFS/sys" "$ROOTFS/dev"
    return "$rc"
}

case "$action" in
    build) build ;;
    run) run "$@" ;;
    *) echo "error: unknown action $action (build or run)" >&2; exit 2 ;;
esac
