"""What the bench scripts share: the Llama shapes they build, FlexTensor's memory
usage through its control API, the GPU's memory in use as nvidia-smi shows it, and a
synchronised wall-clock timing.
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


def ft_usage():
    """FlexTensor's ft_get_gpu_memory_usage as a dict, when it is preloaded and has a
    plan; None otherwise."""
    class Usage(ctypes.Structure):
        _fields_ = [(n, ctypes.c_ulonglong) for n in
                    ("total", "resident", "slots", "other", "unmapped", "budget")]
    try:
        fn = ctypes.CDLL(None).ft_get_gpu_memory_usage
    except AttributeError:
        return None
    u = Usage()
    return {n: getattr(u, n) for n, _ in Usage._fields_} if fn(ctypes.byref(u)) == 0 else None


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


def timed(fn):
    """fn()'s result and its milliseconds, the device synchronised before and after."""
    import torch
    torch.cuda.synchronize()
    t = time.perf_counter()
    r = fn()
    torch.cuda.synchronize()
    return r, (time.perf_counter() - t) * 1e3


def repeat_forwards(step, warmup, iters, on_steady=None):
    """warmup + iters calls of step(), each timed; step returns the tensor to keep (the
    one before is freed first). Returns (the last one on the cpu as float, warm-up ms,
    timed ms, whether every one equals the first). on_steady() runs once, before the
    first timed call."""
    import torch
    ref, equal, warm, times, out = None, True, [], [], None
    for i in range(warmup + iters):
        if i == warmup and on_steady is not None:
            on_steady()
        out = None
        out, ms = timed(step)
        if ref is None:
            ref = out
        else:
            equal = equal and torch.equal(out, ref)
        (warm if i < warmup else times).append(round(ms, 3))
    return out.float().cpu(), warm, times, equal
