# ft-trace on the discovery records: a known trace (build/tests/trace_fixture: a
# 2-layer llama-like stream, see tests/trace_fixture.c) read back as text and JSON, and
# payloads made inconsistent behind a valid checksum: a one-line reason, exit 1, nothing
# on stdout.
. "$(dirname "$0")/lib.sh"
TRACE="$BUILD/bin/ft-trace"
"$BUILD/tests/trace_fixture" "$WORK/t.bin" || fail "fixture failed"

"$TRACE" "$WORK/t.bin" >"$WORK/t.txt" 2>"$WORK/t.err" || fail "ft-trace failed on a good trace"
[ ! -s "$WORK/t.err" ] || fail "ft-trace wrote to stderr on a good trace"
T="$WORK/t.txt"
expect_grep '^device +Simulated GPU \(fixture\)$' "$T" "process"
expect_grep '^  state +done, 2 iterations seen, boundaries from the detector$' "$T" "state"
expect_grep '^  launches +134 in all, 8 touching no region; 33 in the recorded iteration$' "$T" "launches"
expect_grep '^  regions tracked +27, 966\.3 MiB$' "$T" "regions tracked"
expect_grep '^  weights +21 regions, 960\.0 MiB \(99\.4% of tracked bytes\)$' "$T" "weight share"
expect_grep '^  units +4$' "$T" "unit count"
# After discovery the fixture follows three forwards and five launches of a fourth.
expect_grep '^  passes after +start at launch 0 \(embedding\) on region 1 \(unit\.0\), or a kernel not in the pass touching it; 4 starts, the last 4 launches before the trace$' \
    "$T" "pass tracking"
expect_no_grep '^  warning ' "$T" "no tracking warning"
pass "summary: state, iterations, launches, tracked and weight bytes, units, passes followed after discovery"

# name, bytes, first kernel, last kernel, kernels, share, offload, regions
expect_grep '^units \(4\)$' "$T" "units header"
expect_grep '^  unit\.0 +64\.0 MiB +embedding +embedding +1 +6\.7% +yes +1$' "$T" "embedding unit"
expect_grep '^  unit\.1 +416\.0 MiB +rmsnorm +add +15 +43\.3% +yes +9$' "$T" "layer 1"
expect_grep '^  unit\.2 +416\.0 MiB +rmsnorm +add +15 +43\.3% +yes +9$' "$T" "layer 2"
expect_grep '^  unit\.3 +64\.0 MiB +rmsnorm +gemm_head +2 +6\.7% +yes +2$' "$T" "head unit"
[ "$(grep -c '^  unit\.' "$T")" -eq 4 ] || fail "units table: want 4 rows"
pass "units table"

# name, launches, in iteration, weight regions; by launches in the iteration, ties in
# first-launch order; the mangled name cut, with its end replaced by "...".
expect_grep '^kernels \(11, by launches in the iteration\)$' "$T" "kernels header"
sed -n '/^kernels (/,/^$/p' "$T" | sed -n '3,$p' | awk 'NF {print $1}' >"$WORK/order"
printf '%s\n' gemm _ZN7cutlass13device_kernelINS_4gemm6kerne... rmsnorm rope attention sync \
    silu_mul add embedding gemm_head rope_cache_init >"$WORK/want_order"
cmp -s "$WORK/order" "$WORK/want_order" || { diff "$WORK/want_order" "$WORK/order" >&2; fail "kernel order"; }
expect_grep '^  gemm +40 +10 +8$' "$T" "gemm row (q read twice, counted once)"
expect_grep '^  _ZN7cutlass13device_kernelINS_4gemm6kerne\.\.\. +24 +6 +6$' "$T" "mangled row"
expect_grep '^  rope +8 +2 +0$' "$T" "rope row (activations only)"
expect_grep '^  sync "barrier"\?v2 +8 +2 +0$' "$T" "barrier row (tab shown as ?)"
expect_grep '^  rope_cache_init +1 +0 +0$' "$T" "prologue kernel"
expect_no_grep 'ParamsE' "$T" "long names are cut in text"
pass "kernels table (sorted, long names cut, control bytes hidden)"

