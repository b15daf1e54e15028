# FT_SHM_ENABLED: processes of one namespace running the same model share one host
# copy of their streamed units (a POSIX shared memory segment). Three at once give the
# results of runs without FlexTensor and hold, in shared segments and private pinned
# memory together (read from /proc/PID/smaps), at most 1.2x one process's streamed
# bytes, against 3x without sharing. Then what can go wrong: the process filling the
# segment killed half-way (another takes over), a unit that differs in the segment
# (private), another model in the namespace (its own segment), a process that writes
# into a shared unit (private to it), a stale segment (replaced), the wait running out
# (private, said), a segment of the wrong mode or owner (refused), ft-run --shm-clean,
# and a process without the device checksum kernel (private).
. "$(dirname "$0")/lib.sh"
ARGS=(--layers 8 --dim 1024 --iters 12 --quiet)
NS=shm-$$
export FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=12MiB FT_SHM_NAMESPACE=$NS
trap 'for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done; "$BUILD/bin/ft-run" --shm-clean "$NS" >/dev/null 2>&1; rm -rf "$WORK"' EXIT

segments() { ls /dev/shm 2>/dev/null | grep -E "^ft-$NS-[0-9a-f]{16}\$" || true; }
# start NAME [ENV...] -- [ARGS...]: the model under the shim in the background; its pid
# in $pid_NAME, its output in $WORK/NAME.{out,err}.
start() {
    local name=$1 envs=() args=()
    shift
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    args=("$@")
    env FT_ENABLED=1 FT_LOG_LEVEL=debug "${envs[@]}" LD_LIBRARY_PATH="$SIMLIB" LD_PRELOAD="$PRELOAD" \
        "$MODEL" "${ARGS[@]}" "${args[@]}" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    printf -v "pid_$name" %s $!
}
# finish NAME: waits for it; it must have succeeded with the output of $WORK/$2.plain
# (default: plain).
finish() {
    local p="pid_$1" want=${2:-plain}
    wait "${!p}" || { grep -v 'miss on' "$WORK/$1.err" | tail -20 | sed 's/^/    | /' >&2; fail "$1: the model failed"; }
    cmp -s "$WORK/$want.plain" "$WORK/$1.out" || fail "$1: output differs from the run without FlexTensor"
}
# until_file FILE / until_grep PATTERN FILE / until_stopped PID: waits (60 s at most).
until_file() { for _ in $(seq 6000); do [ -e "$1" ] && return; sleep 0.01; done; fail "no $1"; }
until_grep() {
    for _ in $(seq 6000); do grep -Eq -- "$1" "$2" && return; sleep 0.01; done
    sed 's/^/    | /' "$2" >&2; fail "no /$1/ in $2"
}
until_stopped() {
    for _ in $(seq 6000); do [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = T ] && return; sleep 0.01; done
    fail "process $1 did not stop"
}
# held_kib PID: the KiB of pinned memory and shared segments the process holds, its
# share of each shared page counted (Pss): summed over processes, a shared page once.
held_kib() {
    awk '/^[0-9a-f]+-[0-9a-f]+ / { n = ($6 ~ /simcuda-pinned|^\/dev\/shm\/ft-/) } n && /^Pss:/ { s += $2 } END { print s + 0 }' \
        "/proc/$1/smaps"
}
# kill9 PID: kills it and reaps it, quietly (bash reports a job killed by a signal).
kill9() { { kill -9 "$1" && wait "$1"; } 2>/dev/null || true; }
streamed_mib() { sed -nE 's/.*residency: [0-9]+ unit\(s\), ([0-9.]+) MiB, moved to.*/\1/p' "$1" | head -1; }

