# The build's own machinery, on fakes: tests/run.sh (make check's runner) and
# tools/setup-deps.sh (make's set-up).
. "$(dirname "$0")/lib.sh"

# --- tests/run.sh: every step runs; the failures are named at the end --------------
F=$WORK/fake-build
mkdir -p "$F/tests" "$WORK/scen"
printf '#!/bin/sh\necho unit ran >>"%s"\nexit 1\n' "$WORK/ran" >"$F/tests/check_unit"
printf '#!/bin/sh\necho "sim ran with $LD_LIBRARY_PATH" >>"%s"\n' "$WORK/ran" >"$F/tests/check_sim"
chmod +x "$F/tests/check_unit" "$F/tests/check_sim"
for s in a b c; do printf 'echo "%s ran with BUILD=$BUILD" >>"%s"\n' $s "$WORK/ran" >"$WORK/scen/$s.sh"; done
echo 'exit 3' >>"$WORK/scen/a.sh"
echo 'exit 1' >>"$WORK/scen/c.sh"
set +e
BUILD=$F bash tests/run.sh "$WORK/scen/a.sh" "$WORK/scen/b.sh" "$WORK/scen/c.sh" >"$WORK/out" 2>"$WORK/err"
rc=$?
set -e
[ $rc -eq 1 ] || fail "run.sh with failures: exit $rc, want 1"
printf '%s\n' "unit ran" "sim ran with $F/sim" "a ran with BUILD=$F" "b ran with BUILD=$F" "c ran with BUILD=$F" >"$WORK/want"
cmp -s "$WORK/want" "$WORK/ran" || { diff "$WORK/want" "$WORK/ran" >&2; fail "run.sh did not run every step, in order"; }
printf '%s\n' "== unit suites" "== simulator suites" "== scenario $WORK/scen/a.sh" "== scenario $WORK/scen/b.sh" \
    "== scenario $WORK/scen/c.sh" >"$WORK/want"
cmp -s "$WORK/want" "$WORK/out" || { diff "$WORK/want" "$WORK/out" >&2; fail "run.sh headings"; }
printf '%s\n' "make check: 3 of 5 failed:" "  unit suites" "  scenario $WORK/scen/a.sh" "  scenario $WORK/scen/c.sh" >"$WORK/want"
cmp -s "$WORK/want" "$WORK/err" || { diff "$WORK/want" "$WORK/err" >&2; fail "run.sh summary"; }
pass "run.sh runs every step after failures, names the 3 failed of 5, exits 1"
: >"$WORK/ran"
printf '#!/bin/sh\nexit 0\n' >"$F/tests/check_unit"
sed -i '$d' "$WORK/scen/a.sh" "$WORK/scen/c.sh"
BUILD=$F bash tests/run.sh "$WORK/scen/a.sh" "$WORK/scen/c.sh" >"$WORK/out" 2>"$WORK/err" || fail "run.sh, all passing: exit $?"
[ "$(tail -n 1 "$WORK/out")" = "make check: all passed (4)" ] && [ ! -s "$WORK/err" ] || fail "run.sh, all passing: $(tail -n 1 "$WORK/out")"
pass "run.sh, all passing: exit 0, 'all passed'"

# --- tools/setup-deps.sh, on a fake dpkg-query, id, sudo and apt-get ----------------
# The fakes come first on PATH: the real apt-get is never reached. $WORK/db lists the
# packages installed; $WORK/log what sudo and apt-get were asked.
B=$WORK/bin
mkdir -p "$B" "$WORK/cuda/include/nvtx3"
touch "$WORK/cuda/include/cuda.h" "$WORK/cuda/include/cupti.h" "$WORK/cuda/include/nvtx3/nvToolsExt.h"
cat >"$B/dpkg-query" <<FAKE
#!/bin/sh
shift 2 # -W -f=...
rc=0
for p; do
    if grep -qx "\$p" "$WORK/db"; then echo "ii  \$p"; else echo "dpkg-query: no packages found matching \$p" >&2; rc=1; fi
