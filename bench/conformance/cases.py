"""The conformance cases: one real-program pattern each, a transformers model with
deterministic random weights (configs only, no download), run the same way without
FlexTensor and under `ft-run --gpu-mem` (bench/conformance/run.sh drives it).

    python3 bench/conformance/cases.py CASE --out OUT.pt [--json OUT.json] [--ref REF.pt]
        [--steps N] [--warmup N] [--h2d] [--work DIR]

CASE (the loading path or the program shape under test; every model in bf16):
  gpu_built              `with torch.device("cuda"): LlamaForCausalLM(config)` (default
                         dtype bf16 while it is built), then every weight refilled on
                         the GPU from a seeded CUDA generator: thousands of init kernels
  gpu_built_pad          as gpu_built, pad_token_id=0: the embedding's init is normal_,
                         then its padding row zeroed by another kernel
  expandable             as cpu_built, with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
                         (PyTorch maps its segments itself: cuMemCreate, cuMemMap); in
                         CASE all the allocator is set up already: it runs as cpu_built
  pretrained_device_map  from_pretrained(dir, dtype=bf16, device_map="cuda") of a
                         checkpoint save_pretrained'd earlier in the same run (--work)
  pretrained_to          from_pretrained(dir, dtype=bf16) on the CPU, then .to("cuda")
  cpu_built              built on the CPU (meta, to_empty, seeded fill), then .to("cuda")
  tied                   as cpu_built, tie_word_embeddings=True (lm_head = embed_tokens)
  moe                    MixtralForCausalLM, 8 experts, 2 per token, as cpu_built
  generate               as cpu_built, model.generate() of 64 new tokens, greedy, twice
  two_models             two different Llamas (as cpu_built), a forward of each in turn
  free_load              Llama A runs, is deleted (del, gc, empty_cache), then a
                         different Llama B is built and runs
  profiler               as cpu_built; torch.profiler.profile(activities=[CUDA]) around
                         5 forwards right after loading (FlexTensor discovering: it
                         hands CUPTI over), 10 forwards unprofiled (FlexTensor plans
                         and streams), then around 5 more (streaming); each window's
                         CUDA events counted: the application's kernels by name, ft_*
                         kernels (FlexTensor's), Memcpy and Memset events
  profiler_late          as profiler, one window only, after 40 forwards (streaming)
  graph                  torch.cuda.graph capture and replays (graph_replays)
  compiled               as cpu_built, then torch.compile(model, dynamic=False) (default
                         mode, Inductor): decode steps without a KV cache (compiled_steps)
  compiled_ro            the same with mode="reduce-overhead" (CUDA graphs through
                         cudagraph trees)
(jax and jax_prealloc are bench/conformance/jax_case.py's.)

The compiled cases compile in their first call of each shape (the first warm-up step).
CONF_AUTOTUNE=fixed (the default) turns Inductor's deterministic mode on (kernel
configurations from heuristics, never from benchmarks whose timings could go the other
way under FlexTensor); CONF_AUTOTUNE=free leaves Inductor's defaults. run.sh gives each
process an empty Inductor and Triton cache (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR).

Workload (all but generate, graph, the profiler and compiled cases), inputs from a
seeded generator:
  prompt   a (1, 16) forward with use_cache=True (its last logits kept)
  decode   one token at a time with the KV cache (past_key_values of the previous
           step): --warmup steps, then --steps timed ones
  prefill  a (1, 512) forward, use_cache=False: 2 warm-up, 3 timed
Every step is synchronised before and after (torch.cuda.synchronize) and timed; each
records its start and end in seconds since the process started (CONF_T0 from run.sh,
else the kernel's start time of this process) and, after it, FlexTensor's
ft_get_gpu_memory_usage (None without FlexTensor): whether the plan was made and the
bytes of streamed weights (unmapped + slots). The first step that ends with a plan
that streams is the "first streamed step".

Outputs saved to --out with torch.save (a dict of CPU tensors): every decode step's
last-position logits (bf16), every prefill's last-position logits and the last
prefill's full logits, the generated token ids. With --ref (the run without
FlexTensor), each tensor is compared bitwise in this process and the result goes to
the JSON. --h2d (the run without FlexTensor) also times 1 GiB pinned host-to-device
copies (ftbench.h2d_gbps): the link bound's bandwidth.

The device memory is sampled every 5 ms by ftbench.MemWatch (NVML: the GPU's memory
in use less its use before this process, and FlexTensor's count through its control
API). The JSON (--json, and the last line of stdout) holds the timings, the steps,
the memory figures and the comparison. CONF_TINY=1: tiny configs and few steps, to
smoke-test the pipeline in seconds; CASE `all` runs every case but the compiled ones
in this one process (no reference, each compared with itself): every case's Python path
in one start-up; CASE `all_compiled` the compiled ones. A SIGTERM (run.sh's time limit)
still writes the JSON of what ran.

The decode logits' row 0 is the prompt's last position, row r the decode step r-1
(warm-up steps included); in the compiled cases, which have no prompt, row r is the
decode step r.
"""
import argparse
import gc
import hashlib
import json
import os
import shutil
import signal
import statistics
import sys
import time
import traceback


