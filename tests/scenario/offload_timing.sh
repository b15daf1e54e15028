# Offload timing (FT_OFFLOAD_TIMING, docs/trace-format.md "TIMING (15) and TIMELINE
# (16)"): the example model streaming under a small budget, timed. The exit report and
# ft-trace give a row per streamed unit whose bytes are the unit's streamed size times its loads,
# with copies timed (> 0) and hits + misses = loads; --chrome writes trace-event JSON
# with the expected phases, --timeline an SVG that parses as XML, with a rect on each
# lane and a red one per miss; off, nothing is recorded.
# The JSON and the SVG are checked for structure only here; timeline_render.sh renders
# the SVG in headless Chromium. That Perfetto or chrome://tracing opens the JSON is not
# tested.
. "$(dirname "$0")/lib.sh"
FT_TRACE=$BUILD/bin/ft-trace
L=()
ARGS=(--layers 6 --dim 512 --iters 12 --quiet)
COMMON=(FTSIM_TIME_SCALE=0.01 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=5MiB)

compare_run on "${ARGS[@]}" -- "${COMMON[@]}" FT_OFFLOAD_TIMING=on FT_TRACE_FILE="$WORK/on.bin"
expect_grep 'offload timing: [1-9][0-9]* pass\(es\) timed' "$WORK/on.err" "exit report: passes timed"
expect_grep 'offload timing: a pass: the program.s stream waited [0-9.]+ us for copies \([0-9]+% of its step\), the side stream copied for [0-9.]*[1-9][0-9.]* us \([0-9]+%\)' \
    "$WORK/on.err" "exit report: a pass's waits and copies"
[ "$(grep -cE '^flextensor:   unit\.[0-9]+ ' "$WORK/on.err")" = 6 ] || { cat "$WORK/on.err" >&2; fail "exit report: want 6 unit rows"; }
"$FT_TRACE" "$WORK/on.bin" >"$WORK/on.txt" || fail "ft-trace failed on a timed trace"
[ "$(sed -n '/^offload timing/,/^$/p' "$WORK/on.txt" | grep -cE '^  unit\.[0-9]+ ')" = 6 ] \
    || { cat "$WORK/on.txt" >&2; fail "ft-trace: want 6 unit rows in the offload timing table"; }
"$FT_TRACE" --json "$WORK/on.bin" >"$WORK/on.json" || fail "ft-trace --json failed"
python3 - "$WORK/on.json" <<'PY' || fail "timing figures disagree (see above)"
import json, sys
d = json.load(open(sys.argv[1]))
units, tm, res = d["units"], d["timing"], d["residency"]
assert tm["passes"] >= 1, tm
rows = [u for u in tm["units"] if u["streamed"]]
assert len(rows) == 6, rows
for u in rows:
    # the unit's bytes that stream (its regions below FT_VMM_MIN_SIZE stay resident)
    size = u["streamed_bytes"]
    assert 0 < size <= units[u["unit"]]["bytes"], (u, units[u["unit"]])
    assert u["loads"] > 0 and u["bytes_in"] == size * u["loads"], (u, size)
    assert u["hits"] + u["misses"] == u["loads"], u
    assert u["copies_timed"] > 0 and u["transfer_ns"] > 0, u
    assert u["compute_passes"] > 0 and u["compute_ns"] > 0, u
assert sum(u["loads"] for u in rows) == res["loads"], (rows, res)
assert sum(u["misses"] for u in rows) == res["misses"], (rows, res)
tl = d["timeline"]
assert 1 <= len(tl) <= 8 and all(p["step_ns"] > 0 for p in tl), tl
kinds = {e["kind"] for p in tl for e in p["events"]}
assert {"compute", "copy", "unload"} <= kinds, kinds
PY
pass "a row per streamed unit: bytes = size x loads, copies timed, hits + misses = loads (= the RESIDENCY record's)"

"$FT_TRACE" --chrome "$WORK/on.trace.json" --timeline "$WORK/on.svg" "$WORK/on.bin" >/dev/null \
    || fail "ft-trace --chrome --timeline failed"
