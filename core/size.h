/* size.h - byte sizes as people write them ("8GiB", "512MiB", "1.5G", "64B").
 *
 * Owns: the one grammar of a byte size in FlexTensor, read wherever a size is given
 * (config/'s size options, discovery's "size:" unit patterns), and its inverse, the
 * text a size is printed as. One grammar so that the same text means the same number,
 * or is refused the same way, in every place that takes one.
 */
#ifndef FT_SIZE_H
#define FT_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* Parses a byte size: a number (a fraction allowed: "1.5GiB") followed by an optional
 * blank and a unit, any case: B; K, M, G, T and KiB, MiB, GiB, TiB (powers of 1024);
 * KB, MB, GB, TB (powers of 1000). Blanks around it are ignored. Without a unit the
 * number is bytes, and must be 0 or at least FT_SIZE_PLAIN_MIN. Returns 0 and sets
 * *out, or leaves *out alone and returns
 *   FT_SIZE_INVALID     not a size (NULL included), negative, an exponent or hex,
 *                       fractional bytes, or over 2^64-1;
 *   FT_SIZE_NEEDS_UNIT  a plain number from 1 to FT_SIZE_PLAIN_MIN - 1 ("8192");
 *   FT_SIZE_BELOW_BYTE  not zero, yet less than one byte ("0.0001k"), which would
 *                       read as 0, the value that turns a size option off. */
#define FT_SIZE_INVALID (-1)
#define FT_SIZE_NEEDS_UNIT (-2)
#define FT_SIZE_BELOW_BYTE (-3)
#define FT_SIZE_PLAIN_MIN (1ull << 20)
int ft_size_parse(const char *s, uint64_t *out);

/* v as ft_size_parse reads it back, into buf: in the largest binary unit that divides
 * it ("3GiB"), else in bytes with a B ("1000B"; a plain number below 1 MiB would not
 * parse). Returns buf. */
const char *ft_size_format(uint64_t v, char *buf, size_t len);

#endif
