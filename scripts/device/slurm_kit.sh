#!/usr/bin/env bash
# Carry this machine's Slurm (with munge and MariaDB for slurmdbd) to the device machine, which
# has 16 cores where this one has 2: benchmark 4 needs 1,000 RUNNING jobs, and their 2,000
# slurmstepd do not fit here. Nothing can be fetched there, so the programs travel.
#
#   scripts/device/slurm_kit.sh pack .slurmkit     here: the installed packages' files, and the
#                                                  shared libraries their programs load, as one tarball
#   scripts/device/slurm_kit.sh unpack .slurmkit   there (root): copied into / without replacing
#                                                  any file already there, then checked
#
# Then scripts/slurm_local.sh brings the cluster up there as it does here. The folder is
# git-ignored (.git/info/exclude) and travels with `carry`.
set -euo pipefail

PACKAGES=(slurmctld slurmd slurm-client slurmdbd slurm-wlm-basic-plugins slurm-wlm-mysql-plugin
    munge libmunge2 mariadb-server mariadb-server-core mariadb-client mariadb-client-core
    mariadb-common libmariadb3)
# glibc's own libraries: the target's must be used, never a copy of ours.
GLIBC='/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64)\.so'

die() {
    printf 'slurm_kit: ERROR: %s\n' "$*" >&2
    exit 1
}

# Programs the cluster and its users run (scripts/slurm_local.sh, the executor, the tests);
# MariaDB's other tools are left behind (each is 5 MB and the carry limit is 64 MiB).
USR_BIN='^/usr/bin/(s[a-z]+|munge|unmunge|remunge|mariadb|mariadb-admin|mariadb-install-db|mysql_install_db|my_print_defaults|resolveip)$'

keep() {
    case $1 in
    /usr/share/doc/* | /usr/share/man/* | /usr/share/lintian/* | /lib/systemd/* | /usr/lib/systemd/* | /etc/init.d/*) return 1 ;;
    /usr/bin/*) [[ $1 =~ $USR_BIN ]] ;;
    *) return 0 ;;
    esac
}

# copy_to STAGE FILE [-L]: FILE under STAGE at its merged-/usr path (/lib/x is /usr/lib/x there too).
copy_to() {
    local dest=$2
    [[ $dest == /lib/* || $dest == /lib64/* || $dest == /bin/* || $dest == /sbin/* ]] && dest=/usr$dest
    mkdir -p "$1$(dirname "$dest")"
    cp -a ${3:-} "$2" "$1$dest"
}

pack() {
    local out=$1 stage files
    command -v dpkg-query >/dev/null || die "pack needs dpkg (a Debian-family machine with the packages installed)"
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' RETURN
    files=$(for p in "${PACKAGES[@]}"; do dpkg-query -L "$p" || die "package $p is not installed"; done | sort -u)
    # The packages' regular files (directories are made as needed).
    while IFS= read -r f; do
        [[ -d $f ]] && continue # directories (and links to them, such as /lib) are made as needed
        [[ -f $f || -L $f ]] || continue
        keep "$f" || continue
        copy_to "$stage" "$f"
    done <<<"$files"
    # Debian's install scripts, not its files, make slurmctld -> /etc/alternatives -> slurmctld-wlm.
    for f in "$stage"/usr/sbin/*-wlm; do ln -s "$(basename "$f")" "${f%-wlm}"; done
    # The shared libraries their programs and plugins load, resolved here, glibc's excepted.
    while IFS= read -r f; do
        [[ -f $f ]] && head -c4 "$f" | grep -q ELF || continue
        ldd "$f" 2>/dev/null | awk '/=> \// {print $3}'
    done <<<"$files" | sort -u | grep -Ev "$GLIBC" | while IFS= read -r lib; do
        copy_to "$stage" "$lib" -L
    done
    mkdir -p "$out"
    tar -C "$stage" -czf "$out/slurm_kit.tar.gz" .
    du -h "$out/slurm_kit.tar.gz"
}

unpack() {
    local kit=$1/slurm_kit.tar.gz stage missing
    [[ -f $kit ]] || die "$kit not found: run 'pack' here first and carry the folder"
    ((EUID == 0)) || die "unpack must run as root"
    stage=$(mktemp -d)
    tar -C "$stage" -xzf "$kit"
    # No file that is already there is replaced: the target's own libraries win.
    cp -a --update=none "$stage"/. /
    rm -rf "$stage"
    ldconfig
    missing=$(for b in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/slurmdbd /usr/sbin/munged \
        /usr/sbin/mariadbd /usr/bin/sbatch; do ldd "$b" | grep 'not found' || true; done)
    [[ -z $missing ]] || die "libraries still missing: $missing"
    slurmctld -V
}

case ${1:-} in
pack | unpack) [[ $# -eq 2 ]] || die "usage: $0 pack|unpack DIR"; "$1" "$2" ;;
*) die "usage: $0 pack|unpack DIR" ;;
esac
