/* size.c - the byte-size grammar (see size.h). Integer arithmetic throughout, not
 * strtod: a double rounds sizes above 2^53, and 2^64-1 bytes is accepted exactly. */
#include "core/size.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static bool word_is(const char *s, const char *e, const char *w)
{
    size_t n = (size_t)(e - s);
    return strlen(w) == n && strncasecmp(s, w, n) == 0;
}

/* The multiplier of the unit [u, ue): none or B is 1; a prefix K, M, G or T alone or
 * followed by iB is a power of 1024, followed by B a power of 1000. 0 for anything
 * else. */
static uint64_t unit_multiplier(const char *u, const char *ue)
{
    static const char prefixes[] = "kmgt";
    if (u == ue || word_is(u, ue, "b"))
        return 1;
    const char *p = strchr(prefixes, tolower((unsigned char)*u));
    if (p == NULL)
        return 0;
    uint64_t binary = 1, decimal = 1;
    for (const char *q = prefixes; q <= p; q++) {
        binary <<= 10;
        decimal *= 1000;
    }
    if (u + 1 == ue || word_is(u + 1, ue, "ib"))
        return binary;
    return word_is(u + 1, ue, "b") ? decimal : 0;
}

int ft_size_parse(const char *s, uint64_t *out)
{
    if (s == NULL)
        return FT_SIZE_INVALID;
    while (isspace((unsigned char)*s))
        s++;
    uint64_t ip = 0, fnum = 0, fden = 1;
    int digits = 0;
    bool nonzero = false; /* a digit other than 0: "0.0001k" is not a way to write 0 */
    while (isdigit((unsigned char)*s)) {
        unsigned dgt = (unsigned)(*s++ - '0');
        if (ip > (UINT64_MAX - dgt) / 10)
            return FT_SIZE_INVALID;
        ip = ip * 10 + dgt;
        nonzero |= dgt != 0;
        digits++;
    }
    if (*s == '.') {
        s++;
        while (isdigit((unsigned char)*s)) {
            /* Digits past the 18th cannot change a 64-bit byte count by one byte at
             * these multipliers; they are read and dropped. */
            if (fden < 1000000000000000000ull) {
                fnum = fnum * 10 + (unsigned)(*s - '0');
                fden *= 10;
            }
            nonzero |= *s != '0';
            s++;
            digits++;
        }
    }
    if (digits == 0)
        return FT_SIZE_INVALID;
    while (isspace((unsigned char)*s))
        s++;
    const char *u = s;
    while (isalpha((unsigned char)*s))
        s++;
    const char *ue = s;
    while (isspace((unsigned char)*s))
        s++;
    if (*s != '\0')
        return FT_SIZE_INVALID;
    uint64_t m = unit_multiplier(u, ue);
    if (m == 0)
        return FT_SIZE_INVALID;
    if (m == 1 && fnum != 0)
        return FT_SIZE_INVALID; /* fractional bytes */
    unsigned __int128 v = (unsigned __int128)ip * m + (unsigned __int128)fnum * m / fden;
    if (v > UINT64_MAX)
        return FT_SIZE_INVALID;
    if (v == 0 && nonzero)
        return FT_SIZE_BELOW_BYTE;
    /* A plain number below a MiB is far more often a count of MiB or GiB whose unit was
     * left out than a byte count ("8192" read as 8 KiB ran with no memory at all), so
     * there the unit is required, B included. */
    if (u == ue && v != 0 && v < FT_SIZE_PLAIN_MIN)
        return FT_SIZE_NEEDS_UNIT;
    *out = (uint64_t)v;
    return 0;
}

const char *ft_size_format(uint64_t v, char *buf, size_t len)
{
    static const char *const units[] = {"TiB", "GiB", "MiB", "KiB"};
    snprintf(buf, len, "%lluB", (unsigned long long)v);
    for (int i = 0; i < 4 && v != 0; i++) {
        uint64_t m = 1ull << (10 * (4 - i));
        if (v % m == 0) {
            snprintf(buf, len, "%llu%s", (unsigned long long)(v / m), units[i]);
            break;
        }
    }
    return buf;
}
