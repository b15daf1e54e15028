"""Where does a CUtensorMap (Hopper TMA descriptor) keep its global address? Encodes
one for a known device buffer and prints its 16 words, marking those that hold the
address (plain, or shifted right by 4). Used to decide how discovery reads cuBLAS's
nvjet GEMM arguments.

    python3 bench/tma_probe.py
"""
import ctypes

import torch
from cuda.bindings import driver as cu

t = torch.empty(4096 * 4096, dtype=torch.bfloat16, device="cuda")
addr = t.data_ptr()
# cuda-bindings wants its own integer types for the sizes and strides.
dims = [cu.cuuint64_t(4096), cu.cuuint64_t(4096)]
strides = [cu.cuuint64_t(4096 * 2)]
box = [cu.cuuint32_t(64), cu.cuuint32_t(64)]
elem = [cu.cuuint32_t(1), cu.cuuint32_t(1)]
err, tmap = cu.cuTensorMapEncodeTiled(
    cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, addr, dims, strides, box, elem,
    cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
    cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
    cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
    cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
print("encode:", err, "address", hex(addr))
raw = bytes((ctypes.c_char * 128).from_address(int(tmap.getPtr())))
for i in range(16):
    w = int.from_bytes(raw[8 * i:8 * i + 8], "little")
    tag = "PLAIN" if w == addr else ">>4" if w == addr >> 4 else ("contains>>4" if (addr >> 4) & 0xffffffffff == (w & 0xffffffffff) else "")
    print(f"word {i:2d} @{8*i:3d}: {w:#018x} {tag}")
