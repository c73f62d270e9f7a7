# The common start of the rigs that print one line per check and a closing
# `N passed, M failed` (scripts/vhead.sh, scripts/field.sh), sourced once the
# rig has set RIG (its name, the prefix of its log lines).
T0=$(date +%s)
log() { echo "$RIG: $*" >&2; }
# A failure of the rig itself (no root, no QEMU, no kernel, no browser, no
# build): one failed check, loudly; never a silent pass.
die() {
    echo "FAIL rig: $*"
    echo "0 passed, 1 failed"
    exit 1
}
