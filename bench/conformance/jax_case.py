"""The JAX conformance cases: a jax.jit of a stack of layers whose weights are separate
device arrays, run the same way without FlexTensor and under `ft-run --gpu-mem`
(bench/conformance/run.sh runs this script as it runs cases.py).

    python3 bench/conformance/jax_case.py CASE --out OUT.npz [--json OUT.json]
        [--ref REF.npz] [--steps N] [--warmup N] [--h2d] [--work DIR]

CASE (XLA's allocator setting; any XLA_PYTHON_CLIENT_* of the caller is dropped):
  jax            XLA_PYTHON_CLIENT_PREALLOCATE=false: XLA takes device memory from the
                 driver as its buffers need it
  jax_prealloc   XLA's default: at its start it takes 75% of the device memory that
                 cuMemGetInfo reports, as one arena, and sub-allocates from it
  jax_fraction   preallocation on with XLA_PYTHON_CLIENT_MEM_FRACTION=0.06 (as a user
                 sharing the device sets it): one arena of 6% of the device (8.4 GiB on
                 an H200, 4.7 GiB on an H100), which holds the model and its buffers

Model: 24 layers of hidden 2048, each an RMS norm with its own scale, then
(gelu(h @ w_gate) * (h @ w_up)) @ w_down added to the residual, the inner width 10240;
bf16, 3.02 GB. The weights are a Python list of per-layer dicts of arrays, each weight
its own XLA buffer (as a model's parameters are; a stacked array would be one buffer),
made on the device by one jitted maker called per layer, from jax.random with fixed
keys. The forward (a Python loop over the layers) is one jax.jit.

Workload: decode-like steps, a (1, 4, 2048) input, a new one each step: --warmup, then
--steps timed; prefill-like steps, (8, 512, 2048), the same input each: 2 warm-up, 3
timed. The first call of each shape compiles it (the first warm-up step: its time is
compile_decode_s, compile_prefill_s). Each step blocks on its result and is timed as
cases.py times its steps (cases.Run, cases.timed_steps: the same JSON fields, so
run.sh and report.py read both alike), with FlexTensor's state after each.

Outputs (--out, a numpy .npz, as float32: bf16 widens exactly): every decode step's
output, every prefill's last position, the last prefill's whole output. --ref compares
them bitwise (the JSON's "compare", shaped as cases.py's). --h2d (the run without
FlexTensor) times 1 GiB pinned host-to-device copies in a separate python3 with torch
(ftbench.h2d_gbps), so that no torch shares this process with XLA; without torch the
report falls back on the shim's own figure. The JSON also holds XLA's memory statistics
(device.memory_stats(): bytes_limit is the arena under preallocation) after the load
and at the end.

CONF_AUTOTUNE=fixed (the default) adds --xla_gpu_autotune_level=0 to XLA_FLAGS: no
autotuning, XLA's kernel choices come from heuristics and are the same in every
process, so that a bitwise difference is FlexTensor's. CONF_AUTOTUNE=free: XLA
autotunes at the first call of each shape (scratch buffers under FlexTensor's budget,
and choices by timing: a difference may then be the autotuner's). JAX_PLATFORMS is
cuda unless the caller set it: a CUDA backend that fails to start is an error, never a
silent run on the CPU. Without jax (ImportError) the row says "skipped": "no jax ..."
and the exit status is 0. CONF_TINY=1: 2 layers of hidden 256, prefill (2, 64).
"""
import argparse
import gc
import json
import os
import signal
import subprocess
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cases  # noqa: E402 - its Run, timed_steps, clock and TINY; it imports no torch by itself

CASES = ("jax", "jax_prealloc", "jax_fraction")
TINY = cases.TINY
LAYERS, HIDDEN, INNER = (2, 256, 512) if TINY else (24, 2048, 5 * 2048)
DECODE_TOKENS = 4
PREFILL_BATCH, PREFILL_TOKENS = (2, 64) if TINY else (8, 512)
WEIGHT_SEED, INPUT_SEED = 201, cases.INPUT_SEED
XLA_ENV = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR")


