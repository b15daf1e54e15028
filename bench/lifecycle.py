"""A program's life under FlexTensor, for #11's figures (bench/lifecycle.sh drives it):
the time from the process's start to each decode step (so to the first streamed one),
and, with --sleep, a sleep/wake cycle through the Python module (flextensor.release,
flextensor.resume) measured by NVML.

    python3 bench/lifecycle.py OUT.json [--layers 32] [--hidden 4096] \
        [--weights /dev/shm/ft_bench_weights.pt] [--steps 12] [--sleep] [--timing]

The model is offload_bench.py's (built on meta, loaded from --weights by mmap, then
.to("cuda")); --weights must exist (offload_bench.py make). The workload is --steps
decode forwards of a (1, 1) input, use_cache=False, each synchronised and stamped with
the seconds since the process started (from /proc, so the interpreter's start and
imports count) and with FlexTensor's state after it (flextensor.memory_usage():
planned or not, bytes in host memory). The first step after which FlexTensor has a plan
is the first streamed step.

--sleep, after the steps: NVML's device memory in use, then flextensor.release() timed,
NVML again, flextensor.resume() timed, NVML again, then one decode step timed and its
logits compared bitwise with the last step's before the sleep.

--timing: flextensor.offload_timing() after the steps (per unit bytes, copy time,
overlap, stalls, hits and misses), summed into the JSON.

The last step's logits go to OUT.json's stem + .pt; one JSON line is printed and written
to OUT.json.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))


def proc_start():
    """This process's start, epoch seconds, from /proc/self/stat's starttime."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return time.time() - (up - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.time()


T0 = proc_start()

import torch  # noqa: E402

import flextensor  # noqa: E402
from ftbench import gpu_used_mib, llama_config, timed  # noqa: E402
from offload_bench import INPUT_SEED, load, param_bytes  # noqa: E402


def since():
    return round(time.time() - T0, 3)


def usage():
    u = flextensor.memory_usage()
    if u is None:
        return None
    return {"planned": u.planned, "unmapped": u.unmapped_bytes, "slots": u.slots_bytes,
            "resident": u.resident_bytes, "total": u.total_bytes, "budget": u.budget_bytes}


def step(model, ids):
    lg, ms = timed(lambda: model(input_ids=ids, use_cache=False).logits)
    return lg, round(ms, 3)


def sleep_wake(model, ids, before):
    res = {}
    torch.cuda.synchronize()
    res["nvml_before_mib"] = gpu_used_mib()
    res["release_ok"], ms = timed(flextensor.release)
    res["release_s"] = round(ms / 1000, 3)
    res["usage_released"] = usage()
    res["nvml_released_mib"] = gpu_used_mib()
    torch.cuda.empty_cache()  # what a sleeping server also gives back: its cached activations
    res["nvml_released_empty_cache_mib"] = gpu_used_mib()
    res["resume_ok"], ms = timed(flextensor.resume)
    res["resume_s"] = round(ms / 1000, 3)
    res["nvml_resumed_mib"] = gpu_used_mib()
    lg, ms = step(model, ids)
    res["step_after_resume_ms"] = ms
    lg2, ms2 = step(model, ids)
    res["second_step_after_resume_ms"] = ms2
    res["logits_equal_after_resume"] = bool(torch.equal(lg.float().cpu(), before)
                                            and torch.equal(lg2.float().cpu(), before))
    res["usage_after"] = usage()
    return res


def timing_summary():
    r = flextensor.offload_timing()
    if r is None:
        return None
    keys = ("streamed_bytes", "loads", "hits", "misses", "bytes_in", "bytes_out", "unloads",
            "transfer_ns", "overlap_ns", "compute_ns", "stall_ns")
    streamed = [u for u in r.units if u.streamed]
    out = {"passes": r.passes, "passes_lost": r.passes_lost,
           "mean_step_ms": round(r.step_ns_total / r.passes / 1e6, 3) if r.passes else None,
           "predicted_step_ms": round(r.predicted_step_ns / 1e6, 3),
           "stall_ms": round(r.stall_ns / 1e6, 3), "units": len(r.units),
           "streamed_units": len(streamed)}
    out["streamed_sum"] = {k: sum(getattr(u, k) for u in streamed) for k in keys}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--weights", default="/dev/shm/ft_bench_weights.pt")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--sleep", action="store_true")
    ap.add_argument("--timing", action="store_true")
    a = ap.parse_args()
    res = {"label": os.environ.get("LIFECYCLE_LABEL", ""), "ft_enabled": flextensor.enabled(),
           "imports_s": since(), "layers": a.layers, "hidden": a.hidden}
    cfg = llama_config(a.layers, a.hidden)
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    res["context_s"] = since()
    model = load(a, cfg)
    res["param_bytes"] = param_bytes(model)
    res["loaded_cpu_s"] = since()
    model = model.to("cuda")
    torch.cuda.synchronize()
    res["on_device_s"] = since()
    gen = torch.Generator().manual_seed(INPUT_SEED)
    ids = torch.randint(0, cfg.vocab_size, (1, 1), generator=gen).to("cuda")
    steps = []
    first = None
    with torch.no_grad():
        lg = None
        for i in range(a.steps):
            lg, ms = step(model, ids)
            u = usage()
            steps.append({"i": i, "ms": ms, "end_s": since(), "usage": u})
            if first is None and u is not None and u["planned"]:
                first = i
        before = lg.float().cpu()
        res["steps"] = steps
        res["first_planned_step"] = first
        if first is not None:
            res["first_streamed_end_s"] = steps[first]["end_s"]
            res["first_streamed_ms"] = steps[first]["ms"]
        res["first_step_end_s"] = steps[0]["end_s"]
        tail = sorted(s["ms"] for s in steps[-min(5, len(steps)):])
        res["steady_ms"] = tail[len(tail) // 2]
        if a.timing:
            res["timing"] = timing_summary()
        if a.sleep:
            res["sleep"] = sleep_wake(model, ids, before) if flextensor.enabled() else None
    torch.save({"decode_logits": before}, os.path.splitext(a.out)[0] + ".pt")
    res["end_s"] = since()
    line = json.dumps(res)
    print(line, flush=True)
    with open(a.out, "w") as f:
        f.write(line + "\n")


if __name__ == "__main__":
    main()
