"""Offload benchmark: a transformers Llama of about 13 GB of bf16 weights (32 layers,
hidden 4096, random weights from a config, no download) run all resident, under
FlexTensor with a device-memory budget, and with accelerate's CPU offload at the same
budget. Timings of a decode step, a prefill and a greedy generate; the outputs are
saved so that the runs can be compared bitwise (bench/offload.sh drives it).

    python3 bench/offload_bench.py make OUT.json [--layers 32] [--hidden 4096] \
        [--weights /dev/shm/ft_bench_weights.pt]
    python3 bench/offload_bench.py plain|shim|accelerate OUT.json [--layers 32] \
        [--hidden 4096] [--budget-gib 4.5] [--weights ...] [--warmup 8] [--iters 10] \
        [--no-generate] [--tensors OUT.pt] [--turns DIR,I,N] [--barrier DIR,I,N]

make: builds the model on the CPU with deterministic random weights (1-D parameters
1.0, the others (rand - 0.5) * 0.04 from a seeded generator, parameter by parameter,
as bench/llama_forward.py does) and torch.saves its state_dict to --weights, once.

plain, shim: the model is built on the meta device, loaded from --weights (mmap) and
copied to the GPU with model.to("cuda"). shim is the same script as plain; the driver
starts it with FlexTensor preloaded (LD_PRELOAD, FT_GPU_MEM_LIMIT), and FlexTensor
learns the pass over the first (warm-up) forwards.

accelerate: the same model dispatched by accelerate (infer_auto_device_map with
max_memory {0: --budget-gib, "cpu": 120GiB}, no split inside a LlamaDecoderLayer, then
dispatch_model): the layers mapped to "cpu" are copied to the GPU by accelerate's hooks
at each forward.

Workload, the same in every mode, inputs from a seeded generator:
  decode   forward of input_ids (1, 1), use_cache=False: --warmup forwards, then --iters
           timed ones (median and min ms); logits of the last one saved.
  prefill  forward of input_ids (8, 512), use_cache=False: min(2, --warmup) warm-up,
           min(5, --iters) timed; the last position's logits of the last one saved.
  generate model.generate of a (1, 16) prompt, 32 new tokens, greedy; the new token ids
           saved (skipped with --no-generate).

The tensors go to --tensors (default OUT.json's stem + .pt): a dict with decode_logits,
prefill_logits (float, cpu) and tokens (a list, or None). One JSON line with the
timings (ms), the parameter bytes and the memory figures is printed and written to
OUT.json; decode_t0/decode_t1 and prefill_t0/prefill_t1 are the wall-clock seconds
(time.time()) at which the timed steps began and ended, so that a sampler outside the
process can tell its steady state (bench/shm_procs.sh). --barrier DIR,I,N makes the N
processes started with it wait for each other before the timed decode steps and again
before the timed prefills (ftbench.Barrier), so that they stream at once.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
from transformers import LlamaForCausalLM

from ftbench import Barrier, Turns, fill_random, ft_usage, gpu_used_mib, h2d_gbps, llama_config, repeat_forwards, timed

WEIGHT_SEED = 1234
INPUT_SEED = 4321


def empty_model(cfg):
    """The model in bf16 on the CPU, storage allocated but not written."""
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    # dtype first, on meta: to_empty then allocates bf16 storage only (no fp32 copy)
    return model.to(torch.bfloat16).to_empty(device="cpu")


def param_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


def make(a, cfg):
    t0 = time.time()
    model = empty_model(cfg)
    fill_random(model, torch.Generator().manual_seed(WEIGHT_SEED))
    t_build = time.time() - t0
    t0 = time.time()
    os.makedirs(os.path.dirname(os.path.abspath(a.weights)), exist_ok=True)
    tmp = a.weights + ".tmp"
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, a.weights)  # a file at --weights is always complete
    res = {"mode": "make", "param_bytes": param_bytes(model), "layers": a.layers,
           "hidden": a.hidden, "weights": a.weights, "build_s": round(t_build, 2),
           "save_s": round(time.time() - t0, 2)}
    return res


def load(a, cfg):
    model = empty_model(cfg)
    sd = torch.load(a.weights, mmap=True, weights_only=True, map_location="cpu")
    model.load_state_dict(sd, strict=True, assign=True)
    del sd
    model.model.rotary_emb.__init__(config=cfg)  # inv_freq: non-persistent, recompute
    model.eval()
    return model


def dispatch_accelerate(model, budget_bytes):
    import inspect

    from accelerate import dispatch_model, infer_auto_device_map

    device_map = infer_auto_device_map(model, max_memory={0: budget_bytes, "cpu": "120GiB"},
                                       no_split_module_classes=["LlamaDecoderLayer"])
    count, nbytes = {"gpu": 0, "cpu": 0, "other": 0}, {"gpu": 0, "cpu": 0, "other": 0}
    for name, dev in device_map.items():
        k = "cpu" if dev == "cpu" else "other" if dev == "disk" else "gpu"
        count[k] += 1
    for pname, p in model.named_parameters():  # each parameter under its longest key
        keys = [n for n in device_map if n == "" or pname == n or pname.startswith(n + ".")]
        if keys:
            dev = device_map[max(keys, key=len)]
            nbytes["cpu" if dev == "cpu" else "other" if dev == "disk" else "gpu"] += \
                p.numel() * p.element_size()
    kw = {}
    skip = getattr(model, "_skip_keys_device_placement", None)
    if skip is not None and "skip_keys" in inspect.signature(dispatch_model).parameters:
        kw["skip_keys"] = skip
    model = dispatch_model(model, device_map=device_map, main_device=0, **kw)
    model.hf_device_map = device_map
    info = {"accelerate_modules": count, "accelerate_bytes": nbytes,
            "accelerate_device_map": {k: str(v) for k, v in device_map.items()}}
    return model, info


def run_forwards(model, ids, warmup, iters, last_only, cpu_ms=None, turns=None, on_steady=None):
    """warmup + iters forwards of ids; returns (last logits on the cpu, warm-up ms,
    timed ms, whether every forward's logits equal the first's). on_steady() runs
    once, before the first timed forward."""
    def step():
        lg = model(input_ids=ids, use_cache=False).logits
        # last_only: keep a copy of the last position only, so that the full logits
        # (8 x 512 x 32000 bf16, 262 MB) are freed before the next forward
        return lg[:, -1, :].clone() if last_only else lg
    return repeat_forwards(step, warmup, iters, on_steady=on_steady, cpu_ms=cpu_ms, turns=turns)


def context_mib(idle):
    """Device memory the process holds outside PyTorch's allocator (the context and the
    libraries' code) after a small bf16 product and attention: in use less idle less
    reserved."""
    w = torch.ones(256, 256, dtype=torch.bfloat16, device="cuda")
    torch.nn.functional.scaled_dot_product_attention(
        w.view(1, 1, 256, 256), w.view(1, 1, 256, 256), w.view(1, 1, 256, 256), is_causal=True)
    torch.cuda.synchronize()
    used = gpu_used_mib()
    r = None if used is None or idle is None else used - idle - torch.cuda.memory_reserved() / 1048576
    del w
    return None if r is None else round(r, 1)


def bench(a, cfg):
    idle = gpu_used_mib()
    ctx = context_mib(idle)
    t0 = time.time()
    model = load(a, cfg)
    res = {"mode": a.mode, "param_bytes": param_bytes(model), "layers": a.layers,
           "hidden": a.hidden, "load_s": round(time.time() - t0, 2), "context_mib": ctx}
    t0 = time.time()
    if a.mode == "accelerate":
        budget = int(a.budget_gib * (1 << 30))
        res["budget_bytes"] = budget
        model, info = dispatch_accelerate(model, budget)
        res.update(info)
    else:
        model = model.to("cuda")
    torch.cuda.synchronize()
    res["to_device_s"] = round(time.time() - t0, 2)

    gen = torch.Generator().manual_seed(INPUT_SEED)
    dec_ids = torch.randint(0, cfg.vocab_size, (1, 1), generator=gen).to("cuda")
    pre_ids = torch.randint(0, cfg.vocab_size, (8, 512), generator=gen).to("cuda")
    prompt = torch.randint(0, cfg.vocab_size, (1, 16), generator=gen).to("cuda")

    tensors = {"decode_logits": None, "prefill_logits": None, "tokens": None}
    barrier = Barrier(a.barrier) if a.barrier else None

    def steady(phase):
        """Before phase's first timed step: the barrier, then the wall-clock start."""
        def go():
            if barrier is not None:
                waited, ok = barrier.wait(phase)
                res.update({f"{phase}_barrier_s": waited, f"{phase}_barrier_all": ok})
            res[f"{phase}_t0"] = time.time()
        return go

    with torch.no_grad():
        cpu = []
        turns = Turns(a.turns) if a.turns else None
        lg, warm, times, eq = run_forwards(model, dec_ids, a.warmup, a.iters, last_only=False, cpu_ms=cpu,
                                           turns=turns, on_steady=steady("decode"))
        res["decode_t1"] = time.time()
        tensors["decode_logits"] = lg
        res.update(decode_warmup_ms=warm, decode_ms=times, decode_cpu_ms=cpu,
                   decode_cpu_ms_median=round(statistics.median(cpu), 3),
                   decode_ms_median=round(statistics.median(times), 3),
                   decode_ms_min=min(times), decode_iterations_equal=eq)
        res["ft_usage_after_decode"] = ft_usage()

        pw, pi = min(2, a.warmup), min(5, a.iters)
        lg, warm, times, eq = run_forwards(model, pre_ids, pw, pi, last_only=True, turns=turns,
                                           on_steady=steady("prefill"))
        res["prefill_t1"] = time.time()
        if turns is not None:
            turns.finish()
        tensors["prefill_logits"] = lg
        res.update(prefill_warmup_ms=warm, prefill_ms=times,
                   prefill_ms_median=round(statistics.median(times), 3),
                   prefill_ms_min=min(times), prefill_iterations_equal=eq)
        res["ft_usage_after_prefill"] = ft_usage()

        if not a.no_generate:
            seq, ms = timed(lambda: model.generate(
                input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=32,
                do_sample=False, pad_token_id=0))
            tensors["tokens"] = seq[0, prompt.shape[1]:].tolist()
            res.update(generate_ms=round(ms, 3), generate_tokens=len(tensors["tokens"]))

    if a.mode == "plain":
        res["h2d_gbps"] = h2d_gbps()
    free_b, total_b = torch.cuda.mem_get_info()
    # what the process holds outside the budget once every kernel has run (modules load
    # lazily): in use less what FlexTensor holds under it (or PyTorch's reserved)
    torch.cuda.synchronize()
    used, usage = gpu_used_mib(), ft_usage()
    held = usage["total"] if usage else torch.cuda.memory_reserved()
    res["outside_mib"] = None if used is None or idle is None else round(used - idle - held / 1048576, 1)
    res.update(max_memory_allocated=torch.cuda.max_memory_allocated(),
               max_memory_reserved=torch.cuda.max_memory_reserved(),
               mem_get_info=[free_b, total_b], ft_usage=ft_usage(),
               device=torch.cuda.get_device_name(0),
               versions={"torch": torch.__version__, "transformers": _version("transformers"),
                         "accelerate": _version("accelerate")})
    torch.save(tensors, a.tensors)
    res["tensors"] = a.tensors
    return res


