"""What the bench scripts share: the Llama shapes they build, FlexTensor's memory
usage through its control API, the GPU's memory in use as nvidia-smi shows it, a
synchronised wall-clock timing, and two ways for processes to time their steps together
(Turns: one at a time; Barrier: all at once).
Imported by llama_forward.py, offload_bench.py and tp_bench.py (run from bench/'s
parent as `python3 bench/NAME.py`, so that this folder is on sys.path)."""
import ctypes
import time


def llama_config(layers, hidden, **extra):
    """A LlamaConfig of `layers` layers of width `hidden`, 128-wide heads, the MLP
    2.6875 x wider (rounded down to 256), a 32000-token vocabulary, untied head."""
    from transformers import LlamaConfig

    kw = dict(hidden_size=hidden, intermediate_size=int(hidden * 2.6875) // 256 * 256,
              num_hidden_layers=layers, num_attention_heads=hidden // 128,
              num_key_value_heads=hidden // 128, vocab_size=32000,
              max_position_embeddings=4096, tie_word_embeddings=False)
    kw.update(extra)
    return LlamaConfig(**kw)


def fill_random(model, gen):
    """The benchmarks' weights, in parameter order: norms (1-D) at 1, every other
    parameter uniform in [-0.02, 0.02) from `gen`, a torch.Generator."""
    import torch

    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                p.copy_((torch.rand(p.shape, generator=gen, dtype=torch.float32) - 0.5) * 0.04)


def ft_usage(before_plan=False):
    """FlexTensor's ft_get_gpu_memory_usage as a dict, when it is preloaded and has a
    plan (or, with before_plan, before it too: "before_plan" then says which); None
    otherwise."""
    class Usage(ctypes.Structure):
        _fields_ = [(n, ctypes.c_ulonglong) for n in
                    ("total", "resident", "slots", "other", "unmapped", "budget")]
    try:
        fn = ctypes.CDLL(None).ft_get_gpu_memory_usage
    except AttributeError:
        return None
    u = Usage()
    rc = fn(ctypes.byref(u))
    if rc != 0 and not (before_plan and rc == 1):
        return None
    return dict({n: getattr(u, n) for n, _ in Usage._fields_}, **({"before_plan": rc == 1} if before_plan else {}))