def _proc_start():
    """This process's start, epoch seconds, from /proc (its start in clock ticks since
    boot against the uptime); now where /proc cannot tell."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22, starttime; fields[0] is field 3
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return time.time() - (up - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.time()


# run.sh sets CONF_T0 just before it starts the process (ft-run's start included)
T0 = float(os.environ.get("CONF_T0") or 0) or _proc_start()
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # bench/, for ftbench
from ftbench import MemWatch, ft_usage, gpu_used_mib, h2d_gbps, llama_config  # noqa: E402

TINY = os.environ.get("CONF_TINY", "") not in ("", "0")
INPUT_SEED = 4321
PROMPT = 16
PREFILL = 64 if TINY else 512
PREFILL_WARMUP, PREFILL_ITERS = (1, 1) if TINY else (2, 3)
GEN_TOKENS = 8 if TINY else 64
POOL = (1 << 16) + 97 if TINY else (1 << 24) + 4099  # the CPU fill's pool, elements

# Model shapes. Dense: ftbench.llama_config (128-wide heads, MLP 2.6875x, vocab 32000).
# Sizes in bf16: dense 3.05 GB (28 x 99.6 MB layers, 131 MB embeddings, 131 MB head),
# big_b 2.80 GB, small_a 1.66 GB, small_b 1.10 GB, moe 3.42 GB (16 layers of 197 MB,
# 176 MB of them experts).
SHAPES = {
    "dense": dict(layers=28, hidden=2048),
    "big_b": dict(layers=16, hidden=2560),
    "small_a": dict(layers=14, hidden=2048),
    "small_b": dict(layers=16, hidden=1536),
    "moe": dict(layers=16, hidden=2048, inter=1792, kv=4),
}
TINY_SHAPES = {
    "dense": dict(layers=2, hidden=256),
    "big_b": dict(layers=3, hidden=256),
    "small_a": dict(layers=2, hidden=256),
    "small_b": dict(layers=2, hidden=128),
    "moe": dict(layers=2, hidden=256, inter=256, kv=1),
}
VOCAB = 1024 if TINY else 32000


def now():
    return time.time() - T0


def dense_config(shape, **extra):
    s = (TINY_SHAPES if TINY else SHAPES)[shape]
    return llama_config(s["layers"], s["hidden"], vocab_size=VOCAB, **extra)


def moe_config():
    from transformers import MixtralConfig

    s = (TINY_SHAPES if TINY else SHAPES)["moe"]
    return MixtralConfig(hidden_size=s["hidden"], intermediate_size=s["inter"],
                         num_hidden_layers=s["layers"], num_attention_heads=s["hidden"] // 128,
                         num_key_value_heads=s["kv"], num_local_experts=8, num_experts_per_tok=2,
                         vocab_size=VOCAB, max_position_embeddings=4096, sliding_window=None,
                         tie_word_embeddings=False)


def param_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())  # tied: once


def dtype_kw(dtype):
    """from_pretrained's dtype argument: `dtype` from transformers 4.56 on, before it
    `torch_dtype` (an unknown name would go to the config and be ignored)."""
    import transformers

    try:
        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    except ValueError:
        major, minor = 5, 0
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def retie(model):
    if getattr(model.config, "tie_word_embeddings", False):
        try:
            model.tie_weights()
        except Exception as e:  # noqa: BLE001 - recorded; the check below tells
            print(f"cases: tie_weights: {e!r}", file=sys.stderr)


def is_tied(model):
    try:
        return model.get_output_embeddings().weight.data_ptr() == \
            model.get_input_embeddings().weight.data_ptr()
    except Exception:  # noqa: BLE001
        return None


def reinit_rotary(model):
    """inv_freq is a non-persistent buffer: after to_empty it holds garbage; the rotary
    modules recompute it on the CPU (as bench/offload_bench.py does)."""
    for m in model.modules():
        if type(m).__name__.endswith("RotaryEmbedding"):
            m.__init__(config=model.config)


def fill_pool(model, seed):
    """Deterministic weights on the CPU, fast: norms (1-D) at 1, every other parameter
    a run of a pool of POOL uniform values in [-0.02, 0.02) (bf16, from a seeded
    generator), from an offset of its own drawn from the same generator, wrapping
    around. Two parameters hold shifted copies of one sequence: at a given position
    they hold different pool entries (their offsets differ), so one parameter's data in
    another's place changes the outputs. ftbench.fill_random draws every element
    (seconds per GB on one core, in each of a case's four processes); this copies."""
    import torch

    g = torch.Generator().manual_seed(seed)
    pool = ((torch.rand(POOL, generator=g) - 0.5) * 0.04).to(torch.bfloat16)
    params = list(model.named_parameters())
    offs = torch.randint(0, POOL, (len(params),), generator=g).tolist()
    with torch.no_grad():
        for (_, p), off in zip(params, offs):
            if p.dim() == 1:
                p.fill_(1.0)
                continue
            flat, n, pos = p.view(-1), p.numel(), 0
            while pos < n:
                take = min(n - pos, POOL - off)
                flat[pos:pos + take].copy_(pool[off:off + take])
                pos, off = pos + take, 0


def fill_device(model, seed):
    """Deterministic weights where they lie (the GPU): norms at 1, the others uniform
    in [-0.02, 0.02) from a seeded generator on their device: one kernel each."""
    import torch

    gens = {}
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0)
                continue
            g = gens.get(p.device)
            if g is None:
                g = gens[p.device] = torch.Generator(device=p.device).manual_seed(seed)
            p.uniform_(-0.02, 0.02, generator=g)