sim "$MODEL" "${ARGS[@]}" >"$WORK/plain.plain" || fail "model without shim failed"
sim "$MODEL" "${ARGS[@]}" --seed 7 >"$WORK/seed.plain" || fail "model --seed 7 without shim failed"
sim "$MODEL" "${ARGS[@]}" --poke 9 >"$WORK/poke.plain" || fail "model --poke 9 without shim failed"
sim "$MODEL" "${ARGS[@]}" --peek 9 >"$WORK/peek.plain" || fail "model --peek 9 without shim failed"
[ -z "$(segments)" ] || fail "segments of $NS before the test"

# --- three processes, one namespace: one copy --------------------------------------------
# measure SHM: three at once, held after their forwards; prints the KiB they hold.
# Private copies in cudaHostAlloc's memory (FT_PINNED_MEMORY_MODE=alloc), which the
# simulator names in /proc (held_kib); the default registers heap memory, unnamed.
measure() {
    local shm=$1 total=0
    for i in 1 2 3; do start "m$shm$i" FT_SHM_ENABLED=$shm FT_PINNED_MEMORY_MODE=alloc -- --hold "$WORK/go$shm$i"; done
    for i in 1 2 3; do until_file "$WORK/go$shm$i.held"; done
    for i in 1 2 3; do
        local p="pid_m$shm$i"
        total=$((total + $(held_kib "${!p}")))
    done
    if [ "$shm" = 1 ]; then
        [ "$(segments | wc -l)" = 1 ] || fail "three processes of one model: not one segment ($(segments))"
        [ "$(stat -c %a "/dev/shm/$(segments)")" = 600 ] || fail "segment mode $(stat -c %a "/dev/shm/$(segments)"), not 600"
    fi
    for i in 1 2 3; do touch "$WORK/go$shm$i"; done
    for i in 1 2 3; do finish "m$shm$i"; done
    echo "$total"
}
private=$(measure 0)
shared=$(measure 1)
mib=$(streamed_mib "$WORK/m11.err")
[ -n "$mib" ] || fail "no streamed units reported"
expect_grep "residency: 8 unit\(s\)" "$WORK/m11.err" "every layer streams"
awk -v p="$private" -v s="$shared" -v m="$mib" 'BEGIN { b = m * 1024; exit !(s <= 1.2 * b && p >= 2.8 * b) }' \
    || fail "host memory held: $shared KiB shared, $private KiB private, for $mib MiB streamed per process"
pass "3 processes, same checksums as without FlexTensor; pinned + shared host memory $(awk -v s="$shared" -v m="$mib" 'BEGIN{printf "%.2f", s/1024/m}')x one process's $mib MiB streamed (without sharing: $(awk -v s="$private" -v m="$mib" 'BEGIN{printf "%.2f", s/1024/m}')x)"
cat "$WORK"/m1?.err >"$WORK/m1.all"
[ "$(grep -c 'shm: created segment' "$WORK/m1.all")" = 1 ] || fail "not one creator"
[ "$(grep -c 'shm: attached to segment' "$WORK/m1.all")" = 2 ] || fail "not two attached"
expect_grep 'shm: segment .*: 8 unit\(s\), 32.0 MiB, used from it' "$WORK/m11.err" "all 8 units shared"
filled=$(sed -nE 's/.*used from it: ([0-9]+) filled by this process.*/\1/p' "$WORK/m1.all" | awk '{ s += $1 } END { print s }')
[ "$filled" = 8 ] || fail "each unit filled once in all: $filled"
expect_grep "shm: segment /ft-$NS-[0-9a-f]{16} removed \(the last process to leave it\)" "$WORK/m1.all" "removed"
[ -z "$(segments)" ] || fail "segment left after the last process: $(segments)"
pass "one process created the segment, the others attached; each unit filled once; the last to leave removed it"

