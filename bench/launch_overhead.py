"""Per-launch host cost of tiny PyTorch kernels, under different FlexTensor settings
(bench/run.sh compares them). Prints one JSON line.

    python3 bench/launch_overhead.py [--launches 20000] [--weights 512]

The kernels cycle through --weights tensors allocated before the first launch,
so a pass over them looks like one iteration of a model with that many weights; with
FT_DISCOVERY_ITERS larger than the passes run, the shim stays in discovery.
"""
import argparse
import json
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--weights", type=int, default=256)
    a = ap.parse_args()
    # 12 MiB each: PyTorch gives every allocation of 10 MiB or more its own segment, so
    # each weight is its own region, as a model's large weights are; the kernels touch
    # only their first 4 KiB, so the GPU never holds the host back.
    ws = [torch.full((3 << 20,), float(i), device="cuda")[:1024] for i in range(a.weights)]
    x = torch.ones(1024, device="cuda")
    for i in range(2 * a.weights):             # warm-up: allocator, kernel cache
        x.add_(ws[i % a.weights])
    torch.cuda.synchronize()
    best = None
    for _ in range(5):
        t = time.perf_counter()
        for i in range(a.launches):
            x.add_(ws[i % a.weights])
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t) / a.launches
        best = dt if best is None else min(best, dt)
    print(json.dumps({"launches": a.launches, "us_per_launch": round(best * 1e6, 3)}))


if __name__ == "__main__":
    main()