expect_grep '^  launches in the iteration touching no region: 2$' "$T" "bare launches"
expect_grep '^    sync "barrier"\?v2 +2$' "$T" "bare launches by kernel"
expect_grep '^  candidate regions that are not weights: 5, 5\.3 MiB$' "$T" "non-weights"
expect_grep '^    region 24 +4\.0 KiB +written by copy/memset$' "$T" "input by memcpy"
[ "$(grep -Ec '^    region 2[23] +2\.0 MiB +content changed$' "$T")" -eq 2 ] || fail "activations changed"
expect_grep '^    region 25 +1\.0 MiB +not touched by a kernel in the iteration$' "$T" "unused region"
expect_grep '^    region 26 +256\.0 KiB +freed, not touched by a kernel in the iteration$' "$T" "freed region"
expect_grep '^  weight bytes in no unit: 0 B$' "$T" "weights outside units"
expect_grep '^  regions allocated after the first launch \(never weights\): 1, 1\.0 MiB$' "$T" "late region"
pass "unattributed: bare launches, input written, activations changed, unused, freed, late"

"$TRACE" --json "$WORK/t.bin" >"$WORK/t.json" || fail "ft-trace --json failed"
python3 - "$WORK/t.json" <<'EOF' || fail "JSON report"
import json, sys
d = json.load(open(sys.argv[1]))
MIB, KIB = 1 << 20, 1 << 10
for k in ("process", "discovery", "regions", "kernels", "iteration", "units", "unattributed"):
    assert k in d, k
assert d["process"]["device"] == "Simulated GPU (fixture)"
s = d["discovery"]
assert (s["state"], s["iterations"], s["boundary_source"]) == ("done", 2, "detector"), s
assert (s["launches"], s["launches_no_region"], s["iteration_launches"]) == (134, 8, 33), s
assert (s["regions"], s["weight_regions"], s["units"]) == (27, 21, 4), s
layer = 2 * 8 * KIB + 416 * MIB
assert s["weight_bytes"] == 128 * MIB + 8 * KIB + 2 * layer, s
assert abs(s["weight_share"] - s["weight_bytes"] / s["region_bytes"]) < 1e-5, s
tr = d["tracking"]
assert tr == {"rule": "start_kernel_or_new_kernel", "start": 0, "kernel": tr["kernel"], "region": 1,
              "starts": 4, "launches_since_start": 4, "lost_warning": False}, tr
assert {k["index"]: k["name"] for k in d["kernels"]}[tr["kernel"]] == "embedding", tr

kernels = {k["index"]: k for k in d["kernels"]}
units = d["units"]
want = [("unit.0", 64 * MIB, "embedding", "embedding", 0, 0, 1),
        ("unit.1", layer, "rmsnorm", "add", 1, 15, 9),
        ("unit.2", layer, "rmsnorm", "add", 16, 30, 9),
        ("unit.3", 64 * MIB + 8 * KIB, "rmsnorm", "gemm_head", 31, 32, 2)]
got = [(u["name"], u["bytes"], u["first_kernel"], u["last_kernel"], u["first_launch"],
        u["last_launch"], u["region_count"]) for u in units]
assert got == want, got
for u in units:
    assert u["kernel_count"] == u["last_launch"] - u["first_launch"] + 1
    assert u["offload"] is True and len(u["regions"]) == u["region_count"]
    # first/last kernel are the names at those positions of the iteration
    assert kernels[d["iteration"][u["first_launch"]]["kernel"]]["name"] == u["first_kernel"]
    assert kernels[d["iteration"][u["last_launch"]]["kernel"]]["name"] == u["last_kernel"]
