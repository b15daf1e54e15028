/* kernels.h - the example model's kernels, as the host code sees them: the host
 * addresses that identify them to the CUDA runtime (nvcc's host stubs on a GPU, the
 * registered stubs on the simulated device). Implemented by kernels.cu and
 * kernels_sim.c, which compute bit-identical results (32-bit unsigned arithmetic).
 *
 *   gemv  (const uint32_t *w, const uint32_t *x, uint32_t *y, int n)
 *         y[r] = sum_c w[r*n + c] * x[c]                    (a weight read, GEMM-like)
 *   mix   (uint32_t *y, const uint32_t *bias, int n)
 *         t = y[i] + bias[i]; y[i] = t ^ (t >> 13)           (elementwise)
 *   scale (uint32_t *y, const uint32_t *s, int n)
 *         y[i] = y[i] * (s[i] | 1) + (y[i] >> 7)             (launched by minblas)
 *   mixp  (uint32_t *y, const uint32_t *const *tbl, int n)
 *         y[i] += tbl[0][i] ^ 0x9e3779b9                    (a weight reached through a
 *                                                             pointer array, --ptr-arrays)
 *   bump  (uint32_t *y, struct model_meta m)
 *         y[i] ^= i * 2654435761 for i < m.n; m.tail is never read (--stale)
 *   gather (uint32_t *y, struct model_gather g)
 *         y[i] += sum_k (g.src[k][i] ^ k) for i < g.len     (a cat of many inputs,
 *                                                             --gather-from)
 *   cat   (uint32_t *dst, const uint32_t *src, const uint32_t *x, int len, int add,
 *          int row, int n)
 *         dst = src's len rows of `row` words, then add rows made from x:
 *         dst[(len+a)*row + j] = x[(j + a) % n] ^ (len + a) * 0x9e3779b9
 *                                                            (a KV cache grown by
 *                                                             torch.cat, --grow-cache)
 *   attend (uint32_t *y, const uint32_t *k, const uint32_t *v, int len, int row, int n)
 *         y[i] += sum_{r < len} k[r*row + i % row] ^ (v[r*row + (i + r) % row] >> 1)
 *                                                            (attention over the cache)
 *   fill  (uint32_t *y, uint32_t seed, int n)
 *         y[i] = h ^ (h >> 15), h = (seed + i) * 2654435761  (a weight initialised on
 *                                                             the device, --init-kernel)
 */
#ifndef MODEL_KERNELS_H
#define MODEL_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

/* bump's parameter passed by value, with a tail the kernel never reads: as PyTorch's
 * offset calculators (fixed-size arrays filled up to the tensor's rank), it holds
 * whatever the caller left there, stale device pointers included. */
struct model_meta {
    uint32_t n, rank;
    uint64_t tail[6];
};

/* gather's parameter, passed by value as PyTorch's cat kernel (CatArrayBatchedCopy)
 * passes its inputs' metadata: up to MODEL_GATHER_MAX input pointers in the launch's
 * argument bytes, more regions than a scan set once kept (64). */
#define MODEL_GATHER_MAX 128
struct model_gather {
    uint32_t n, len;
    const uint32_t *src[MODEL_GATHER_MAX];
};

const void *model_kernel_gemv(void);
const void *model_kernel_gemv_wide(void); /* gemv under another name (--prefill-every) */
const void *model_kernel_mix(void);
const void *model_kernel_mix_alt(void); /* mix under another name (--act-twin) */
const void *model_kernel_scale(void);
const void *model_kernel_mixp(void);
const void *model_kernel_bump(void);
const void *model_kernel_gather(void);
const void *model_kernel_cat(void);
const void *model_kernel_attend(void);
const void *model_kernel_fill(void);

/* Launches kernel stub (1-D grid and block, args as cudaLaunchKernel's) through the
 * driver's cuLaunchKernel reached without its exported symbol, as a library with a
 * private path to the driver would (--bypass-from): an interposer does not see it.
 * 0 on success; -1 where the device offers no such path (a real GPU). */
int model_launch_uninterposed(const void *stub, unsigned grid, unsigned block, void **args, void *stream);

/* Threads per block the launches use (the simulator ignores the shape). */
#define MODEL_BLOCK 256

#ifdef __cplusplus
}
#endif
#endif
