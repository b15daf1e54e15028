"""Per-launch host cost of tiny PyTorch kernels: run under different FlexTensor
settings and compare (bench/run.sh does). Prints one JSON line.

    python3 bench/launch_overhead.py [--launches 20000]
"""
import argparse
import json
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=20000)
    a = ap.parse_args()
    w = torch.ones(1024, device="cuda")       # allocated before the first launch
    x = torch.ones(1024, device="cuda")
    for _ in range(200):                       # warm-up: caching allocator, kernel cache
        x.add_(w)
    torch.cuda.synchronize()
    best = None
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(a.launches):
            x.add_(w)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t) / a.launches
        best = dt if best is None else min(best, dt)
    print(json.dumps({"launches": a.launches, "us_per_launch": round(best * 1e6, 3)}))


if __name__ == "__main__":
    main()