def build_cpu(cls, cfg, seed):
    """The model in bf16 on the CPU: built on meta, storage allocated (to_empty), then
    filled (fill_pool); the rotary buffers recomputed."""
    import torch

    with torch.device("meta"):
        model = cls(cfg)
    model = model.to(torch.bfloat16).to_empty(device="cpu")
    retie(model)
    fill_pool(model, seed)
    reinit_rotary(model)
    return model.eval()


def build_gpu(cls, cfg, seed):
    """`with torch.device("cuda"): cls(cfg)` with bf16 as the default dtype while it
    is built (the constructor's init kernels run on the GPU), then fill_device."""
    import torch

    torch.manual_seed(seed)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = cls(cfg)
    finally:
        torch.set_default_dtype(old)
    fill_device(model, seed)
    return model.eval()


def checkpoint(cls, cfg, seed, work):
    """A save_pretrained directory of the cpu-built model, made once per config under
    `work` (the reference run makes it; the runs under FlexTensor reuse it)."""
    key = hashlib.sha1((cls.__name__ + cfg.to_json_string() + str(seed)).encode()).hexdigest()[:12]
    d = os.path.join(work, f"ckpt-{cls.__name__}-{key}")
    if os.path.exists(os.path.join(d, "config.json")):
        return d, False
    if os.path.exists(d):  # left incomplete by a process that was cut short
        shutil.rmtree(d, ignore_errors=True)
    model = build_cpu(cls, cfg, seed)
    tmp = f"{d}.tmp{os.getpid()}"
    model.save_pretrained(tmp)
    del model
    gc.collect()
    os.rename(tmp, d)
    return d, True


# --- recording ------------------------------------------------------------------------

class Run:
    """Every step's timing and FlexTensor state, the outputs and the JSON. sync() runs
    before and after each step: torch.cuda.synchronize unless given (jax_case.py, which
    has no torch, passes its own and blocks on each step's result instead)."""

    def __init__(self, case, sync=None):
        self.torch = None
        if sync is None:
            import torch

            self.torch, sync = torch, torch.cuda.synchronize
        self.sync = sync
        self.res = {"case": case, "tiny": TINY, "t0_source": "CONF_T0" if os.environ.get("CONF_T0") else "proc"}
        self.idle = gpu_used_mib()  # before this process's CUDA context
        self.res["idle_mib"] = self.idle
        self.watch = MemWatch(0, self.idle)
        self.watch.phase = "load"
        self.steps, self.out, self.first_streamed = [], {}, None
        self.moe = None

    def mark(self, phase, i, t_start, ms):
        u = ft_usage(before_plan=True)
        rec = {"ph": phase, "i": i, "t0": round(t_start, 3), "t1": round(now(), 3), "ms": round(ms, 3)}
        if u is not None:
            rec["plan"] = not u.get("before_plan", False)
            rec["streamed"] = u["unmapped"] + u["slots"]
            if self.first_streamed is None and rec["plan"] and rec["streamed"] > 0:
                self.first_streamed = rec
        self.steps.append(rec)

    def step(self, phase, i, fn):
        """fn() between two synchronisations; its ms; the step recorded."""
        self.watch.phase = f"{phase} {i}"
        self.sync()
        ts, t = now(), time.perf_counter()
        r = fn()
        self.sync()
        ms = (time.perf_counter() - t) * 1e3
        self.mark(phase, i, ts, ms)
        return r, ms

    def usage(self, key):
        self.res[key] = ft_usage(before_plan=True)


def med(xs):
    return round(statistics.median(xs), 3) if xs else None


class MoeWatch:
    """Which experts each MoE block's router picked, over the steps while `on`: a
    forward hook on every block's `gate` (transformers 5: a router returning (logits,
    scores, indices); 4.x: a Linear returning logits, top-k taken here) keeps its
    output; used() counts the distinct experts per block per step afterwards, outside
    the timed steps (no sync inside them)."""

    def __init__(self, model):
        cfg = model.config
        self.E, self.k = cfg.num_local_experts, cfg.num_experts_per_tok
        self.blocks = [m for m in model.modules() if hasattr(m, "gate") and hasattr(m, "experts")]
        self.expert_bytes = [param_bytes(b.experts) for b in self.blocks]
        self.on, self.rec = False, []
        for b in self.blocks:
            b.gate.register_forward_hook(self._hook)

    def _hook(self, mod, inp, out):
        if self.on:
            self.rec.append(out)

    def _indices(self, out):
        import torch

        if isinstance(out, (tuple, list)):
            ints = [t for t in out if torch.is_tensor(t) and not t.is_floating_point()]
            if ints:
                return ints[-1]
            out = out[0]
        return torch.topk(out.float(), self.k, dim=-1).indices

    def used(self, total_bytes):
        """(mean weight bytes a step used: every non-expert byte plus each block's
        expert bytes times the share of its experts picked, that share's mean per
        block); clears the record. None without a whole step recorded."""
        n = len(self.blocks)
        if n == 0 or len(self.rec) < n:
            self.rec = []
            return None, None
        steps = len(self.rec) // n
        used_sum, shares = 0.0, [0.0] * n
        for s in range(steps):
            for b in range(n):
                uniq = int(self._indices(self.rec[s * n + b]).reshape(-1).unique().numel())
                used_sum += self.expert_bytes[b] * uniq / self.E
                shares[b] += uniq / self.E
        self.rec = []
        all_experts = sum(self.expert_bytes)
        used = total_bytes - all_experts + used_sum / steps
        return int(used), [round(x / steps, 3) for x in shares]


# --- workloads ------------------------------------------------------------------------