assert abs(sum(u["weight_share"] for u in units) - 1) < 1e-5
assert abs(units[1]["weight_share"] - layer / s["weight_bytes"]) < 1e-5

ks = d["kernels"]
assert [k["iteration_launches"] for k in ks] == sorted((k["iteration_launches"] for k in ks), reverse=True)
byname = {k["name"]: k for k in ks}
mangled = [n for n in byname if n.startswith("_ZN7cutlass")]
assert mangled == ["_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalINS1_9collective"
                   "14CollectiveMmaILi4ENS_10bfloat16_tES6_fLi128ELi256ELi64EEEvEEEEvNT_6ParamsE"], mangled
assert (byname[mangled[0]]["launches"], byname[mangled[0]]["iteration_launches"], byname[mangled[0]]["weight_regions"]) == (24, 6, 6)
assert (byname["gemm"]["launches"], byname["gemm"]["iteration_launches"], byname["gemm"]["weight_regions"]) == (40, 10, 8)
assert byname['sync "barrier"\tv2']["iteration_launches"] == 2   # escaped and read back exactly
assert len(d["iteration"]) == 33 and sum(not l["regions"] for l in d["iteration"]) == 2

regions = {r["id"]: r for r in d["regions"]}
assert sum(r["size"] for r in d["regions"]) == s["region_bytes"]
for r in d["regions"]:
    assert ("weight" in r["flag_names"]) == (r["unit"] is not None), r
    assert r["flags"] == sum(1 << b for b, n in enumerate(["vmm", "candidate", "weight", "written", "changed", "freed"]) if n in r["flag_names"])
    assert int(r["base"], 16) >= 0x700000000000
for i, u in enumerate(units):
    assert all(regions[x]["unit"] == i for x in u["regions"])

un = d["unattributed"]
assert un["iteration_launches_no_region"] == 2
assert un["by_kernel"] == [{"kernel": 'sync "barrier"\tv2', "launches": 2}], un["by_kernel"]
why = sorted((c["size"], tuple(c["reasons"])) for c in un["candidates_not_weights"])
assert why == [(4 * KIB, ("written",)), (256 * KIB, ("freed", "untouched")), (MIB, ("untouched",)),
               (2 * MIB, ("changed",)), (2 * MIB, ("changed",))], why
assert un["candidates_not_weights_bytes"] == sum(c["size"] for c in un["candidates_not_weights"])
assert (un["weight_bytes_outside_units"], un["late_regions"], un["late_bytes"]) == (0, 1, MIB), un
assert un["unknown_region_ids"] == 0
EOF
pass "--json: summary, units, kernels, iteration, regions, unattributed agree"

# Discovery still observing: no units, every candidate "unfinished".
"$BUILD/tests/trace_fixture" "$WORK/p.bin" --partial || fail "partial fixture failed"
"$TRACE" "$WORK/p.bin" >"$WORK/p.txt" || fail "ft-trace on an unfinished discovery"
expect_grep '^  state +observing, 0 iterations seen' "$WORK/p.txt" "partial state"
expect_grep '^  \(none: discovery did not finish\)$' "$WORK/p.txt" "partial units"
expect_grep '^    \.\.\. and 6 more \(--json lists them all\)$' "$WORK/p.txt" "text list capped at 20"
"$TRACE" --json "$WORK/p.bin" >"$WORK/p.json" || fail "ft-trace --json on an unfinished discovery"
python3 - "$WORK/p.json" <<'EOF' || fail "partial JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["discovery"]["state"] == "observing" and d["units"] == [] and d["iteration"] == []
c = d["unattributed"]["candidates_not_weights"]
assert len(c) == 26 and all("unfinished" in x["reasons"] for x in c)
EOF
pass "unfinished discovery: no units, candidates listed as unfinished"

