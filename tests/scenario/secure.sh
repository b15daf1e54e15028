# In a secure-execution process (setuid or setgid: AT_SECURE) FlexTensor ignores every
# FT_* variable and the config file, stays off, and says so in one line. A setgid copy
# of a tiny program that dlopens the library (the loader ignores LD_PRELOAD paths in
# such a process) makes one; that needs root, and a file system that honours setgid.
. "$(dirname "$0")/lib.sh"
# Under a sanitizer build the shim cannot be dlopened by an uninstrumented program (its
# runtime must be loaded first, and a setgid program ignores LD_PRELOAD's paths); the
# secure path itself is covered by check_config's unit test in that build too.
if [ -n "${SAN_PRELOAD:-}" ]; then
    echo "  skip secure execution: the sanitized shim cannot be dlopened by the uninstrumented setgid probe"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "  skip secure.sh: making a setgid program needs root (running as uid $(id -u))"
    exit 0
fi
cat >"$WORK/probe.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
#include <sys/auxv.h>
int main(int argc, char **argv)
{
    void *h = dlopen(argv[1], RTLD_NOW);
    if (h == NULL) {
        fprintf(stderr, "probe: %s\n", dlerror());
        return 3;
    }
    int (*enabled)(void) = (int (*)(void))dlsym(h, "ft_enabled");
    printf("secure %lu enabled %d\n", getauxval(AT_SECURE), enabled ? enabled() : -1);
    return 0;
}
C
gcc -o "$WORK/probe" "$WORK/probe.c" -ldl || fail "cannot build the probe"
printf '[flextensor]\nnum_blocks = 6\n' >"$WORK/ft.ini"
run_probe() {
    env FT_ENABLED=1 FT_NUM_BLOCKS=abc FT_CONFIG_FILE="$WORK/ft.ini" FT_TRACE_FILE="$WORK/t.bin" \
        "$WORK/probe" "$SHIM" >"$WORK/out" 2>"$WORK/err"
}
# As it is, the invalid value stops it (exit 2), as anywhere.
set +e
run_probe
rc=$?
set -e
[ $rc -eq 2 ] || { cat "$WORK/err" >&2; fail "ordinary process: exit $rc, want 2 (FT_NUM_BLOCKS=abc)"; }
# Setgid to a group that is not ours: the effective group differs from the real one.
chgrp 65534 "$WORK/probe" && chmod g+s "$WORK/probe" || fail "cannot make the probe setgid"
set +e
run_probe
rc=$?
set -e
if grep -q '^secure 0' "$WORK/out"; then
    echo "  skip secure.sh: the setgid bit took no effect here (a nosuid mount?)"
    exit 0
fi
[ $rc -eq 0 ] || { cat "$WORK/err" >&2; fail "secure process: exit $rc, want 0"; }
expect_grep '^secure 1 enabled 0$' "$WORK/out" "secure process: FlexTensor off"
[ "$(wc -l <"$WORK/err")" = 1 ] || { cat "$WORK/err" >&2; fail "secure process: want one line on stderr"; }
expect_grep '^flextensor: warning: secure-execution process .*every FT_\* variable and the config file are ignored; FlexTensor stays off' \
    "$WORK/err" "secure process: says so"
[ ! -e "$WORK/t.bin" ] || fail "secure process: FT_TRACE_FILE was written"
pass "setgid program: FT_* and FT_CONFIG_FILE ignored (no exit for FT_NUM_BLOCKS=abc), FlexTensor off, one line"