def timed_steps(run, r, label, kind, warmup, iters, step):
    """warmup + iters steps of `kind` (decode, prefill), step(s) giving step s's work:
    the collector and the MoE expert count off in the warm-up and on (collected first,
    then disabled: no collector pause inside a timed step) for the timed ones. Into r:
    {kind}_warmup_ms, {kind}_ms, {kind}_ms_median and, for MoE, used_bytes_{kind} and
    expert_share_{kind}."""
    warm, timed = [], []
    for s in range(warmup + iters):
        fn = step(s)
        if s == warmup:
            gc.collect()
            gc.disable()
            if run.moe is not None:
                run.moe.on = True
        _, ms = run.step(f"{label}.{kind}", s, fn)
        (warm if s < warmup else timed).append(round(ms, 3))
    gc.enable()
    if run.moe is not None:
        run.moe.on = False
        r[f"used_bytes_{kind}"], r[f"expert_share_{kind}"] = run.moe.used(run.res["weights_bytes"])
    r.update({f"{kind}_warmup_ms": warm, f"{kind}_ms": timed, f"{kind}_ms_median": med(timed)})


def decode_prefill(run, models, label, warmup, iters, seed_off=0):
    """The decode and prefill workload over `models` [(name, model)], a step being one
    forward of each in turn. Outputs under "{name}.*", timings under label."""
    torch = run.torch
    gen = torch.Generator().manual_seed(INPUT_SEED + seed_off)
    prompt, toks, pre = {}, {}, {}
    for name, m in models:
        v = m.config.vocab_size
        prompt[name] = torch.randint(0, v, (1, PROMPT), generator=gen).to("cuda")
        toks[name] = torch.randint(0, v, (warmup + iters, 1), generator=gen).to("cuda")
        pre[name] = torch.randint(0, v, (1, PREFILL), generator=gen).to("cuda")
    cache = {}
    last = {name: [] for name, _ in models}
    r = {}
    with torch.no_grad():
        def prompt_fn():
            for name, m in models:
                o = m(input_ids=prompt[name], use_cache=True)
                cache[name] = o.past_key_values
                last[name].append(o.logits[:, -1, :])
        _, ms = run.step(f"{label}.prompt", 0, prompt_fn)
        r["prompt_ms"] = round(ms, 3)

        def decode_step(s):
            def fn():
                for name, m in models:
                    o = m(input_ids=toks[name][s:s + 1], past_key_values=cache[name], use_cache=True)
                    cache[name] = o.past_key_values
                    last[name].append(o.logits[:, -1, :])
            return fn
        timed_steps(run, r, label, "decode", warmup, iters, decode_step)
        run.usage(f"ft_usage_after_{label}.decode")
        for name, _ in models:
            run.out[f"{name}.decode_logits"] = torch.cat(last[name]).cpu()
        cache.clear()
        last = {name: [] for name, _ in models}

        full = {}
        def prefill_step(s):
            def fn():
                for name, m in models:
                    full[name] = None  # the previous full logits freed before the forward
                    lg = m(input_ids=pre[name], use_cache=False).logits
                    last[name].append(lg[:, -1, :].clone())
                    full[name] = lg
            return fn
        timed_steps(run, r, label, "prefill", PREFILL_WARMUP, PREFILL_ITERS, prefill_step)
        run.usage(f"ft_usage_after_{label}.prefill")
        eq = True
        for name, _ in models:
            eq = eq and all(torch.equal(last[name][0], x) for x in last[name][1:])
            run.out[f"{name}.prefill_last"] = torch.cat(last[name]).cpu()
            run.out[f"{name}.prefill_full"] = full[name].cpu()
        r["prefill_iterations_equal"] = bool(eq)
        full.clear()
    run.res.setdefault("phases", {})[label] = r
    return r


def cuda_event_names(torch, prof):
    """The names of the GPU events torch.profiler recorded: its function events on the
    CUDA device, or, where this torch lists none there, Kineto's raw events."""
    cuda = torch.autograd.DeviceType.CUDA
    names = [e.name for e in prof.events() if getattr(e, "device_type", None) == cuda]
    if not names:
        try:
            names = [e.name() for e in prof.profiler.kineto_results.events() if e.device_type() == cuda]
        except AttributeError:
            pass
    return names


