/* flextensor.h - the small control API libflextensor.so exports to applications.
 *
 * Every function is safe to call whether or not the library is preloaded when looked
 * up with dlsym(RTLD_DEFAULT, ...), and from Python through ctypes:
 *     ft = ctypes.CDLL(None); ft.ft_enabled()
 */
#ifndef FLEXTENSOR_H
#define FLEXTENSOR_H

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when FlexTensor is loaded and FT_ENABLED is on in this process, else 0. */
int ft_enabled(void);

/* An iteration (one pass over the weights, a forward) begins at the next launch on
 * this thread; replaces FlexTensor's own detection from the first call on. */
void ft_iteration_mark(void);

/* Profiling pauses (reference counted): passes under way while suspended are not
 * timed, so warm-up or evaluation passes do not pollute the samples. Resume returns 0,
 * or -1 when nothing was suspended. */
void ft_profiling_suspend(void);
int ft_profiling_resume(void);

#ifdef __cplusplus
}
#endif
#endif