# Payload surgery: patch one field, then fix the checksum so that only the payload
# checks can catch it.
cat >"$WORK/mutate.py" <<'EOF'
import struct, sys, zlib
src, dst, what = sys.argv[1:4]
b = bytearray(open(src, "rb").read())

def records():
    off = 16
    while True:
        t, _, n = struct.unpack_from("<HHI", b, off)
        yield t, off, n
        if t == 0xFFFF:
            return
        off += 8 + n

def payload(ty):
    return next(off + 8 for t, off, n in records() if t == ty)

def u32(off, v): struct.pack_into("<I", b, off, v & 0xFFFFFFFF)
def get32(off): return struct.unpack_from("<I", b, off)[0]

DISC, REGIONS, KERNELS, ITER, UNITS, TRACKING = 4, 5, 6, 7, 8, 14
p = payload({"tracking_rule": TRACKING, "tracking_region": TRACKING, "state": DISC, "bare": DISC, "region_count_big": REGIONS, "region_count_small": REGIONS,
             "region_unit": REGIONS, "region_flags": REGIONS, "region_order": REGIONS,
             "kernel_name_len": KERNELS, "bad_utf8": KERNELS, "kernel_index": ITER,
             "launch_ids": ITER, "unit_ids": UNITS, "unit_first": UNITS, "unit_last": UNITS, "unit_region": UNITS,
             "unit_bytes": UNITS, "unit_weight": UNITS, "dup_kernels": KERNELS}[what])
unit0 = p + 4 + 4 + get32(p + 4)             # unit 0 after its name: u64 bytes, first, last
if what == "tracking_rule": u32(p, 7)
elif what == "tracking_region": u32(p + 12, 9999)
elif what == "state": u32(p, 7)
elif what == "bare": struct.pack_into("<Q", b, p + 20, 1 << 40)
elif what == "region_count_big": u32(p, get32(p) + 1)
elif what == "region_count_small": u32(p, get32(p) - 1)
elif what == "region_unit": u32(p + 4 + 24, 77)          # region 0's unit
elif what == "region_flags": u32(p + 4 + 20, 0x80 | 2)   # region 0's flags
elif what == "region_order": u32(p + 4 + 28, 1)          # region 1's id equals region 0's
elif what == "kernel_name_len": u32(p + 4, 1 << 30)
elif what == "bad_utf8": b[p + 8] = 0xFF                 # kernel 0's first letter
elif what == "kernel_index": u32(p + 4, 999)             # launch 0's kernel
elif what == "launch_ids": u32(p + 8, 100000)            # launch 0's region count
elif what == "unit_ids": u32(unit0 + 20, 100000)         # unit 0's region count
elif what == "unit_first": u32(unit0 + 8, 33)            # the iteration has 33 launches
elif what == "unit_last": u32(unit0 + 12, 5000)
elif what == "unit_region": u32(unit0 + 24, 9999)        # unit 0's region: none such
elif what == "unit_weight": u32(unit0 + 24, 22)          # an activation, not a weight
elif what == "unit_bytes": struct.pack_into("<Q", b, unit0, struct.unpack_from("<Q", b, unit0)[0] + 1)
elif what == "dup_kernels":
    rec = b[p - 8 : p + get32(p - 4)]
    b[p - 8 : p - 8] = rec
    p += len(rec)                            # the error names the second copy
else:
    sys.exit("unknown mutation " + what)
for t, off, n in records():
    if t == 0xFFFF:
        count = sum(1 for _ in records()) - 1
        struct.pack_into("<Q", b, off + 8, count)
        u32(off + 16, zlib.crc32(bytes(b[:off])))
open(dst, "wb").write(b)
print(p - 8)                                 # the patched record's offset
EOF