def _version(mod):
    try:
        return __import__(mod).__version__
    except Exception:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["make", "plain", "shim", "accelerate"])
    ap.add_argument("out", help="OUT.json")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--budget-gib", type=float, default=4.5)
    ap.add_argument("--weights", default="/dev/shm/ft_bench_weights.pt")
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--no-generate", action="store_true")
    ap.add_argument("--tensors", default=None, help="default: OUT's stem + .pt")
    ap.add_argument("--turns", default=None, metavar="DIR,I,N",
                    help="take each timed step in turn with N-1 other processes "
                         "(ftbench.Turns; bench/overhead.sh LOCKSTEP=1)")
    ap.add_argument("--barrier", default=None, metavar="DIR,I,N",
                    help="wait for the N-1 other processes before the timed decode steps and "
                         "before the timed prefills (ftbench.Barrier; bench/shm_procs.sh)")
    a = ap.parse_args()
    if a.iters < 1 or a.warmup < 0:
        ap.error("--iters must be >= 1 and --warmup >= 0")
    if a.tensors is None:
        a.tensors = os.path.splitext(a.out)[0] + ".pt"

    cfg = llama_config(a.layers, a.hidden)
    res = make(a, cfg) if a.mode == "make" else bench(a, cfg)
    line = json.dumps(res)
    with open(a.out, "w") as f:
        f.write(line + "\n")
    print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