done
exit \$rc
FAKE
cat >"$B/id" <<FAKE
#!/bin/sh
echo "\$FAKE_UID"
FAKE
cat >"$B/sudo" <<FAKE
#!/bin/sh
[ "\$FAKE_SUDO" = 1 ] || exit 1
[ "\$1" = -n ] && shift
echo "sudo \$*" >>"$WORK/log"
exec "\$@"
FAKE
cat >"$B/apt-get" <<FAKE
#!/bin/sh
echo "apt-get \$*" >>"$WORK/log"
[ "\$FAKE_APT_FAIL" != 1 ] || exit 100
case " \$* " in *" install "*) for a; do case \$a in -*|*=*|install) ;; *) echo "\$a" >>"$WORK/db" ;; esac; done ;; esac
FAKE
chmod +x "$B"/*
all="build-essential pkg-config uthash-dev libinih-dev check python3"

# setup UID SUDO APT_FAIL INSTALLED [ARGS...]: runs the script; rc, out, err, log.
setup() {
    local uid=$1 sudo=$2 aptfail=$3 db=$4
    shift 4
    tr ' ' '\n' <<<"$db" >"$WORK/db"
    : >"$WORK/log"
    set +e
    env PATH="$B:$PATH" FAKE_UID="$uid" FAKE_SUDO="$sudo" FAKE_APT_FAIL="$aptfail" \
        CUDA_HOME="${CUDA:-$WORK/cuda}" bash tools/setup-deps.sh "$@" >"$WORK/out" 2>"$WORK/err"
    rc=$?
    set -e
}
# one_line TEXT WHAT: exit 1, and TEXT the only line on stdout.
one_line() {
    [ $rc -eq 1 ] || fail "$2: exit $rc, want 1"
    [ "$(cat "$WORK/out")" = "$1" ] || { sed 's/^/    | /' "$WORK/out" >&2; fail "$2: want the one line '$1'"; }
}

setup 1000 0 0 "$all"
[ $rc -eq 0 ] && [ ! -s "$WORK/out" ] && [ ! -s "$WORK/log" ] || fail "all there: exit $rc, out '$(cat "$WORK/out")'"
pass "setup-deps.sh: everything there, nothing said or done"

# pkg-config counts as there when the command is (pkgconf provides it).
setup 1000 0 0 "build-essential libinih-dev python3"
one_line "flextensor: missing Debian packages: run 'sudo apt-get install -y uthash-dev check'" "not root, no sudo"
[ ! -s "$WORK/log" ] || fail "not root, no sudo: ran $(cat "$WORK/log")"
pass "setup-deps.sh, not root, no sudo: one line with the command, exit 1"

setup 0 0 0 "build-essential libinih-dev python3"
[ $rc -eq 0 ] && [ ! -s "$WORK/out" ] || fail "root: exit $rc, out '$(cat "$WORK/out")'"
expect_grep '^apt-get -o DPkg::Lock::Timeout=[0-9]+ update' "$WORK/log" "root: apt-get update"
expect_grep '^apt-get -o DPkg::Lock::Timeout=[0-9]+ install -y -q --no-install-recommends uthash-dev check$' "$WORK/log" "root: apt-get install"
expect_grep '^flextensor: installing uthash-dev check' "$WORK/err" "root: says what it installs"
pass "setup-deps.sh, root: apt-get update, then install the two missing"

setup 1000 1 0 "build-essential pkg-config libinih-dev check python3"
[ $rc -eq 0 ] && [ ! -s "$WORK/out" ] || fail "sudo: exit $rc, out '$(cat "$WORK/out")'"
expect_grep '^sudo env DEBIAN_FRONTEND=noninteractive apt-get .* install -y -q --no-install-recommends uthash-dev$' "$WORK/log" "sudo -n apt-get install"
pass "setup-deps.sh, not root with sudo -n: through sudo"

setup 0 0 0 "build-essential pkg-config libinih-dev check python3" --check
one_line "flextensor: missing Debian packages: run 'apt-get install -y uthash-dev'" "root, --check"
[ ! -s "$WORK/log" ] || fail "--check: ran $(cat "$WORK/log")"
pass "setup-deps.sh --check (make -n): installs nothing"

setup 0 0 1 "build-essential pkg-config libinih-dev check python3"
one_line "flextensor: 'apt-get install -y uthash-dev' failed (its messages are above)" "root, apt-get fails"
pass "setup-deps.sh, apt-get fails: one line, exit 1"

CUDA=$WORK/no-cuda setup 0 0 0 "$all"
one_line "flextensor: no CUDA Toolkit at $WORK/no-cuda (cuda.h not found): install it or set CUDA_HOME=/path/to/cuda" "no CUDA"
mkdir -p "$WORK/cuda2/include" "$WORK/cuda2/extras/CUPTI/include"
touch "$WORK/cuda2/include/cuda.h" "$WORK/cuda2/extras/CUPTI/include/cupti.h"
CUDA=$WORK/cuda2 setup 0 0 0 "$all"
one_line "flextensor: the CUDA Toolkit at $WORK/cuda2 has no NVTX 3 (nvtx3/nvToolsExt.h not found): install its NVTX component or set CUDA_HOME=/path/to/cuda" "no NVTX"
pass "setup-deps.sh: a missing CUDA Toolkit (or part of it) is one line naming CUDA_HOME"

# The Makefile runs it for every goal but clean and makes its line the error; make -n
# asks it with --check (the missing toolkit fails before any package is looked at).
# Without make check's MAKEFLAGS and MAKELEVEL (a sub-make adds "Entering directory").
plain_make() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make "$@"; }
set +e
plain_make -n all BUILD="$BUILD" CUDA_HOME="$WORK/no-cuda" >"$WORK/out" 2>"$WORK/err"
rc=$?
set -e
[ $rc -ne 0 ] && [ ! -s "$WORK/out" ] && [ "$(wc -l <"$WORK/err")" -eq 1 ] || fail "make without CUDA: exit $rc, $(cat "$WORK/out" "$WORK/err")"
expect_grep "^Makefile:[0-9]+: \*\*\* flextensor: no CUDA Toolkit at $WORK/no-cuda \(cuda.h not found\)" "$WORK/err" "make without CUDA"
plain_make -n clean BUILD="$BUILD" CUDA_HOME="$WORK/no-cuda" >/dev/null || fail "make clean needs the set-up"
plain_make -n all SETUP=0 BUILD="$BUILD" CUDA_HOME="$WORK/no-cuda" >/dev/null || fail "make SETUP=0 runs the set-up"
pass "make: the set-up's one line is make's error; not for clean, nor with SETUP=0"