check_bad() { # MUTATION PATTERN
    local mode rc off
    off=$(python3 "$WORK/mutate.py" "$WORK/t.bin" "$WORK/m.bin" "$1") || fail "mutate $1"
    for mode in "" --json; do
        set +e
        "$TRACE" $mode "$WORK/m.bin" >"$WORK/o" 2>"$WORK/e"
        rc=$?
        set -e
        [ $rc -eq 1 ] || { cat "$WORK/e" >&2; fail "$1: exit $rc, want 1"; }
        [ ! -s "$WORK/o" ] || fail "$1: printed a partial report ${mode:-(text)}"
        [ "$(wc -l <"$WORK/e")" -eq 1 ] || { cat "$WORK/e" >&2; fail "$1: want a one-line reason"; }
        expect_grep "^ft-trace: .*m\.bin: inconsistent $2" "$WORK/e" "$1"
        expect_grep " record at byte $off: " "$WORK/e" "$1: the offset of the patched record"
    done
}
check_bad state 'DISCOVERY record at byte [0-9]+: state 7 out of range'
check_bad tracking_rule 'TRACKING record at byte [0-9]+: rule 7 out of range'
check_bad tracking_region 'TRACKING record .*region 9999, absent from the REGIONS record'
check_bad bare 'DISCOVERY record .*launches touching no region, of 134 in all'
check_bad region_count_big 'REGIONS record .*count 28 overruns the payload'
check_bad region_count_small 'REGIONS record .*28 bytes left over after the last field'
check_bad region_unit 'REGIONS record .*region 1 names unit 77, the trace has 4 units'
check_bad region_flags 'REGIONS record .*region 1 has unknown flag bits 0x80'
check_bad region_order 'REGIONS record .*entry 1 has region id 1 after id 1'
check_bad kernel_name_len 'KERNELS record .*payload ends inside kernel 0'
check_bad kernel_index 'ITERATION record .*launch 0 names kernel 999, the trace has 11 kernels'
check_bad launch_ids 'ITERATION record .*launch 0: 100000 region ids overrun the payload'
check_bad unit_ids 'UNITS record .*unit 0: 100000 region ids overrun the payload'
check_bad unit_first 'UNITS record .*unit 0 \(unit\.0\) first launch 33 is beyond the iteration.s 33 launches'
check_bad unit_last 'UNITS record .*unit 0 \(unit\.0\) last launch 5000 is beyond'
check_bad unit_region 'UNITS record .*unit 0 \(unit\.0\) lists region 9999, absent from the REGIONS record'
check_bad unit_weight 'UNITS record .*lists region 22, which is not a weight'
check_bad unit_bytes 'UNITS record .*unit 0 \(unit\.0\) claims 67108865 bytes, its regions hold 67108864'
check_bad dup_kernels 'KERNELS record .*a second KERNELS record'
pass "19 inconsistent payloads behind a valid checksum: one line, exit 1, no stdout"

# A kernel name that is not UTF-8 still gives valid JSON.
python3 "$WORK/mutate.py" "$WORK/t.bin" "$WORK/u.bin" bad_utf8 >/dev/null
"$TRACE" --json "$WORK/u.bin" >"$WORK/u.json" || fail "ft-trace --json on a non-UTF-8 name"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1], encoding="utf-8")); assert any(k["name"] == "\ufffdope_cache_init" for k in d["kernels"])' \
    "$WORK/u.json" || fail "non-UTF-8 name not replaced"
pass "a name that is not UTF-8 becomes U+FFFD in JSON"

# The structure checks still come first on this trace.
size=$(stat -c %s "$WORK/t.bin")
for cut in 20 $((size / 2)) $((size - 1)); do
    head -c $cut "$WORK/t.bin" >"$WORK/cut.bin"
    set +e
    "$TRACE" --json "$WORK/cut.bin" >"$WORK/o" 2>"$WORK/e"
    rc=$?
    set -e
    [ $rc -eq 1 ] && [ ! -s "$WORK/o" ] || fail "truncated at $cut: exit $rc or a partial report"
    expect_grep 'truncated' "$WORK/e" "truncated at $cut"
done
pass "truncated discovery traces are refused"