def profiled_forwards(run, model, windows=(("early", 0), ("late", 10)), n=5):
    """torch.profiler around n forwards (a (1, PROMPT) input, use_cache=False) at each
    window, after `gap` unprofiled forwards. Each window's CUDA events into
    run.res["profiler"][name]: the total, FlexTensor's kernels (ft_*), Memcpy and
    Memset events, the application's kernels and their counts by name; the counts by
    name go to the outputs as well (profiler.NAME.kernels: counts in name order, and
    profiler.NAME.names: a hash of the names), so that --ref compares them bitwise with
    the run without FlexTensor. Every forward's last logits go to the outputs."""
    torch = run.torch
    from torch.profiler import ProfilerActivity, profile

    gen = torch.Generator().manual_seed(INPUT_SEED + 7)
    ids = torch.randint(0, model.config.vocab_size, (1, PROMPT), generator=gen).to("cuda")
    last, res, i = [], {}, 0

    def forward():
        last.append(model(input_ids=ids, use_cache=False).logits[:, -1, :].clone())

    with torch.no_grad():
        for name, gap in windows:
            for _ in range(gap):
                run.step("forward", i, forward)
                i += 1
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(n):
                    run.step(f"profiled.{name}", i, forward)
                    i += 1
                torch.cuda.synchronize()
            cuda = cuda_event_names(torch, prof)
            kinds = {"ft": 0, "memcpy": 0, "memset": 0}
            app = {}
            for e in cuda:
                if e.startswith("ft_"):
                    kinds["ft"] += 1
                elif e.startswith("Memcpy"):
                    kinds["memcpy"] += 1
                elif e.startswith("Memset"):
                    kinds["memset"] += 1
                else:
                    app[e] = app.get(e, 0) + 1
            names = sorted(app)
            res[name] = {"cuda_events": len(cuda), "app_kernels": sum(app.values()), "ft_kernels": kinds["ft"],
                         "memcpy": kinds["memcpy"], "memset": kinds["memset"], "kernel_names": len(names),
                         "by_name": app}
            run.out[f"profiler.{name}.kernels"] = torch.tensor([app[k] for k in names], dtype=torch.int64)
            digest = hashlib.sha1("\n".join(names).encode()).hexdigest()
            run.out[f"profiler.{name}.names"] = torch.tensor([int(digest[:15], 16)], dtype=torch.int64)
            print(f"profiler {name}: {len(cuda)} CUDA events: {res[name]['app_kernels']} application kernels "
                  f"({len(names)} names), {kinds['ft']} ft_* kernels, {kinds['memcpy']} Memcpy, "
                  f"{kinds['memset']} Memset", flush=True)
    run.out["profiler.last_logits"] = torch.cat(last).cpu()
    run.res["profiler"] = res


def graph_replays(run, model, early=3, late=40, replays=8):
    """torch.cuda.graph as serving engines use it, twice: `early` eager forwards of a
    static (1, 16) input (FlexTensor still discovering: the H200 run that died with
    cudaErrorStreamCaptureInvalidated), then torch's recipe (a warm-up forward on a side
    stream, capture of one forward) and `replays` timed replays; then `late` more eager
    forwards (planned and streaming by then) and the same again. The replays' timings
    are the decode keys of phases["early"] and phases["main"] (the report's); every replay's last
    logits and the eager forwards' go to the outputs."""
    torch = run.torch
    gen = torch.Generator().manual_seed(INPUT_SEED + 9)
    ids = torch.randint(0, model.config.vocab_size, (1, 16), generator=gen).to("cuda")
    eager_last, i = [], 0
    with torch.no_grad():
        def eager():
            eager_last.append(model(input_ids=ids, use_cache=False).logits[:, -1, :].clone())
        for label, n_eager in (("early", early), ("main", late)):
            for _ in range(n_eager):
                run.step("forward", i, eager)
                i += 1
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                model(input_ids=ids, use_cache=False)
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            t = now()
            with torch.cuda.graph(g):
                static = model(input_ids=ids, use_cache=False).logits
            torch.cuda.synchronize()
            run.res[f"capture_{label}_s"] = round(now() - t, 3)
            last, r = [], {}

            def replay(s):
                def fn():
                    g.replay()
                    last.append(static[:, -1, :].clone())
                return fn
            timed_steps(run, r, label, "decode", 2, replays, replay)
            run.usage(f"ft_usage_after_{label}.decode")
            run.out[f"graph.{label}.replay_logits"] = torch.cat(last).cpu()
            run.res.setdefault("phases", {})[label] = r
            del g, static
    run.out["graph.eager_logits"] = torch.cat(eager_last).cpu()


def autotune_fixed():
    """CONF_AUTOTUNE: `fixed` (the default) or `free`. Fixed: the compilers' kernel
    choices are the same in every process, so that a bitwise difference is
    FlexTensor's, not a benchmark's that timed two candidates the other way round.
    Free: each process autotunes as a plain program does."""
    return os.environ.get("CONF_AUTOTUNE", "fixed").strip().lower() != "free"


def inductor_determinism(torch):
    """Inductor's deterministic mode (torch._inductor.config.deterministic: kernel
    configurations from heuristics, no benchmarking) when autotune_fixed(); what
    holds: True or False, or why it cannot be set."""
    try:
        import torch._inductor.config as ic
    except Exception as e:  # noqa: BLE001 - recorded
        return f"unavailable: {e!r}"
    if not hasattr(ic, "deterministic"):
        return "unavailable in this torch"
    if autotune_fixed():
        ic.deterministic = True
    return bool(ic.deterministic)


def dynamo_counters(torch):
    """torch._dynamo's counters (graphs, graph breaks, recompilations, Inductor's
    cudagraph skips ...), as plain dicts, 40 names a kind at most."""
    try:
        from torch._dynamo.utils import counters

        return {str(k): {str(n)[:160]: int(c) for n, c in list(v.items())[:40]}
                for k, v in counters.items() if v}
    except Exception as e:  # noqa: BLE001 - a diagnostic only
        return {"error": repr(e)}