# --- under FT_SPILL: units held in host memory at the switch -------------------------------
# Their bytes go to the segment from FT_SPILL's host copies (which are then freed), and
# their checksum reference comes from the shared copy: none is copied back.
start p1 FT_SPILL=1 FT_SHM_ENABLED=1 -- --hold "$WORK/gop1"
until_file "$WORK/gop1.held"
start p2 FT_SPILL=1 FT_SHM_ENABLED=1 --
finish p2
touch "$WORK/gop1"
finish p1
for p in p1 p2; do
    expect_grep 'FT_SPILL: before the plan, [1-9][0-9]* allocation\(s\) moved in and [1-9]' "$WORK/$p.err" "$p: FT_SPILL moved"
    expect_grep 'unload\(s\), 0 of them copied back' "$WORK/$p.err" "$p: nothing copied back"
done
expect_grep 'used from it: 8 filled by this process' "$WORK/p1.err" "P1 filled"
expect_grep 'used from it: 0 filled by this process .* 8 checked' "$WORK/p2.err" "P2 checked"
[ -z "$(segments)" ] || fail "segment left: $(segments)"
pass "under FT_SPILL, units held in host memory at the switch are shared too; same checksums, nothing copied back"

# --- the process filling it killed half-way ----------------------------------------------
# A stops itself (test hook) holding its third unit's claim; B, attached, waits for that
# unit; A is killed: B takes the unit over and fills the rest. C then uses B's copy.
start a FT_SHM_ENABLED=1 FT_SHM_TEST_STOP_AFTER=3 --
until_stopped "$pid_a"
start b FT_SHM_ENABLED=1 -- --hold "$WORK/gob"
until_grep "shm: unit\.2 is being filled by pid $pid_a .*: waiting" "$WORK/b.err"
kill9 "$pid_a"
until_file "$WORK/gob.held"
expect_grep "shm: unit\.2 in segment /ft-$NS-[0-9a-f]+ was left half-filled by pid $pid_a, which died: filled by this process instead" \
    "$WORK/b.err" "B took over"
start c FT_SHM_ENABLED=1 --
finish c
touch "$WORK/gob"
finish b
expect_grep 'used from it: 6 filled by this process \(1 taken over from a process that died\), 2 checked' "$WORK/b.err" "B's count"
expect_grep 'used from it: 0 filled by this process .* 8 checked and used' "$WORK/c.err" "C used B's copy"
[ -z "$(segments)" ] || fail "segment left after B and C: $(segments)"
pass "the process filling the segment killed half-way: the waiting one took its unit over, same checksums"

# --- a process that writes, a unit that differs, other models ---------------------------
start d FT_SHM_ENABLED=1 -- --hold "$WORK/god"
until_file "$WORK/god.held"
seg=$(segments)
# H writes into layer 0's weight (unit.0) after its 10th forward, on the device: the
# unit is copied back to a private copy, not into the segment
start h FT_SHM_ENABLED=1 -- --poke 9 --hold "$WORK/goh"
until_file "$WORK/goh.held"
expect_grep 'shm: unit\.0 keeps a private host copy from now on \((this process wrote to it|it changed on the device in this process)\)' \
    "$WORK/h.err" "a written unit becomes private"
# H2 writes into unit.4 while it is in host memory (a copy served there)
start h2 FT_SHM_ENABLED=1 -- --peek 9
finish h2 peek
expect_grep 'shm: unit\.4 keeps a private host copy from now on \(this process wrote to it\)' "$WORK/h2.err" \
    "a unit written in host memory becomes private"
start i FT_SHM_ENABLED=1 --
finish i
expect_grep 'used from it: 0 filled by this process .* 8 checked and used as another filled them; private copies: 0 waited out, 0 differing' \
    "$WORK/i.err" "I: the segment is as D filled it"
touch "$WORK/goh"
finish h poke
expect_grep 'private copies: .* 1 written to here' "$WORK/h.err" "H's count"
pass "a process that writes into a shared unit makes it its own (same checksum as without FlexTensor); the segment keeps the bytes others use"
# unit.0's bytes begin at the first page after the header (4 KiB for 8 units)
printf 'garbage!' | dd of="/dev/shm/$seg" bs=1 seek=$((4096 + 64)) conv=notrunc status=none
start e FT_SHM_ENABLED=1 --
finish e
expect_grep "shm: unit\.0 in segment /ft-$NS-[0-9a-f]+ differs from this process's weights .*: never used; a private copy" \
    "$WORK/e.err" "a differing unit is not used"
