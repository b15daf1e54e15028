# The flextensor Python module (python/flextensor) in a Python process that runs the
# example model (its library build, libmodel-sim.so) on the simulated device, calling
# the module between forwards from the model's hook: enabled, memory_usage,
# suspend_profiling, iteration_mark, set_gpu_mem_limit (taken, refused), release and
# resume (and their refusals), offload_timing (turned on, read, reset); the output equals the model's without FlexTensor. The
# same driver without the library preloaded, and with it preloaded but off: every call
# a documented no-op. Then the module as `make install` and `pip install ./python`
# install it.
. "$(dirname "$0")/lib.sh"
LIBMODEL=$BUILD/examples/libmodel-sim.so
PY=$(command -v python3) || fail "python3 not found"
ARGS=(--layers 12 --dim 1024 --iters 14 --quiet)

cat >"$WORK/driver.py" <<'EOF'
"""Runs the example model from Python; between forwards, the control API through the
flextensor module. argv: MODE (on, none) LIBMODEL MODEL-ARGS..."""
import ctypes
import sys

import flextensor as ft

mode, libmodel, args = sys.argv[1], sys.argv[2], sys.argv[3:]
MiB = 1 << 20
problems = []


def check(ok, what):
    if not ok:
        problems.append(what)


def refused(fn, *a):
    try:
        fn(*a)
    except ft.FlexTensorError as e:
        return e.code
    return None


def log(*a):
    print("driver:", *a, file=sys.stderr)


def after(it):
    try:
        ft.iteration_mark()  # the next forward begins a pass, on this thread
        u = ft.memory_usage()
        log("after", it, u)
        if mode != "on":
            return
        if it == 0:
            check(u is not None and not u.planned, "before the plan: planned")
            # FT_OFFLOAD_TIMING is off: the first call turns timing on, zeros
            t = ft.offload_timing()
            check(t is not None and t.started_now and t.passes == 0, f"offload_timing() turned on: {t}")
        if it == 13:
            t = ft.offload_timing()
            log("timing", t.passes, t.units[0])
            streamed = [x for x in t.units if x.streamed]
            check(not t.started_now and t.passes >= 1 and len(t.units) == 12 and streamed, f"timing: {t}")
            check(all(x.hits + x.misses == x.loads and x.bytes_in == x.streamed_bytes * x.loads for x in streamed),
                  f"timing: hits + misses = loads, bytes = streamed bytes x loads: {streamed}")
            check(any(x.loads > 0 and x.transfer_ns > 0 for x in streamed), f"timing: copies timed: {streamed}")
            ft.reset_offload_timing()
            r = ft.offload_timing()
            check(r.passes == 0 and all(x.loads == 0 for x in r.units), f"reset_offload_timing(): {r}")
        if it == 7:
            check(u.planned and u.budget_bytes == 40 * MiB, f"planned, budget 40 MiB: {u}")
            check(ft.set_gpu_mem_limit("16MiB") is True, "set_gpu_mem_limit(16MiB)")
        if it == 8:
            check(u.budget_bytes == 16 * MiB and u.total_bytes <= 16 * MiB, f"16 MiB held: {u}")
            check(refused(ft.set_gpu_mem_limit, 1 * MiB) == -2, "1 MiB refused with -2")
            check(ft.memory_usage().budget_bytes == 16 * MiB, "refused: the budget unchanged")
        if it == 9:
            check(refused(ft.release, False) == -1, "release(keep_weights=False) refused")
            check(ft.release() is True, "release()")
            r = ft.memory_usage()
            check(r.total_bytes < MiB and r.unmapped_bytes >= 48 * MiB, f"released: {r}")
            check(refused(ft.release) == -1, "release() twice refused")
            log("released", r)
        if it == 10:  # forward 10 ran released
            check(ft.resume() is True, "resume()")
            check(refused(ft.resume) == -1, "resume() twice refused")
            check(ft.request_replan() is True, "request_replan()")
    except Exception as e:  # a callback's exception would only be printed by ctypes
        problems.append(f"after {it}: {e!r}")


check(ft.loaded() == (mode in ("on", "off")), "loaded()")
check(ft.enabled() == (mode == "on"), "enabled()")
if mode != "on":
    check(ft.memory_usage() is None, "memory_usage() is None")
    check(ft.offload_timing() is None, "offload_timing() is None")
    ft.reset_offload_timing()
    for fn, a in ((ft.set_gpu_mem_limit, ("8GiB",)), (ft.request_replan, ()), (ft.release, ()), (ft.resume, ())):
        check(fn(*a) is False, f"{fn.__name__} is False")
check(ft.parse_size("1.5GiB") == 3 * (1 << 29) and ft.parse_size("4G") == 4 << 30 and ft.parse_size("2MB") == 2000000
      and ft.parse_size(None) == 0 and ft.parse_size(64) == 64, "parse_size")
for bad in ("8 parsecs", "-1", ""):
    try:
        ft.parse_size(bad)
        problems.append(f"parse_size({bad!r}) accepted")
    except ValueError:
        pass

# RTLD_GLOBAL, as torch loads libcudart (through libtorch_global_deps): the shim looks
# the runtime's event calls up with RTLD_NEXT, which does not see a libcudart that a
# local dlopen brought in, and profiling then cannot start ("no CUDA events").
model = ctypes.CDLL(libmodel, mode=ctypes.RTLD_GLOBAL)
HOOK = ctypes.CFUNCTYPE(None, ctypes.c_int)
hook = HOOK(after)
model.model_set_hook(hook)
argv = [b"model"] + [a.encode() for a in args]
with ft.suspend_profiling():
    with ft.suspend_profiling():  # nests
        pass