def compiled_steps(run, model, mode, warmup, iters):
    """torch.compile(model, dynamic=False[, mode=mode]) and the workload through it:
    decode steps of one token ((1, 1), no KV cache: a cache would change the input
    shapes every step, hence a recompilation or a new CUDA graph each time) and
    prefills of (1, PREFILL), use_cache=False. The inputs go through static tensors
    (the decode token is copied into one buffer). Compilation happens in the first
    call of each shape (the first warm-up step); under mode="reduce-overhead" the
    second call records the CUDA graph and later ones replay it, with
    torch.compiler.cudagraph_mark_step_begin() before each call. Each call's last
    logits are cloned at once (a graph's outputs are overwritten by its next replay).
    Outputs and keys as decode_prefill's, phase "main"."""
    import torch
    import torch._dynamo

    torch._dynamo.reset()  # CASE all_compiled: nothing from the previous case
    opts = {"dynamic": False}
    if mode:
        opts["mode"] = mode
    run.res.update(compile_options=dict(opts, mode=mode or "default"),
                   inductor_deterministic=inductor_determinism(torch),
                   autotune="fixed" if autotune_fixed() else "free",
                   inductor_cache_dir=os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
    cmodel = torch.compile(model, **opts)
    begin = getattr(torch.compiler, "cudagraph_mark_step_begin", None) if mode == "reduce-overhead" else None
    gen = torch.Generator().manual_seed(INPUT_SEED)
    v = model.config.vocab_size
    toks = torch.randint(0, v, (warmup + iters, 1), generator=gen).to("cuda")
    pre = torch.randint(0, v, (1, PREFILL), generator=gen).to("cuda")
    dec_in = torch.zeros((1, 1), dtype=torch.long, device="cuda")
    r, last, full = {}, [], [None]

    def call(ids):
        if begin is not None:
            begin()
        return cmodel(input_ids=ids, use_cache=False).logits

    with torch.no_grad():
        def decode_step(s):
            def fn():
                dec_in.copy_(toks[s:s + 1])
                last.append(call(dec_in)[:, -1, :].clone())
            return fn
        timed_steps(run, r, "main", "decode", warmup, iters, decode_step)
        run.usage("ft_usage_after_main.decode")
        run.out["model.decode_logits"] = torch.cat(last).cpu()
        last.clear()

        def prefill_step(s):
            def fn():
                full[0] = None  # the previous full logits freed before the call
                lg = call(pre)
                last.append(lg[:, -1, :].clone())
                full[0] = lg
            return fn
        timed_steps(run, r, "main", "prefill", PREFILL_WARMUP, PREFILL_ITERS, prefill_step)
        run.usage("ft_usage_after_main.prefill")
        r["prefill_iterations_equal"] = bool(all(torch.equal(last[0], x) for x in last[1:]))
        run.out["model.prefill_last"] = torch.cat(last).cpu()
        run.out["model.prefill_full"] = full[0].cpu()  # no call since: still valid
        full[0] = None
    # the first call of each shape compiled it: its time, apart
    r["compile_decode_s"] = round(r["decode_warmup_ms"][0] / 1e3, 2) if r.get("decode_warmup_ms") else None
    r["compile_prefill_s"] = round(r["prefill_warmup_ms"][0] / 1e3, 2) if r.get("prefill_warmup_ms") else None
    run.res["compile_counters"] = dynamo_counters(torch)
    run.res.setdefault("phases", {})["main"] = r
    return r


_STEP_RUN = None  # the Run a StepMark records into (a global: generate may deepcopy criteria)


def step_mark_class():
    from transformers import StoppingCriteria

    class StepMark(StoppingCriteria):
        """Called by generate() after each new token: synchronises, records the step
        (the time since the previous call) and never stops anything."""

        def __init__(self):
            self.phase, self.i, self.last, self.ts, self.no = "gen", 0, None, None, None

        def __deepcopy__(self, memo):
            return self

        def __call__(self, input_ids, scores, **kwargs):
            import torch

            torch.cuda.synchronize()
            t = time.perf_counter()
            _STEP_RUN.mark(self.phase, self.i, self.ts, (t - self.last) * 1e3)
            self.i, self.last, self.ts = self.i + 1, t, now()
            if self.no is None or self.no.shape[0] != input_ids.shape[0]:
                self.no = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
            return self.no

    return StepMark


def generate_rounds(run, model, rounds=2):
    """model.generate of GEN_TOKENS new tokens, greedy, from a (1, 16) prompt, `rounds`
    times (the first is the warm-up: FlexTensor learns in it); the token ids of each
    saved; the per-token step times of the last round (the first token's, which holds
    the prompt, left out) are the decode figure."""
    global _STEP_RUN
    torch = run.torch
    from transformers import StoppingCriteriaList

    _STEP_RUN = run
    gen = torch.Generator().manual_seed(INPUT_SEED)
    prompt = torch.randint(0, model.config.vocab_size, (1, PROMPT), generator=gen).to("cuda")
    mark = step_mark_class()()
    r = {}
    with torch.no_grad():
        for k in range(rounds):
            mark.phase, mark.i = f"gen{k}", 0
            run.watch.phase = f"gen{k}"
            torch.cuda.synchronize()
            mark.last, mark.ts = time.perf_counter(), now()
            t = time.perf_counter()
            seq = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                                 max_new_tokens=GEN_TOKENS, min_new_tokens=GEN_TOKENS, do_sample=False,
                                 pad_token_id=0, stopping_criteria=StoppingCriteriaList([mark]))
            torch.cuda.synchronize()
            r[f"gen{k}_ms"] = round((time.perf_counter() - t) * 1e3, 3)
            run.out[f"model.gen{k}_tokens"] = seq[0, PROMPT:].cpu()
            r[f"gen{k}_tokens"] = int(seq.shape[1] - PROMPT)
    per_token = [s["ms"] for s in run.steps if s["ph"] == f"gen{rounds - 1}" and s["i"] > 0]
    r.update(decode_ms=per_token, decode_ms_median=med(per_token))
    run.usage("ft_usage_after_main.decode")
    run.res.setdefault("phases", {})["main"] = r
    return r