expect_grep 'used from it: 0 filled by this process .* 7 checked .* 1 differing' "$WORK/e.err" "E's count"
pass "a unit whose bytes in the segment differ from the process's weights: private copy, warned; same checksum"
start f FT_SHM_ENABLED=1 -- --seed 7
finish f seed
expect_grep "shm: created segment /ft-$NS-" "$WORK/f.err" "another model creates its own segment"
expect_no_grep "$seg" "$WORK/f.err" "another model leaves the first model's segment alone"
# The log tells what differed: the same layout, other contents.
fp() { sed -nE "s/.*shm: (created|attached to) segment .*; the units' layout ([0-9a-f]{16}), contents ([0-9a-f]{16}).*/\\$1/p" "$2" | head -1; }
[ -n "$(fp 2 "$WORK/d.err")" ] && [ "$(fp 2 "$WORK/d.err")" = "$(fp 2 "$WORK/f.err")" ] &&
    [ "$(fp 3 "$WORK/d.err")" != "$(fp 3 "$WORK/f.err")" ] || fail "another model: layout and contents not told apart in the log"
start g FT_SHM_ENABLED=1 -- --layers 10
wait "$pid_g" || fail "a model of another shape failed"
expect_grep "shm: created segment /ft-$NS-[0-9a-f]+ \(10 unit" "$WORK/g.err" "another shape creates its own segment"
expect_no_grep "$seg" "$WORK/g.err" "another shape leaves the first model's segment alone"
pass "other models in the namespace (other weights, another shape) get segments of their own; same checksums"
touch "$WORK/god"
finish d
[ -z "$(segments)" ] || fail "segments left: $(segments)"

# --- a stale segment, the wait running out, ft-run --shm-clean --------------------------
start s FT_SHM_ENABLED=1 -- --hold "$WORK/gos"
until_file "$WORK/gos.held"
kill9 "$pid_s"
seg=$(segments)
[ -n "$seg" ] || fail "no segment left by a killed process"
printf 'garbage!' | dd of="/dev/shm/$seg" bs=1 seek=$((4096 * 3)) conv=notrunc status=none
start t FT_SHM_ENABLED=1 --
finish t
expect_grep "shm: segment /$seg was left by a run that ended without leaving it \(nobody attached\): replaced" \
    "$WORK/t.err" "stale segment found"
expect_grep 'used from it: 8 filled by this process .* 0 checked' "$WORK/t.err" "a stale segment is not trusted"
[ -z "$(segments)" ] || fail "segment left: $(segments)"
pass "a stale segment (its run killed) is replaced, its contents not used; same checksum"

start w FT_SHM_ENABLED=1 FT_SHM_TEST_STOP_AFTER=2 --
until_stopped "$pid_w"
start x FT_SHM_ENABLED=1 FT_SHM_WAIT_TIMEOUT=1 --
finish x
expect_grep "shm: unit\.1 was still being filled by pid $pid_w in segment /ft-$NS-[0-9a-f]+ when the wait ran out \(FT_SHM_WAIT_TIMEOUT=1 s\): a private copy" \
    "$WORK/x.err" "wait timeout said"