python3 -m json.tool "$WORK/on.trace.json" >/dev/null || fail "--chrome: not JSON"
python3 - "$WORK/on.trace.json" <<'PY' || fail "--chrome: not the expected trace events"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
ph = {e["ph"] for e in ev}
assert {"M", "X", "i"} <= ph, ph
x = [e for e in ev if e["ph"] == "X"]
assert all(e["dur"] >= 0 and e["tid"] in (1, 2) for e in x)
assert {e["cat"] for e in x if e["tid"] == 1} >= {"compute"} and {e["cat"] for e in x if e["tid"] == 2} >= {"copy in"}
assert all(e["name"].startswith("pass ") for e in ev if e["ph"] == "i")
PY
pass "--chrome: trace-event JSON (metadata, complete events on two threads, pass boundaries)"

# Misses in the passes kept (--stale: stale addresses the strict guard loads for).
compare_run stale "${ARGS[@]}" --stale --iters 16 -- "${COMMON[@]}" FT_OFFLOAD_TIMING=eager FT_TRACE_FILE="$WORK/stale.bin"
"$FT_TRACE" --json --timeline "$WORK/stale.svg" --chrome "$WORK/stale.trace.json" "$WORK/stale.bin" >"$WORK/stale.json" \
    || fail "ft-trace --timeline failed"
python3 - "$WORK/on.svg" "$WORK/stale.svg" "$WORK/stale.json" "$WORK/stale.trace.json" <<'PY' || fail "--timeline: not the expected SVG"
import json, sys
import xml.etree.ElementTree as ET
NS = "{http://www.w3.org/2000/svg}"
for path in sys.argv[1:3]:
    root = ET.parse(path).getroot()
    assert root.tag == NS + "svg", root.tag
    assert not list(root.iter(NS + "script")), "a script"
    rects = list(root.iter(NS + "rect"))
    assert [r for r in rects if r.get("class") == "compute"], "no rect on the program's stream"
    assert [r for r in rects if r.get("class") == "copy"], "no rect on the side stream"
    assert [l for l in root.iter(NS + "line") if l.get("class") == "pass"], "no pass boundary"
d = json.load(open(sys.argv[3]))
misses = sum(1 for p in d["timeline"] for e in p["events"] if e["kind"] == "miss")
assert misses > 0, "the stale run kept no miss"
red = [r for r in ET.parse(sys.argv[2]).getroot().iter(NS + "rect") if r.get("class") == "miss" and r.get("fill") == "red"]
assert len(red) == misses, (len(red), misses)
chrome = [e for e in json.load(open(sys.argv[4]))["traceEvents"] if e.get("cat") == "miss"]
assert len(chrome) == misses and all(e["cname"] == "terrible" for e in chrome), len(chrome)
PY
pass "--timeline: SVG parses as XML, a rect on each lane, pass boundaries, a red rect per miss (and in --chrome)"

compare_run off "${ARGS[@]}" -- "${COMMON[@]}" FT_TRACE_FILE="$WORK/off.bin"
expect_no_grep 'offload timing' "$WORK/off.err" "FT_OFFLOAD_TIMING off: no report"
"$FT_TRACE" --json "$WORK/off.bin" >"$WORK/off.json" || fail "ft-trace --json failed (off)"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert "timing" not in d and "timeline" not in d and "residency" in d' \
    "$WORK/off.json" || fail "FT_OFFLOAD_TIMING off: timing records written"
if "$FT_TRACE" --timeline "$WORK/off.svg" "$WORK/off.bin" >/dev/null 2>"$WORK/off.ft"; then
    fail "ft-trace --timeline on an untimed trace must fail"
fi
expect_grep 'no TIMELINE record' "$WORK/off.ft" "--timeline without a TIMELINE record"
pass "FT_OFFLOAD_TIMING off (the default): nothing recorded; ft-trace --timeline says why it has nothing to draw"