rc = model.model_main(len(argv), (ctypes.c_char_p * len(argv))(*argv))
for p in problems:
    log("PROBLEM", p)
sys.exit(rc or (3 if problems else 0))
EOF

sim "$MODEL" "${ARGS[@]}" >"$WORK/plain.out" || fail "model without shim failed"
# the library build computes what the program does (a sanitizer build's runtime comes
# first all the same: the model's library is instrumented, python3 is not)
noleaks env ${SAN_PRELOAD:+LD_PRELOAD="$SAN_PRELOAD"} LD_LIBRARY_PATH="$SIMLIB" PYTHONPATH=python "$PY" "$WORK/driver.py" none "$LIBMODEL" "${ARGS[@]}" \
    >"$WORK/none.out" 2>"$WORK/none.err" || { sed 's/^/    | /' "$WORK/none.err" >&2; fail "not preloaded: the driver failed"; }
cmp -s "$WORK/plain.out" "$WORK/none.out" || fail "not preloaded: output differs from the model's"
pass "not preloaded: loaded() and enabled() False, memory_usage() None, every call False; the model's output"

noleaks env FT_ENABLED=0 LD_PRELOAD="$PRELOAD" LD_LIBRARY_PATH="$SIMLIB" PYTHONPATH=python "$PY" "$WORK/driver.py" off \
    "$LIBMODEL" "${ARGS[@]}" >"$WORK/off.out" 2>"$WORK/off.err" \
    || { sed 's/^/    | /' "$WORK/off.err" >&2; fail "FT_ENABLED=0: the driver failed"; }
cmp -s "$WORK/plain.out" "$WORK/off.out" || fail "FT_ENABLED=0: output differs"
expect_no_grep '^flextensor' "$WORK/off.err" "FT_ENABLED=0: FlexTensor said something"
pass "preloaded with FT_ENABLED=0: loaded() True, enabled() False, every call a silent no-op; same output"

noleaks env FT_ENABLED=1 FT_DISCOVERY_ITERS=2 FT_GPU_MEM_LIMIT=40MiB LD_PRELOAD="$PRELOAD" \
    LD_LIBRARY_PATH="$SIMLIB" PYTHONPATH=python "$PY" "$WORK/driver.py" on "$LIBMODEL" "${ARGS[@]}" >"$WORK/on.out" 2>"$WORK/on.err" \
    || { grep -v '^flextensor:   ' "$WORK/on.err" | sed 's/^/    | /' >&2; fail "under FlexTensor: the driver failed"; }
cmp -s "$WORK/plain.out" "$WORK/on.out" || fail "under FlexTensor: output differs"
expect_grep 'control: new budget \(FT_GPU_MEM_LIMIT 16\.0 MiB\)' "$WORK/on.err" "the budget from Python"
expect_grep 'control: ft_release: 12 of 12 units' "$WORK/on.err" "the release from Python"
expect_grep 'control: re-profiling' "$WORK/on.err" "the re-profile from Python"
expect_grep '^driver: released MemoryUsage\(total_bytes=[0-9]+, .*planned=True\)' "$WORK/on.err" "memory_usage() a dataclass"
expect_grep 'offload timing: on from the next pass \(ft_offload_timing_collect\)' "$WORK/on.err" "offload_timing() turned it on"
expect_grep '^driver: timing [1-9][0-9]* UnitTiming\(name=' "$WORK/on.err" "offload_timing() a dataclass"
expect_grep 'verdict: offloaded: .*at run time: 1 new budget\(s\), 1 re-plan\(s\), 1 release\(s\)' "$WORK/on.err" "the verdict"
pass "under FlexTensor, from a Python hook between forwards: budget 40 -> 16 MiB, 1 MiB refused (-2), release (weights in host memory, a forward run released), resume, re-plan; offload_timing() turned on, read and reset; same output"

# Installed: by make install (PYTHON_SITE), and by pip from python/ (no network, no
# build requirement).
make -s install PREFIX=/opt/ft DESTDIR="$WORK/root" BUILD="$BUILD" PYTHON_SITE=/opt/ft/py >"$WORK/install.log" 2>&1 \
    || { cat "$WORK/install.log"; fail "make install failed"; }
[ "$(env PYTHONPATH="$WORK/root/opt/ft/py" "$PY" -c 'import flextensor; print(flextensor.__file__)')" = \
  "$WORK/root/opt/ft/py/flextensor/__init__.py" ] || fail "make install: flextensor not importable from PYTHON_SITE"
env PIP_NO_INDEX=1 "$PY" -m pip install --quiet --no-deps --target "$WORK/pip" ./python >"$WORK/pip.log" 2>&1 \
    || { cat "$WORK/pip.log"; fail "pip install ./python failed"; }
env PYTHONPATH="$WORK/pip" "$PY" -c 'import flextensor, sys; sys.exit(flextensor.enabled() is not False)' \
    || fail "pip install ./python: the module does not import, or enabled() is not False unloaded"
[ -f "$WORK/pip/flextensor-0.1.0.dist-info/METADATA" ] || fail "pip install ./python: no metadata"
pass "make install puts the module in PYTHON_SITE; pip install ./python builds and installs it offline"