expect_grep 'used from it: 6 filled by this process .* 1 checked .* 1 waited out' "$WORK/x.err" "X's count"
pass "the wait running out: the unit still being filled elsewhere gets a private copy, said; same checksum"
kill9 "$pid_w"
seg=$(segments)
[ -n "$seg" ] || fail "no segment left (its last process was killed)"
"$BUILD/bin/ft-run" --shm-clean "$NS" >"$WORK/clean.out" 2>&1 || fail "ft-run --shm-clean failed"
expect_grep "^ft-run: removed segment /$seg\$" "$WORK/clean.out" "--shm-clean names it"
[ -z "$(segments)" ] || fail "--shm-clean left $(segments)"
"$BUILD/bin/ft-run" --shm-clean "$NS" >"$WORK/clean2.out" 2>&1 || fail "ft-run --shm-clean (nothing left) failed"
expect_grep "no segment of namespace $NS" "$WORK/clean2.out" "--shm-clean with nothing"
rc=0
"$BUILD/bin/ft-run" --shm-clean ../x >/dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "--shm-clean ../x: exit $rc, not 2"
pass "ft-run --shm-clean removes a namespace's segments (and refuses a namespace that is not a plain name)"

# --- wrong mode or owner: refused ------------------------------------------------------
# wrong NAME MODE [OWNER]: a segment of that name planted with that mode and owner
wrong() {
    local name=$1 mode=$2 owner=${3:-}
    printf 'x' >"/dev/shm/$name"
    chmod "$mode" "/dev/shm/$name"
    [ -z "$owner" ] || chown "$owner" "/dev/shm/$name"
}
start k FT_SHM_ENABLED=1 --
finish k
seg=$(sed -nE "s|.*shm: created segment /(ft-$NS-[0-9a-f]{16}) .*|\1|p" "$WORK/k.err")
[ -n "$seg" ] || fail "no segment name"
for mode in 644 666 660; do
    wrong "$seg" "$mode"
    start "r$mode" FT_SHM_ENABLED=1 --
    finish "r$mode"
    expect_grep "^flextensor: error: shm: segment /$seg has mode 0$mode, not 0600 .*: refused; the streamed units keep private host copies" \
        "$WORK/r$mode.err" "mode $mode refused"
    expect_grep 'residency: 8 unit\(s\), 32.0 MiB, moved to pinned host memory' "$WORK/r$mode.err" "private copies"
    [ -e "/dev/shm/$seg" ] || fail "a refused segment was removed"
done
start g660 FT_SHM_ENABLED=1 FT_SHM_GROUP=1 --
finish g660
expect_grep "shm: segment /$seg was left by a run .*: replaced" "$WORK/g660.err" "FT_SHM_GROUP accepts 0660"
expect_grep "shm: created segment /$seg .*mode 0660" "$WORK/g660.err" "FT_SHM_GROUP creates 0660"
if [ "$(id -u)" = 0 ]; then
    wrong "$seg" 600 65534
    start owner FT_SHM_ENABLED=1 --
    finish owner
    expect_grep "^flextensor: error: shm: segment /$seg is owned by uid 65534 .*not by this process's uid 0: refused" \
        "$WORK/owner.err" "another owner refused"
    rm -f "/dev/shm/$seg"
    pass "segments of a wider mode (0644, 0666, 0660 without FT_SHM_GROUP) or another owner are refused, named, and left alone; same checksums"
else
    rm -f "/dev/shm/$seg"
    pass "segments of a wider mode (0644, 0666, 0660 without FT_SHM_GROUP) are refused, named, and left alone; same checksums (owner: needs root to plant one)"
fi

# --- without the device checksum kernel nothing could be checked: nothing is shared ------
start nojit FTSIM_NO_JIT=1 FT_SHM_ENABLED=1 --
finish nojit
expect_grep "warning: shm: FT_SHM_ENABLED, but no unit's content can be summed .*private host copies" \
    "$WORK/nojit.err" "no checksum kernel: said"
expect_grep 'residency: 8 unit\(s\), 32.0 MiB, moved to pinned host memory' "$WORK/nojit.err" "private copies"
[ -z "$(segments)" ] || fail "a segment made without the checksum kernel: $(segments)"
pass "without the device checksum kernel: private copies, said once; same checksum"
