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

#ifdef __cplusplus
}
#endif
#endif