def setup_env(case):
    """XLA's settings for CASE, made before jax is imported (XLA reads them when its
    backend starts); returns them for the JSON."""
    for v in XLA_ENV:
        os.environ.pop(v, None)
    if case == "jax":
        os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    elif case == "jax_fraction":
        os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = "0.06"
    os.environ.setdefault("JAX_PLATFORMS", "cuda")
    flags = os.environ.get("XLA_FLAGS", "")
    if cases.autotune_fixed() and "xla_gpu_autotune_level" not in flags:
        flags = (flags + " --xla_gpu_autotune_level=0").strip()
    if flags:
        os.environ["XLA_FLAGS"] = flags
    return {v: os.environ.get(v) for v in XLA_ENV + ("XLA_FLAGS", "JAX_PLATFORMS")}


def memory_stats(dev):
    """XLA's allocator statistics for dev (bytes in use, peak, limit ...); None where
    the backend gives none."""
    try:
        s = dev.memory_stats()
        return {k: int(v) for k, v in s.items()} if s else None
    except Exception as e:  # noqa: BLE001 - a diagnostic only
        return {"error": repr(e)}


def make_params(jax, jnp):
    """LAYERS dicts of bf16 arrays, each its own buffer: the norm's scale near 1, the
    matrices uniform with variance 1/fan-in (the residual stays near unit scale)."""
    f32, bf16 = jnp.float32, jnp.bfloat16
    a_in, a_out = (3.0 / HIDDEN) ** 0.5, (3.0 / INNER) ** 0.5

    def layer(key):
        k = jax.random.split(key, 4)
        return {"scale": (1.0 + jax.random.uniform(k[0], (HIDDEN,), f32, -0.1, 0.1)).astype(bf16),
                "w_gate": jax.random.uniform(k[1], (HIDDEN, INNER), f32, -a_in, a_in).astype(bf16),
                "w_up": jax.random.uniform(k[2], (HIDDEN, INNER), f32, -a_in, a_in).astype(bf16),
                "w_down": jax.random.uniform(k[3], (INNER, HIDDEN), f32, -a_out, a_out).astype(bf16)}

    maker = jax.jit(layer)
    base = new_key(jax, WEIGHT_SEED)
    params = []
    for i in range(LAYERS):
        p = maker(jax.random.fold_in(base, i))
        for v in p.values():
            v.block_until_ready()
        params.append(p)
    return params


def new_key(jax, seed):
    """jax.random.key where this jax has it, else the older PRNGKey."""
    fn = getattr(jax.random, "key", None) or jax.random.PRNGKey
    return fn(seed)


def forward_fn(jax, jnp):
    """The jitted forward: params (the list of layer dicts), x (batch, tokens, HIDDEN)."""
    def forward(params, x):
        for p in params:
            h = x.astype(jnp.float32)
            h = h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + 1e-6)
            h = h.astype(jnp.bfloat16) * p["scale"]
            x = x + (jax.nn.gelu(h @ p["w_gate"]) * (h @ p["w_up"])) @ p["w_down"]
        return x
    return jax.jit(forward)


def same_bits(a, b):
    import numpy as np

    return a.shape == b.shape and a.dtype == b.dtype and \
        np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


def compare(out, ref_path):
    """Each array of the reference against ours, bitwise; as cases.compare: per key
    equal, and the largest difference and the first differing row (index on the first
    axis: the step) where they differ."""
    import numpy as np

    with np.load(ref_path) as z:
        ref = {k: z[k] for k in z.files}
    keys, equal = {}, True
    for k in sorted(set(ref) | set(out)):
        a, b = ref.get(k), out.get(k)
        if a is None or b is None:
            keys[k] = {"equal": False, "why": "missing in " + ("ours" if b is None else "the reference")}
            equal = False
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            keys[k] = {"equal": False, "why": f"shape/dtype {a.shape} {a.dtype} vs {b.shape} {b.dtype}"}
            equal = False
            continue
        eq = same_bits(a, b)
        d = {"equal": eq}
        if not eq:
            d["max_abs_diff"] = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            if a.ndim >= 2:
                rows = [i for i in range(a.shape[0]) if not same_bits(a[i], b[i])]
                d["first_differing_row"] = rows[0] if rows else None
        keys[k] = d
        equal = equal and eq
    return {"equal": equal, "keys": keys}