# --- the cases ------------------------------------------------------------------------

def to_cuda(model):
    import torch

    model = model.to("cuda")
    torch.cuda.synchronize()
    return model


def case_models(a, run):
    """Builds the case's model(s) on the GPU and runs its workload."""
    import torch
    from transformers import LlamaForCausalLM, MixtralForCausalLM

    c = a.case
    t = now()
    if c in ("gpu_built", "gpu_built_pad", "cpu_built", "expandable", "tied", "generate", "pretrained_device_map",
             "pretrained_to", "moe", "profiler", "profiler_late", "graph") + COMPILED:
        extra = {"pad_token_id": 0} if c == "gpu_built_pad" else {}
        cls, cfg = LlamaForCausalLM, dense_config("dense", tie_word_embeddings=(c == "tied"), **extra)
        if c == "moe":
            cls, cfg = MixtralForCausalLM, moe_config()
        if c in ("gpu_built", "gpu_built_pad"):
            model = build_gpu(cls, cfg, {"gpu_built": 101, "gpu_built_pad": 131}[c])
        elif c.startswith("pretrained"):
            d, made = checkpoint(cls, cfg, 102, a.work)
            run.res.update(checkpoint=d, checkpoint_made=made, checkpoint_s=round(now() - t, 2))
            t = now()
            kw = dtype_kw(torch.bfloat16)
            if c == "pretrained_device_map":
                model = cls.from_pretrained(d, device_map="cuda", **kw).eval()
            else:
                model = to_cuda(cls.from_pretrained(d, **kw).eval())
        else:
            model = to_cuda(build_cpu(cls, cfg, {"cpu_built": 103, "expandable": 132, "tied": 104, "generate": 105,
                                                 "moe": 106, "profiler": 107, "profiler_late": 107,
                                                 "graph": 108, "compiled": 109, "compiled_ro": 109}[c]))
        torch.cuda.synchronize()
        run.res.update(load_s=round(now() - t, 2), ready_s=round(now(), 2),
                       weights_bytes=param_bytes(model), tied=is_tied(model),
                       dtypes=sorted({str(p.dtype) for p in model.parameters()}),
                       devices=sorted({str(p.device) for p in model.parameters()}))
        if c == "moe":
            run.moe = MoeWatch(model)
            run.res["moe_blocks"] = len(run.moe.blocks)
            run.res["expert_bytes"] = sum(run.moe.expert_bytes)
        if c == "generate":
            generate_rounds(run, model)
        elif c == "profiler":
            profiled_forwards(run, model)
        elif c == "profiler_late":
            # The profiler first starts after 40 forwards: FlexTensor has planned and
            # streams (taking CUPTI before the plan, it carries on;
            # FT_CUPTI_HANDOVER=stand-down: stands down).
            profiled_forwards(run, model, windows=(("late", 40),))
        elif c == "graph":
            graph_replays(run, model)
        elif c in COMPILED:
            compiled_steps(run, model, "reduce-overhead" if c == "compiled_ro" else None, a.warmup, a.steps)
        else:
            decode_prefill(run, [("model", model)], "main", a.warmup, a.steps)
        return

    if c == "two_models":
        a_m = to_cuda(build_cpu(LlamaForCausalLM, dense_config("small_a"), 111))
        b_m = to_cuda(build_cpu(LlamaForCausalLM, dense_config("small_b"), 112))
        wa, wb = param_bytes(a_m), param_bytes(b_m)
        run.res.update(load_s=round(now() - t, 2), ready_s=round(now(), 2), weights_bytes=wa + wb,
                       weights_bytes_each=[wa, wb])
        decode_prefill(run, [("A", a_m), ("B", b_m)], "main", a.warmup, a.steps)
        return

    if c == "free_load":
        a_m = to_cuda(build_cpu(LlamaForCausalLM, dense_config("dense"), 121))
        wa = param_bytes(a_m)
        run.res.update(load_s=round(now() - t, 2), ready_s=round(now(), 2))
        # A long enough to be planned and streamed before it goes
        decode_prefill(run, [("A", a_m)], "A", a.warmup, max(2, a.steps // 2))
        run.watch.phase = "free A"
        t = now()
        del a_m
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        run.res["free_s"] = round(now() - t, 2)
        t = now()
        b_m = to_cuda(build_cpu(LlamaForCausalLM, dense_config("big_b"), 122))
        wb = param_bytes(b_m)
        # one model at a time: the budget's base is the larger
        run.res.update(load_b_s=round(now() - t, 2), ready_b_s=round(now(), 2), weights_bytes=max(wa, wb),
                       weights_bytes_each=[wa, wb])
        decode_prefill(run, [("B", b_m)], "main", a.warmup, a.steps, seed_off=1)
        return
    raise SystemExit(f"cases.py: unknown case {c}")


CASES = ("gpu_built", "gpu_built_pad", "pretrained_device_map", "pretrained_to", "cpu_built", "expandable",
         "tied", "moe", "generate", "two_models", "free_load", "profiler", "profiler_late", "graph")
# torch.compile'd: not in CASE all (their compilation would take most of its time
# limit); CASE all_compiled runs them in one process
COMPILED = ("compiled", "compiled_ro")


def compare(out, ref_path):
    """Each tensor of the reference against ours: bitwise equal, and the largest
    difference (floats) or the count of differing elements (integers)."""
    import torch

    ref = torch.load(ref_path, map_location="cpu", weights_only=True)
    keys, equal = {}, True
    for k in sorted(set(ref) | set(out)):
        a, b = ref.get(k), out.get(k)
        if a is None or b is None:
            keys[k] = {"equal": False, "why": "missing in " + ("ours" if b is None else "the reference")}
            equal = False
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            keys[k] = {"equal": False, "why": f"shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}"}
            equal = False
            continue
        eq = bool(torch.equal(a, b))
        d = {"equal": eq}
        if not eq:
            if a.is_floating_point():
                d["max_abs_diff"] = float((a.float() - b.float()).abs().max())
            else:
                d["differing"] = int((a != b).sum())
            if a.dim() >= 2 and k.endswith(("decode_logits", "prefill_last")):
                rows = [i for i in range(a.shape[0]) if not torch.equal(a[i], b[i])]
                d["first_differing_row"] = rows[0] if rows else None
        keys[k] = d
        equal = equal and eq
    return {"equal": equal, "keys": keys}


def smoke_all(a, cases):
    """Every case of `cases` in turn in this one process (CONF_TINY=1 makes it take
    seconds): the Python paths of every case, the save and the comparison, without
    FlexTensor. One JSON line per case to stdout and to --json (written as each case
    ends: a process cut short keeps the lines of the cases done); exit 1 if any case
    failed."""
    import torch

    stem, rc = os.path.splitext(a.out)[0], 0
    with open(a.json, "w") as fj:
        for c in cases:
            a.case = c
            run = Run(c)
            r = {"case": c}
            try:
                case_models(a, run)
                path = f"{stem}-{c}.pt"
                torch.save(run.out, path)
                r.update(ok=compare(run.out, path)["equal"], outputs=sorted(run.out),
                         weights_bytes=run.res.get("weights_bytes"), tied=run.res.get("tied"),
                         phases={k: {x: v.get(x) for x in ("decode_ms_median", "prefill_ms_median",
                                                            "used_bytes_decode", "prefill_iterations_equal")}
                                 for k, v in run.res.get("phases", {}).items()})
            except Exception as e:  # noqa: BLE001 - the next case still runs
                r.update(ok=False, error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-3000:])
                traceback.print_exc()
                rc = 1
            r["watch"] = run.watch.summary()
            line = json.dumps(r, default=str)
            print(line)
            fj.write(line + "\n")
            fj.flush()
            del run
            gc.collect()
            torch.cuda.empty_cache()
    return rc


def on_sigterm(signum, frame):
    """run.sh's time limit (timeout sends SIGTERM): an exception, so that the JSON of
    what ran so far is still written (the exit status stays timeout's 124)."""
    raise KeyboardInterrupt("SIGTERM (the process's time limit)")


def main():
    signal.signal(signal.SIGTERM, on_sigterm)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("case", choices=CASES + COMPILED + ("all", "all_compiled"),
                    help="a case, or all (every case but the compiled ones in this process), or "
                         "all_compiled (the compiled ones)")
    ap.add_argument("--out", required=True, help="the outputs (torch.save)")
    ap.add_argument("--json", default=None, help="the results (default: OUT's stem + .json)")
    ap.add_argument("--ref", default=None, help="the reference outputs to compare with")
    ap.add_argument("--steps", type=int, default=2 if TINY else 12, help="timed decode steps")
    ap.add_argument("--warmup", type=int, default=8 if TINY else 10, help="decode warm-up steps")
    ap.add_argument("--h2d", action="store_true", help="time 1 GiB pinned host-to-device copies")
    ap.add_argument("--work", default=os.environ.get("CONF_WORK", "/tmp/ft_conf"),
                    help="where the checkpoints go")
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    a.json = a.json or os.path.splitext(a.out)[0] + ".json"
    os.makedirs(a.work, exist_ok=True)
    if a.case == "expandable":  # read by PyTorch's allocator at its first CUDA allocation
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

    import torch
    import transformers

    if a.case in ("all", "all_compiled"):
        return smoke_all(a, CASES if a.case == "all" else COMPILED)
    run = Run(a.case)
    run.res.update(import_s=round(now(), 2), versions={"torch": torch.__version__,
                                                       "transformers": transformers.__version__},
                   steps_timed=a.steps, warmup=a.warmup, prefill_tokens=PREFILL)
    rc = 0
    try:
        run.res["device"] = torch.cuda.get_device_name(0)
        case_models(a, run)
        run.res["end_s"] = round(now(), 2)
        torch.save(run.out, a.out)
        if a.ref:
            run.res["compare"] = compare(run.out, a.ref) if os.path.exists(a.ref) else None
        if a.h2d:
            run.res["h2d_gbps"] = h2d_gbps()
    except BaseException as e:  # noqa: BLE001 - recorded in the JSON, then exit 1
        run.res["error"] = f"{type(e).__name__}: {e}"
        run.res["traceback"] = traceback.format_exc()[-4000:]
        traceback.print_exc()
        rc = 1
    run.res["first_streamed"] = run.first_streamed
    run.res["steps"] = run.steps
    run.res.update(run.watch.summary())
    try:
        run.res.update(max_memory_reserved=torch.cuda.max_memory_reserved(),
                       max_memory_allocated=torch.cuda.max_memory_allocated())
    except Exception:  # noqa: BLE001
        pass
    run.usage("ft_usage_end")
    line = json.dumps(run.res, default=str)
    with open(a.json, "w") as f:
        f.write(line + "\n")
    print(line)
    sys.stdout.flush()
    return rc


if __name__ == "__main__":
    sys.exit(main())