def gpu_used_mib(index=0):
    """Device-wide memory in use (MiB) from NVML, the figure nvidia-smi shows; None
    where NVML is missing. No CUDA call, so it can run before the context exists.
    NVML's index is CUDA's under CUDA_DEVICE_ORDER=PCI_BUS_ID (bench/tp.sh sets it)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index)).used / 1048576
    except Exception:
        return None


class MemWatch:
    """A thread sampling, every `every_s`, the GPU's memory in use (NVML, as nvidia-smi)
    and what FlexTensor holds (its control API): the highest use and the phase it fell
    in (set `phase` as the run goes), with what FlexTensor held then; the most
    FlexTensor held; and the highest use outside FlexTensor (in use less held). nvidia-smi's 200 ms samples show a peak
    but not its cause; this tells the shim's memory from the rest. summary() for the
    JSON; {} where NVML is missing."""

    def __init__(self, index, idle_mib, every_s=0.005):
        import threading
        self.index, self.idle, self.every = index, idle_mib or 0.0, every_s
        self.phase, self.samples, self.top, self.top_out, self.top_ft = "start", 0, None, None, None
        self.stop_ev = threading.Event()
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml, self.h = pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:
            self.nvml = None
            return
        self.t = threading.Thread(target=self._loop, daemon=True)
        self.t.start()

    def _loop(self):
        while not self.stop_ev.wait(self.every):
            used = self.nvml.nvmlDeviceGetMemoryInfo(self.h).used / 1048576 - self.idle
            u = ft_usage(before_plan=True)
            held = u["total"] / 1048576 if u else None
            self.samples += 1
            if self.top is None or used > self.top[0]:
                self.top = (used, self.phase, held)
            if held is not None and (self.top_ft is None or held > self.top_ft[0]):
                self.top_ft = (held, self.phase)
            if held is not None and (self.top_out is None or used - held > self.top_out[0]):
                self.top_out = (used - held, self.phase, used)

    def summary(self):
        if self.nvml is None:
            return {}
        self.stop_ev.set()
        self.t.join()
        r = {"watch_samples": self.samples, "watch_every_ms": self.every * 1e3}
        if self.top:
            r.update(watch_peak_mib=round(self.top[0], 1), watch_peak_phase=self.top[1],
                     watch_peak_ft_mib=None if self.top[2] is None else round(self.top[2], 1))
        if self.top_ft:
            r.update(watch_ft_max_mib=round(self.top_ft[0], 1), watch_ft_max_phase=self.top_ft[1])
        if self.top_out:
            r.update(watch_outside_max_mib=round(self.top_out[0], 1),
                     watch_outside_phase=self.top_out[1], watch_outside_used_mib=round(self.top_out[2], 1))
        return r


def h2d_gbps(mib=1024, reps=5, sync=None):
    """Host-to-device bandwidth of pinned memory, GB/s: the median of `reps` copies of
    `mib` MiB (the link bound's denominator, measured apart from FlexTensor). sync(),
    when given, runs before each copy: a barrier, so that the processes of a job copy
    at once, as they stream at once."""
    import statistics
    import torch
    src = torch.empty(mib << 20, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
    rates = []
    for _ in range(reps):
        torch.cuda.synchronize()
        if sync is not None:
            sync()
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        rates.append((mib << 20) / (time.perf_counter() - t0) / 1e9)
    del src, dst
    torch.cuda.empty_cache()
    return round(statistics.median(rates), 2)


def timed(fn, cpu_ms=None):
    """fn()'s result and its milliseconds, the device synchronised before and after.
    cpu_ms, a list, also gets the calling thread's CPU milliseconds over the same span:
    time the host spent running it, whatever else shared the machine's cores."""
    import torch
    torch.cuda.synchronize()
    t, c = time.perf_counter(), time.thread_time()
    r = fn()
    torch.cuda.synchronize()
    if cpu_ms is not None:
        cpu_ms.append(round((time.thread_time() - c) * 1e3, 3))
    return r, (time.perf_counter() - t) * 1e3


class Turns:
    """Timed steps taken in turn by N processes (bench/overhead.sh LOCKSTEP=1), so that
    they run in the same moments of the host's load, one at a time on the GPU. spec is
    "DIR,I,N": process I waits for a byte on the FIFO DIR/turn.I before each timed step
    and writes one to DIR/turn.(I+1)%N after it. Before its first wait it creates
    DIR/ready.I (the driver hands out the first turn once all are ready: no process's
    warm-up runs beside another's timed steps); finish() creates DIR/done.I and waits
    for every done file, so that nothing after the timed steps runs beside them either.
    The FIFOs are opened read-write: opening never blocks."""
    def __init__(self, spec):
        import os
        d, i, n = spec.split(",")
        self.os, self.dir, self.i, self.n = os, d, int(i), int(n)
        self.fin = os.open(f"{d}/turn.{self.i}", os.O_RDWR)
        self.fout = os.open(f"{d}/turn.{(self.i + 1) % self.n}", os.O_RDWR)
        self.ready = False

    def _touch(self, name):
        open(f"{self.dir}/{name}.{self.i}", "w").close()

    def wait(self):
        if not self.ready:
            self._touch("ready")
            self.ready = True
        if not self.os.read(self.fin, 1):
            raise RuntimeError("turn FIFO closed")

    def done(self):
        self.os.write(self.fout, b"t")

    def finish(self, timeout_s=120):
        self._touch("done")
        t = time.time()
        while time.time() - t < timeout_s:
            if all(self.os.path.exists(f"{self.dir}/done.{k}") for k in range(self.n)):
                return
            time.sleep(0.05)


class Barrier:
    """N processes started together wait for each other at named points, so that their
    timed steps run in the same seconds (bench/shm_procs.sh: three processes sharing
    one link). spec is "DIR,I,N": at point NAME, process I creates DIR/NAME.I and waits
    until DIR/NAME.0 .. NAME.(N-1) all exist. It gives up when DIR/abort exists (the
    driver saw one of them end) or after timeout_s in all, over every point: a process
    that died never holds the others for long. wait() returns (seconds waited, whether
    all N arrived)."""
    def __init__(self, spec, timeout_s=120.0):
        d, i, n = spec.split(",")
        self.dir, self.i, self.n, self.left = d, int(i), int(n), float(timeout_s)

    def wait(self, name):
        import os
        open(f"{self.dir}/{name}.{self.i}", "w").close()
        t0, ok = time.time(), False
        while True:
            if all(os.path.exists(f"{self.dir}/{name}.{k}") for k in range(self.n)):
                ok = True
                break
            if os.path.exists(f"{self.dir}/abort") or time.time() - t0 >= self.left:
                break
            time.sleep(0.02)
        waited = time.time() - t0
        self.left = max(0.0, self.left - waited)
        return round(waited, 3), ok


def repeat_forwards(step, warmup, iters, on_steady=None, cpu_ms=None, turns=None):
    """warmup + iters calls of step(), each timed; step returns the tensor to keep (the
    one before is freed first). Returns (the last one on the cpu as float, warm-up ms,
    timed ms, whether every one equals the first). on_steady() runs once, before the
    first timed call; cpu_ms, a list, gets each timed call's thread CPU ms; turns (a
    Turns) brackets each timed call, outside its timing. Python's garbage collector
    is off during the timed calls (it runs once before them)."""
    import gc
    import torch
    ref, equal, warm, times, out = None, True, [], [], None
    for i in range(warmup + iters):
        if i == warmup:
            if on_steady is not None:
                on_steady()
            # no collector pause inside a timed step: collect now, not during
            gc.collect()
            gc.disable()
        out = None
        if turns is not None and i >= warmup:
            turns.wait()
        out, ms = timed(step, cpu_ms if i >= warmup else None)
        if turns is not None and i >= warmup:
            turns.done()
        if ref is None:
            ref = out
        else:
            equal = equal and torch.equal(out, ref)
        (warm if i < warmup else times).append(round(ms, 3))
    gc.enable()
    return out.float().cpu(), warm, times, equal