def save(out, path):
    """np.savez to path exactly (given a file name, numpy would add .npz to it); a
    process cut short leaves no partial file under that name."""
    import numpy as np

    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        np.savez(f, **out)
    os.replace(tmp, path)


def h2d_separately():
    """ftbench.h2d_gbps in a separate python3 (torch's CUDA context apart from XLA's);
    None where that fails (no torch there, no memory left)."""
    code = ("import sys; sys.path.insert(0, %r); from ftbench import h2d_gbps; print(h2d_gbps())"
            % os.path.dirname(HERE))
    try:
        p = subprocess.run(["python3", "-c", code], capture_output=True, text=True, timeout=180)
        lines = p.stdout.strip().splitlines()
        if p.returncode == 0 and lines:
            return float(lines[-1])
        print(f"jax_case: h2d: rc {p.returncode}: {p.stderr.strip()[-300:]}", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - the report then uses the shim's figure
        print(f"jax_case: h2d: {e!r}", file=sys.stderr)
    return None


def write_json(path, res):
    line = json.dumps(res, default=str)
    with open(path, "w") as f:
        f.write(line + "\n")
    return line


def run_case(a, run):
    """Builds the weights and runs the workload; the outputs into run.out."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    t = cases.now()
    dev = jax.devices()[0]
    run.res.update(device=getattr(dev, "device_kind", str(dev)), platform=dev.platform,
                   backend_s=round(cases.now() - t, 2))
    try:
        run.res["platform_version"] = dev.client.platform_version
    except Exception:  # noqa: BLE001 - informative only
        pass
    if dev.platform != "gpu":
        raise RuntimeError(f"jax runs on {dev.platform} ({dev}), not on a GPU")
    t = cases.now()
    params = make_params(jax, jnp)
    weights = sum(int(v.nbytes) for p in params for v in p.values())
    run.res.update(load_s=round(cases.now() - t, 2), ready_s=round(cases.now(), 2), weights_bytes=weights,
                   weight_arrays=sum(len(p) for p in params), layers=LAYERS, hidden=HIDDEN, inner=INNER,
                   xla_memory_after_load=memory_stats(dev))
    # what is known so far, should the process die in XLA (an abort leaves no JSON)
    write_json(a.json, dict(run.res, partial=True))
    fwd = forward_fn(jax, jnp)
    f32 = jnp.float32
    n = a.warmup + a.steps
    kd, kp = jax.random.split(new_key(jax, INPUT_SEED))
    xd = jax.random.normal(kd, (n, 1, DECODE_TOKENS, HIDDEN), f32).astype(jnp.bfloat16)
    dec_in = [xd[s] for s in range(n)]
    pre_in = jax.random.normal(kp, (PREFILL_BATCH, PREFILL_TOKENS, HIDDEN), f32).astype(jnp.bfloat16)
    for x in dec_in + [pre_in]:
        x.block_until_ready()
    del xd
    r, outs = {}, []

    def decode_step(s):
        def fn():
            y = fwd(params, dec_in[s])
            y.block_until_ready()
            outs.append(y)
        return fn
    cases.timed_steps(run, r, "main", "decode", a.warmup, a.steps, decode_step)
    run.usage("ft_usage_after_main.decode")
    run.out["jax.decode_out"] = np.stack([np.asarray(y[0].astype(f32)) for y in outs])
    outs.clear()

    last, full = [], [None]

    def keep_last():
        if full[0] is not None:
            last.append(np.asarray(full[0][:, -1, :].astype(f32)))

    def prefill_step(s):
        keep_last()  # the previous step's last position, outside the timed step

        def fn():
            full[0] = None  # the previous output freed before the call
            y = fwd(params, pre_in)
            y.block_until_ready()
            full[0] = y
        return fn
    cases.timed_steps(run, r, "main", "prefill", cases.PREFILL_WARMUP, cases.PREFILL_ITERS, prefill_step)
    run.usage("ft_usage_after_main.prefill")
    keep_last()
    r["prefill_iterations_equal"] = bool(all(same_bits(last[0], x) for x in last[1:]))
    run.out["jax.prefill_last"] = np.stack(last)
    run.out["jax.prefill_full"] = np.asarray(full[0].astype(f32))
    full[0] = None
    r["compile_decode_s"] = round(r["decode_warmup_ms"][0] / 1e3, 2) if r.get("decode_warmup_ms") else None
    r["compile_prefill_s"] = round(r["prefill_warmup_ms"][0] / 1e3, 2) if r.get("prefill_warmup_ms") else None
    run.res.setdefault("phases", {})["main"] = r
    run.res["xla_memory_end"] = memory_stats(dev)


def main():
    signal.signal(signal.SIGTERM, cases.on_sigterm)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("case", choices=CASES)
    ap.add_argument("--out", required=True, help="the outputs (numpy .npz)")
    ap.add_argument("--json", default=None, help="the results (default: OUT's stem + .json)")
    ap.add_argument("--ref", default=None, help="the reference outputs to compare with")
    ap.add_argument("--steps", type=int, default=2 if TINY else 12, help="timed decode steps")
    ap.add_argument("--warmup", type=int, default=8 if TINY else 10, help="decode warm-up steps")
    ap.add_argument("--h2d", action="store_true", help="time 1 GiB pinned host-to-device copies")
    ap.add_argument("--work", default=os.environ.get("CONF_WORK", "/tmp/ft_conf"), help="unused (cases.py's)")
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    a.json = a.json or os.path.splitext(a.out)[0] + ".json"

    env = setup_env(a.case)
    # Before jax starts its backend: the idle figure is the GPU's use before this process.
    # Each step blocks on its own result: no device-wide synchronisation around it.
    run = cases.Run(a.case, sync=lambda: None)
    run.res.update(xla_env=env, autotune="fixed" if cases.autotune_fixed() else "free",
                   steps_timed=a.steps, warmup=a.warmup, prefill_tokens=PREFILL_TOKENS,
                   prefill_batch=PREFILL_BATCH, decode_tokens=DECODE_TOKENS)
    rc = 0
    try:
        try:
            import jax
            import jaxlib
            import numpy as np
        except ImportError as e:
            run.res.update(skipped=f"no jax ({type(e).__name__}: {e})", weights_bytes=0)
            print(f"jax_case: skipped, no jax: {e}", file=sys.stderr)
        else:
            run.res.update(import_s=round(cases.now(), 2),
                           versions={"jax": jax.__version__, "jaxlib": getattr(jaxlib, "__version__", None),
                                     "numpy": np.__version__})
            run_case(a, run)
            run.res["end_s"] = round(cases.now(), 2)
            save(run.out, a.out)
            if a.ref:
                run.res["compare"] = compare(run.out, a.ref) if os.path.exists(a.ref) else None
            if a.h2d:
                run.res["h2d_gbps"] = h2d_separately()
    except BaseException as e:  # noqa: BLE001 - recorded in the JSON, then exit 1
        run.res["error"] = f"{type(e).__name__}: {e}"
        run.res["traceback"] = traceback.format_exc()[-4000:]
        traceback.print_exc()
        rc = 1
    run.res["first_streamed"] = run.first_streamed
    run.res["steps"] = run.steps
    run.res.update(run.watch.summary())
    run.usage("ft_usage_end")
    run.out.clear()
    gc.collect()
    print(write_json(a.json, run.res))
    sys.stdout.flush()
    return rc


if __name__ == "__main__":
    sys.exit(main())
