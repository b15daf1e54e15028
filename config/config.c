/* config.c - loads ft_config_t from defaults, an INI file, FT_* variables and explicit
 * settings; checks, prints and documents it. Everything here is driven by the option
 * table (options.def): adding a row adds the field, its parsing, its range check, its
 * line in the print-out and its row in docs/configuration.md.
 *
 * Owns: the option descriptors, the value parsers, the diagnostics text.
 * The only file of FlexTensor that reads the environment (from the envp it is given)
 * and calls inih; and so the one that refuses to in a secure-execution process.
 */
#include "config/config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/shmseg.h"
#include "core/size.h"

/* ---- the table ---------------------------------------------------------------- */

typedef enum { T_BOOL, T_INT, T_FLOAT, T_SIZE, T_STRING, T_ENUM, T_LEVEL, T_LIST } opt_type_t;

typedef struct {
    const char *name; /* "GPU_MEM_LIMIT" */
    const char *env;  /* "FT_GPU_MEM_LIMIT" */
    opt_type_t type;
    const char *def;
    double lo, hi;
    unsigned flags;
    const char *doc;
    size_t offset;
} opt_desc_t;

static const opt_desc_t options[FT_CONFIG_N_OPTIONS] = {
#define FT_OPT(NAME, field, TYPE, def, lo, hi, flags, doc)                                \
    {#NAME, "FT_" #NAME, T_##TYPE, def, lo, hi, flags, doc, offsetof(ft_config_t, field)},
#include "config/options.def"
};

typedef struct {
    int opt;
    int value;
    const char *word;
    const char *doc; /* NULL for an alias */
} word_desc_t;

static const word_desc_t words[] = {
#define FT_WORD(NAME, CONST, w, doc) {FT_CONFIG_OPT_##NAME, FT_##NAME##_##CONST, w, doc},
#define FT_ALIAS(NAME, CONST, w) {FT_CONFIG_OPT_##NAME, FT_##NAME##_##CONST, w, NULL},
#include "config/options.def"
};
#define N_WORDS (sizeof words / sizeof words[0])

static const char *const type_names[] = {
    [T_BOOL] = "bool",  [T_INT] = "integer", [T_FLOAT] = "number", [T_SIZE] = "size",
    [T_STRING] = "text", [T_ENUM] = "word",  [T_LEVEL] = "level",  [T_LIST] = "list",
};

/* Prefixes of FT_ variables that belong to other parts of the project (the simulated
 * device, test drivers): not options, and not typos to warn about. */
static const char *const foreign_prefixes[] = {"FT_SIM_", "FT_TEST_"};

static const char empty_string[] = "";

const char *ft_config_option_name(ft_config_opt_t opt)
{
    return (unsigned)opt < FT_CONFIG_N_OPTIONS ? options[opt].name : NULL;
}

const char *ft_config_option_doc(ft_config_opt_t opt)
{
    return (unsigned)opt < FT_CONFIG_N_OPTIONS ? options[opt].doc : NULL;
}

const char *ft_config_word_name(int word)
{
    for (size_t i = 0; i < N_WORDS; i++)
        if (words[i].value == word && words[i].doc != NULL)
            return words[i].word;
    return "?";
}

/* ---- small text helpers -------------------------------------------------------- */

/* Appends to a fixed buffer, never overflowing; the result is always terminated. */
typedef struct {
    char *buf;
    size_t len, cap;
} sbuf_t;

static void sb_printf(sbuf_t *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *sb, const char *fmt, ...)
{
    if (sb->len + 1 >= sb->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(sb->buf + sb->len, sb->cap - sb->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        sb->len = sb->len + (size_t)n < sb->cap ? sb->len + (size_t)n : sb->cap - 1;
}

/* A value as shown in messages: cut at 80 characters. */
static const char *show(const char *v, char *buf, size_t len)
{
    if (strlen(v) <= 80)
        return v;
    snprintf(buf, len, "%.77s...", v);
    return buf;
}

/* [*s, *e) without surrounding blanks. */
static void trim(const char **s, const char **e)
{
    while (*s < *e && isspace((unsigned char)**s))
        (*s)++;
    while (*e > *s && isspace((unsigned char)(*e)[-1]))
        (*e)--;
}

static bool word_is(const char *s, const char *e, const char *w)
{
    size_t n = (size_t)(e - s);
    return strlen(w) == n && strncasecmp(s, w, n) == 0;
}

static bool is_none(const char *s, const char *e)
{
    return word_is(s, e, "none") || word_is(s, e, "null");
}

unsigned ft_config_edit_distance(const char *a, const char *b)
{
    enum { MAXN = 64 };
    size_t na = strlen(a), nb = strlen(b);
    if (na > MAXN)
        na = MAXN;
    if (nb > MAXN)
        nb = MAXN;
    unsigned row[MAXN + 1];
    for (size_t j = 0; j <= nb; j++)
        row[j] = (unsigned)j;
    for (size_t i = 1; i <= na; i++) {
        unsigned diag = row[0];
        row[0] = (unsigned)i;
        for (size_t j = 1; j <= nb; j++) {
            unsigned up = row[j];
            unsigned cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            unsigned best = diag + cost;
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

/* "did you mean X?" when the nearest option is a plausible typo of `name`, else
 * "nearest option: X"; `shown` is X as the user would write it. */
static const char *suggest(const char *name, int opt, const char *shown, char *buf, size_t len)
{
    size_t n = strlen(name);
    unsigned close = n / 3 > 2 ? (unsigned)(n / 3) : 2;
    if (ft_config_edit_distance(name, options[opt].name) <= close)
        snprintf(buf, len, "did you mean %s?", shown);
    else
        snprintf(buf, len, "nearest option: %s", shown);
    return buf;
}

/* The option whose name is nearest to `name` (already without "FT_"). */
static int nearest_option(const char *name)
{
    int best = 0;
    unsigned best_d = ~0u;
    for (int i = 0; i < FT_CONFIG_N_OPTIONS; i++) {
        unsigned d = ft_config_edit_distance(name, options[i].name);
        if (d < best_d) {
            best_d = d;
            best = i;
        }
    }
    return best;
}

/* Option index of `name` (without "FT_"), or -1. */
static int find_option(const char *name, bool icase)
{
    for (int i = 0; i < FT_CONFIG_N_OPTIONS; i++)
        if ((icase ? strcasecmp : strcmp)(name, options[i].name) == 0)
            return i;
    return -1;
}

/* ---- diagnostics --------------------------------------------------------------- */

static void diag_add(ft_config_diag_t *d, bool is_error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void diag_add(ft_config_diag_t *d, bool is_error, const char *fmt, ...)
{
    if (is_error)
        d->n_errors++;
    else
        d->n_warnings++;
    if (d->n >= FT_CONFIG_DIAG_MAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg[d->n].text, sizeof d->msg[d->n].text, fmt, ap);
    va_end(ap);
    d->msg[d->n].is_error = is_error;
    d->n++;
}

void ft_config_diag_print(const ft_config_diag_t *diag, int fd)
{
    char line[FT_CONFIG_DIAG_TEXT + 64];
    for (unsigned i = 0; i < diag->n; i++) {
        int n = snprintf(line, sizeof line, "flextensor: %s: %s\n",
                         diag->msg[i].is_error ? "error" : "warning", diag->msg[i].text);
        (void)ft_log_write_all(fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    }
    unsigned total = diag->n_errors + diag->n_warnings;
    if (total > diag->n) {
        int n = snprintf(line, sizeof line,
                         "flextensor: %s: %u more configuration messages not shown\n",
                         diag->n_errors ? "error" : "warning", total - diag->n);
        (void)ft_log_write_all(fd, line, (size_t)n);
    }
}

/* ---- values -------------------------------------------------------------------- */

typedef union {
    bool b;
    int i;
    double f;
    uint64_t u;
    char *s;
    ft_config_list_t l;
} value_t;

/* What an option accepts, for error messages and the documentation. */
static const char *accepted_text(int opt, char *buf, size_t len)
{
    const opt_desc_t *d = &options[opt];
    sbuf_t sb = {buf, 0, len};
    buf[0] = '\0';
    bool none_ok = d->flags & FT_OPT_NONE_OK;
    switch (d->type) {
    case T_BOOL:
        sb_printf(&sb, "true/false, 1/0, yes/no, on/off");
        break;
    case T_INT:
        sb_printf(&sb, "integer %.15g..%.15g", d->lo, d->hi);
        break;
    case T_FLOAT:
        sb_printf(&sb, "number in %c%.15g, %.15g]%s", (d->flags & FT_OPT_LO_OPEN) ? '(' : '[', d->lo,
                  d->hi, none_ok ? ", or none" : "");
        break;
    case T_SIZE: {
        char hi[32];
        sb_printf(&sb, "byte size such as 8GiB, 512MiB, 1.5GiB, 4G or 64B (a number without "
                  "a unit is bytes, at least 1MiB)");
        if (d->hi > 0)
            sb_printf(&sb, ", at most %s", ft_size_format((uint64_t)d->hi, hi, sizeof hi));
        sb_printf(&sb, "; 0 or none = off");
        break;
    }
    case T_STRING:
        sb_printf(&sb, "any text%s", none_ok ? "; empty or none = unset" : "");
        break;
    case T_ENUM: {
        const char *sep = "";
        for (size_t i = 0; i < N_WORDS; i++)
            if (words[i].opt == opt && words[i].doc != NULL) {
                sb_printf(&sb, "%s%s", sep, words[i].word);
                sep = ", ";
            }
        sep = "; aliases: ";
        for (size_t i = 0; i < N_WORDS; i++)
            if (words[i].opt == opt && words[i].doc == NULL) {
                sb_printf(&sb, "%s%s (= %s)", sep, words[i].word,
                          ft_config_word_name(words[i].value));
                sep = ", ";
            }
        break;
    }
    case T_LEVEL:
        sb_printf(&sb, "%s", FT_LOG_LEVEL_WORDS);
        break;
    case T_LIST:
        sb_printf(&sb, "comma-separated list%s", none_ok ? "; empty or none = no entries" : "");
        break;
    }
    return buf;
}

/* Walks the items of the comma list s, each trimmed, the empty ones skipped: counts
 * them into *n and their bytes, a terminator each, into *bytes; with items, also
 * copies them, one after another, into text. The two passes of list_parse. */
static void list_walk(const char *s, size_t *n, size_t *bytes, char **items, char *text)
{
    *n = *bytes = 0;
    for (const char *p = s;;) {
        const char *e = strchr(p, ',');
        if (e == NULL)
            e = p + strlen(p);
        const char *a = p, *b = e;
        trim(&a, &b);
        if (b > a) {
            if (items != NULL) {
                char *item = text + *bytes;
                memcpy(item, a, (size_t)(b - a));
                item[b - a] = '\0';
                items[*n] = item;
            }
            (*n)++;
            *bytes += (size_t)(b - a) + 1;
        }
        if (*e == '\0')
            break;
        p = e + 1;
    }
}

/* Splits a comma list into one allocation: the pointer array, then the items. */
static int list_parse(const char *s, ft_config_list_t *out)
{
    size_t n, bytes;
    list_walk(s, &n, &bytes, NULL, NULL);
    out->n = 0;
    out->items = NULL;
    if (n == 0)
        return 0;
    char **items = malloc(n * sizeof *items + bytes);
    if (items == NULL)
        return -ENOMEM;
    list_walk(s, &n, &bytes, items, (char *)(items + n));
    out->n = n;
    out->items = items;
    return 0;
}

/* The list joined with ",", into buf. */
static const char *list_join(const ft_config_list_t *l, char *buf, size_t len)
{
    sbuf_t sb = {buf, 0, len};
    buf[0] = '\0';
    for (size_t i = 0; i < l->n; i++)
        sb_printf(&sb, "%s%s", i ? "," : "", l->items[i]);
    return buf;
}

/* Parses `text` for option `opt` into *out. 0 on success; -1 with a reason in `why`
 * ("not an integer"); -ENOMEM. */
static int parse_value(int opt, const char *text, value_t *out, char *why, size_t whylen)
{
    const opt_desc_t *d = &options[opt];
    const char *s = text, *e = text + strlen(text);
    trim(&s, &e);
    char tmp[128];
    bool none_ok = d->flags & FT_OPT_NONE_OK;

    if (none_ok && (is_none(s, e) || (s == e && d->type != T_STRING))) {
        switch (d->type) {
        case T_FLOAT: out->f = -1.0; return 0;
        case T_SIZE: out->u = 0; return 0;
        case T_LIST: out->l.n = 0; out->l.items = NULL; return 0;
        case T_STRING: out->s = (char *)empty_string; return 0;
        default: break;
        }
    }
    if (s == e && d->type != T_STRING && d->type != T_LIST) {
        snprintf(why, whylen, "empty value");
        return -1;
    }
    size_t n = (size_t)(e - s);
    if (n < sizeof tmp) {
        memcpy(tmp, s, n);
        tmp[n] = '\0';
    } else {
        tmp[0] = '\0';
    }

    switch (d->type) {
    case T_BOOL:
        if (word_is(s, e, "true") || word_is(s, e, "1") || word_is(s, e, "yes") ||
            word_is(s, e, "on")) {
            out->b = true;
            return 0;
        }
        if (word_is(s, e, "false") || word_is(s, e, "0") || word_is(s, e, "no") ||
            word_is(s, e, "off")) {
            out->b = false;
            return 0;
        }
        snprintf(why, whylen, "not a boolean");
        return -1;
    case T_INT: {
        char *end;
        errno = 0;
        long long v = strtoll(tmp, &end, 10);
        if (n >= sizeof tmp || end == tmp || *end != '\0') {
            snprintf(why, whylen, "not an integer");
            return -1;
        }
        if (errno == ERANGE || v < (long long)d->lo || v > (long long)d->hi) {
            snprintf(why, whylen, "out of range");
            return -1;
        }
        out->i = (int)v;
        return 0;
    }
    case T_FLOAT: {
        char *end;
        errno = 0;
        double v = strtod(tmp, &end);
        if (n >= sizeof tmp || end == tmp || *end != '\0' || !isfinite(v)) {
            snprintf(why, whylen, "not a number");
            return -1;
        }
        bool low = (d->flags & FT_OPT_LO_OPEN) ? v <= d->lo : v < d->lo;
        if (low || v > d->hi) {
            snprintf(why, whylen, "out of range");
            return -1;
        }
        out->f = v;
        return 0;
    }
    case T_SIZE: {
        int rc = n < sizeof tmp ? ft_size_parse(tmp, &out->u) : FT_SIZE_INVALID;
        if (rc == FT_SIZE_NEEDS_UNIT)
            snprintf(why, whylen, "a number without a unit below 1 MiB: did you mean %sMiB? "
                     "(%sB if bytes are meant)", tmp, tmp);
        else if (rc == FT_SIZE_BELOW_BYTE)
            snprintf(why, whylen, "less than one byte, which would read as 0 and turn the "
                     "option off (write 0 or none for that)");
        else if (rc != 0)
            snprintf(why, whylen, "not a byte size");
        else if (d->hi > 0 && (double)out->u > d->hi)
            snprintf(why, whylen, "out of range");
        else
            return 0;
        return -1;
    }
    case T_STRING:
        if (text[0] == '\0') {
            out->s = (char *)empty_string;
            return 0;
        }
        /* As given: a name or a path may legitimately hold blanks. */
        out->s = strdup(text);
        return out->s == NULL ? -ENOMEM : 0;
    case T_ENUM:
        for (size_t i = 0; i < N_WORDS; i++)
            if (words[i].opt == opt && word_is(s, e, words[i].word)) {
                out->i = words[i].value;
                return 0;
            }
        snprintf(why, whylen, "unknown word");
        return -1;
    case T_LEVEL:
        if (n < sizeof tmp && ft_log_level_parse(tmp, &out->i) == 0)
            return 0;
        snprintf(why, whylen, "unknown log level");
        return -1;
    case T_LIST:
        return list_parse(text, &out->l);
    }
    return -1;
}

static void *field_of(ft_config_t *cfg, int opt)
{
    return (char *)cfg + options[opt].offset;
}

static const void *cfield_of(const ft_config_t *cfg, int opt)
{
    return (const char *)cfg + options[opt].offset;
}

static void release_value(ft_config_t *cfg, int opt)
{
    void *f = field_of(cfg, opt);
    if (options[opt].type == T_STRING) {
        const char **s = f;
        if (*s != NULL && *s != empty_string)
            free((char *)*s);
        *s = empty_string;
    } else if (options[opt].type == T_LIST) {
        ft_config_list_t *l = f;
        free(l->items);
        l->items = NULL;
        l->n = 0;
    }
}

/* Stores a parsed value, releasing the one it replaces. */
static void store_value(ft_config_t *cfg, int opt, value_t *v)
{
    void *f = field_of(cfg, opt);
    switch (options[opt].type) {
    case T_BOOL: *(bool *)f = v->b; break;
    case T_INT:
    case T_ENUM:
    case T_LEVEL: *(int *)f = v->i; break;
    case T_FLOAT: *(double *)f = v->f; break;
    case T_SIZE: *(uint64_t *)f = v->u; break;
    case T_STRING:
        release_value(cfg, opt);
        *(const char **)f = v->s;
        break;
    case T_LIST:
        release_value(cfg, opt);
        *(ft_config_list_t *)f = v->l;
        break;
    }
}

/* Appends the items of *add to the list option (an INI continuation line). */
static int list_append(ft_config_t *cfg, int opt, const ft_config_list_t *add)
{
    ft_config_list_t *l = field_of(cfg, opt);
    char joined[8192];
    char *buf = joined;
    size_t need = 2;
    for (size_t i = 0; i < l->n; i++)
        need += strlen(l->items[i]) + 1;
    for (size_t i = 0; i < add->n; i++)
        need += strlen(add->items[i]) + 1;
    if (need > sizeof joined && (buf = malloc(need)) == NULL)
        return -ENOMEM;
    sbuf_t sb = {buf, 0, need};
    buf[0] = '\0';
    for (size_t i = 0; i < l->n; i++)
        sb_printf(&sb, "%s,", l->items[i]);
    for (size_t i = 0; i < add->n; i++)
        sb_printf(&sb, "%s,", add->items[i]);
    value_t v;
    int rc = list_parse(buf, &v.l);
    if (buf != joined)
        free(buf);
    if (rc == 0)
        store_value(cfg, opt, &v);
    return rc;
}

const char *ft_config_format_value(const ft_config_t *cfg, ft_config_opt_t opt, char *buf,
                                   size_t len)
{
    const opt_desc_t *d = &options[opt];
    const void *f = cfield_of(cfg, opt);
    bool none_ok = d->flags & FT_OPT_NONE_OK;
    buf[0] = '\0';
    switch (d->type) {
    case T_BOOL: snprintf(buf, len, "%s", *(const bool *)f ? "true" : "false"); break;
    case T_INT: snprintf(buf, len, "%d", *(const int *)f); break;
    case T_FLOAT: {
        double v = *(const double *)f;
        if (none_ok && v < 0)
            snprintf(buf, len, "none");
        else
            snprintf(buf, len, "%g", v);
        break;
    }
    case T_SIZE: {
        uint64_t v = *(const uint64_t *)f;
        if (v == 0)
            snprintf(buf, len, "none");
        else
            ft_size_format(v, buf, len);
        break;
    }
    case T_STRING: {
        const char *s = *(const char *const *)f;
        snprintf(buf, len, "%s", (s[0] == '\0' && none_ok) ? "none" : s);
        break;
    }
    case T_ENUM: snprintf(buf, len, "%s", ft_config_word_name(*(const int *)f)); break;
    case T_LEVEL: snprintf(buf, len, "%s", ft_log_level_name(*(const int *)f)); break;
    case T_LIST: {
        const ft_config_list_t *l = f;
        if (l->n == 0)
            snprintf(buf, len, "none");
        else
            list_join(l, buf, len);
        break;
    }
    }
    return buf;
}

/* ---- layers -------------------------------------------------------------------- */

typedef struct {
    ft_config_t *cfg;
    ft_config_diag_t *diag;
    bool warned_not_impl[FT_CONFIG_N_OPTIONS]; /* one warning per option, all layers */
} loader_t;

/* Text of a source, as printed: "default", "file PATH:LINE", "env", or the origin. */
const char *ft_config_source_text(const ft_config_t *cfg, ft_config_opt_t opt, char *buf,
                                  size_t len)
{
    const ft_config_source_t *src = &cfg->source[opt];
    switch (src->kind) {
    case FT_CONFIG_SRC_DEFAULT:
        if (src->origin[0] != '\0')
            snprintf(buf, len, "default, %s", src->origin);
        else
            snprintf(buf, len, "default");
        break;
    case FT_CONFIG_SRC_FILE: snprintf(buf, len, "file %s:%u", cfg->config_file, src->line); break;
    case FT_CONFIG_SRC_ENV: snprintf(buf, len, "env"); break;
    case FT_CONFIG_SRC_EXPLICIT: snprintf(buf, len, "%s", src->origin); break;
    }
    return buf;
}

/* Parses and stores one value from a layer; on failure records an error whose text
 * starts with `where` ("FT_X=v", "PATH:LINE: key=v", "ORIGIN: NAME=v") and names
 * what is accepted. Returns 0, -1 (invalid) or -ENOMEM. */
static int apply(loader_t *ld, int opt, const char *text, ft_config_src_kind_t kind,
                 unsigned line, const char *origin, const char *where)
{
    value_t v;
    char why[200], acc[512];
    if (kind != FT_CONFIG_SRC_DEFAULT && (options[opt].flags & FT_OPT_NOT_IMPL) &&
        !ld->warned_not_impl[opt]) {
        ld->warned_not_impl[opt] = true;
        diag_add(ld->diag, false, "%s: not implemented yet; FlexTensor ignores it", where);
    }
    int rc = parse_value(opt, text, &v, why, sizeof why);
    if (rc == -ENOMEM) {
        diag_add(ld->diag, true, "%s: out of memory", where);
        return rc;
    }
    if (rc != 0) {
        diag_add(ld->diag, true, "%s: %s (accepted: %s)", where, why,
                 accepted_text(opt, acc, sizeof acc));
        if (opt == FT_CONFIG_OPT_ENABLED)
            ld->cfg->enabled_valid = false;
        return rc;
    }
    store_value(ld->cfg, opt, &v);
    ft_config_source_t *src = &ld->cfg->source[opt];
    src->kind = kind;
    src->line = line;
    snprintf(src->origin, sizeof src->origin, "%s", origin ? origin : "");
    if (opt == FT_CONFIG_OPT_ENABLED)
        ld->cfg->enabled_valid = true;
    return 0;
}

static void load_defaults(loader_t *ld)
{
    for (int i = 0; i < FT_CONFIG_N_OPTIONS; i++) {
        char where[128];
        snprintf(where, sizeof where, "built-in default %s=%s", options[i].env, options[i].def);
        /* A default that fails to parse is a bug of options.def; a test keeps it out. */
        apply(ld, i, options[i].def, FT_CONFIG_SRC_DEFAULT, 0, NULL, where);
    }
}

/* -- the INI file -- */

#define INI_MAX_LINE_LEN 65536

typedef struct {
    loader_t *ld;
    FILE *fp;
    const char *path;
    unsigned line;       /* number of the line being read */
    bool at_line_start;  /* the last chunk ended a line */
    size_t line_len;     /* characters of the current line so far */
    bool continuation;   /* the current line starts with a blank (inih: multi-line) */
    bool have_key;       /* a key line came before in this section (continuations) */
    bool seen_section;   /* [flextensor] seen */
    bool in_flextensor;
    char warned_section[64]; /* the unknown section last warned about */
    unsigned first_line[FT_CONFIG_N_OPTIONS];
    unsigned error_line; /* last line with a syntax error of ours */
} ini_state_t;

/* Looks at the start of each line before inih does, to count lines (inih's handler
 * gets no line number in this build), tell continuation lines from duplicate keys,
 * find the sections and report every malformed line, not only the first. */
static void classify_line(ini_state_t *st, const char *chunk)
{
    const char *p = chunk;
    st->continuation = (*p == ' ' || *p == '\t');
    while (*p == ' ' || *p == '\t')
        p++;
    if (p == chunk && st->line == 1 && (unsigned char)p[0] == 0xEF &&
        (unsigned char)p[1] == 0xBB && (unsigned char)p[2] == 0xBF)
        p += 3; /* UTF-8 byte order mark */
    if (*p == '\0' || *p == '\n' || *p == '\r' || *p == ';' || *p == '#')
        return;
    if (st->continuation && st->have_key)
        return;
    if (*p == '[') {
        const char *e = strchr(p, ']');
        st->have_key = false;
        if (e == NULL) {
            diag_add(st->ld->diag, true, "%s:%u: section header without ']'", st->path, st->line);
            st->error_line = st->line;
            st->in_flextensor = false;
            return;
        }
        const char *a = p + 1, *b = e;
        trim(&a, &b);
        st->in_flextensor = word_is(a, b, "flextensor");
        st->seen_section |= st->in_flextensor;
        return;
    }
    const char *eq = strpbrk(p, "=:");
    if (eq == NULL) {
        char sh[128];
        char text[128];
        size_t n = strcspn(p, "\r\n");
        snprintf(text, sizeof text, "%.*s", (int)(n < 100 ? n : 100), p);
        diag_add(st->ld->diag, true,
                 "%s:%u: '%s': not a key = value line (accepted: key = value, [section], "
                 "or a comment starting with ; or #)",
                 st->path, st->line, show(text, sh, sizeof sh));
        st->error_line = st->line;
        return;
    }
    st->have_key = true;
}

static char *ini_read(char *str, int num, void *stream)
{
    ini_state_t *st = stream;
    char *r = fgets(str, num, st->fp);
    if (r == NULL)
        return NULL;
    size_t len = strlen(r);
    if (st->at_line_start) {
        st->line++;
        st->line_len = 0;
        classify_line(st, r);
    }
    st->line_len += len;
    st->at_line_start = len > 0 && r[len - 1] == '\n';
    if (!st->at_line_start && st->line_len + 3 >= INI_MAX_LINE_LEN && !feof(st->fp)) {
        diag_add(st->ld->diag, true, "%s:%u: line longer than %d characters", st->path,
                 st->line, INI_MAX_LINE_LEN - 3);
        st->error_line = st->line;
    }
    return r;
}

static int ini_handler_fn(void *user, const char *section, const char *name, const char *value)
{
    ini_state_t *st = user;
    loader_t *ld = st->ld;
    char sh[128], where[512];

    if (section[0] == '\0') {
        diag_add(ld->diag, true,
                 "%s:%u: %s = %s: key outside any section (accepted: keys under [flextensor])",
                 st->path, st->line, name, show(value, sh, sizeof sh));
        return 1;
    }
    if (strcasecmp(section, "flextensor") != 0) {
        /* One warning per foreign section: a file shared with other tools may carry
         * many keys there. */
        if (strcmp(st->warned_section, section) != 0) {
            snprintf(st->warned_section, sizeof st->warned_section, "%s", section);
            diag_add(ld->diag, false,
                     "%s:%u: key '%s' in section [%s] ignored, with the rest of that "
                     "section (FlexTensor reads only [flextensor])",
                     st->path, st->line, name, section);
        }
        return 1;
    }
    const char *key = name;
    if (strncasecmp(key, "FT_", 3) == 0)
        key += 3;
    int opt = find_option(key, true);
    if (opt < 0) {
        char lower[64], sg[96];
        int near_opt = nearest_option(key);
        const char *near = options[near_opt].name;
        size_t i = 0;
        for (; near[i] && i + 1 < sizeof lower; i++)
            lower[i] = (char)tolower((unsigned char)near[i]);
        lower[i] = '\0';
        diag_add(ld->diag, false, "%s:%u: unknown key '%s' in [flextensor] ignored (%s)", st->path,
                 st->line, name, suggest(key, near_opt, lower, sg, sizeof sg));
        return 1;
    }
    snprintf(where, sizeof where, "%s:%u: %s=%s", st->path, st->line, name,
             show(value, sh, sizeof sh));
    if (st->continuation) {
        if (options[opt].type != T_LIST) {
            diag_add(ld->diag, true,
                     "%s: continuation line of a single-valued key (accepted: one line; only "
                     "lists may continue on indented lines)",
                     where);
            return 1;
        }
        value_t v;
        char why[200];
        int rc = parse_value(opt, value, &v, why, sizeof why);
        if (rc == 0) {
            rc = list_append(ld->cfg, opt, &v.l);
            free(v.l.items);
        }
        if (rc != 0)
            diag_add(ld->diag, true, "%s: out of memory", where);
        return 1;
    }
    if (st->first_line[opt] != 0)
        diag_add(ld->diag, true, "%s: %s set again (first at line %u; accepted: once per file)",
                 where, name, st->first_line[opt]);
    else
        st->first_line[opt] = st->line;
    apply(ld, opt, value, FT_CONFIG_SRC_FILE, st->line, NULL, where);
    return 1;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

/* The line of the first NUL byte of fp, or 0; fp is rewound. inih hands values over as
 * C strings, so a NUL cuts one short without a word ("1\0GiB" read as 1 byte): such a
 * file is refused whole before inih sees it. */
static unsigned find_nul(FILE *fp)
{
    unsigned line = 1, found = 0;
    int c;
    while (found == 0 && (c = getc(fp)) != EOF) {
        if (c == '\0')
            found = line;
        else if (c == '\n')
            line++;
    }
    rewind(fp);
    return found;
}

static void load_file(loader_t *ld, const char *path, const char *named_by)
{
    char named[4200];
    if (strcmp(named_by, "FT_CONFIG_FILE") == 0)
        snprintf(named, sizeof named, "FT_CONFIG_FILE=%s", path);
    else
        snprintf(named, sizeof named, "config file %s", path);
    const char *acc = "a readable INI file with a [flextensor] section";

    if (strlen(path) >= sizeof ld->cfg->config_file) {
        diag_add(ld->diag, true, "%.200s...: path too long (accepted: %s)", named, acc);
        return;
    }
    snprintf(ld->cfg->config_file, sizeof ld->cfg->config_file, "%s", path);
    FILE *fp = fopen(path, "r");
    if (fp == NULL) {
        diag_add(ld->diag, true, "%s: cannot open: %s (accepted: %s)", named, strerror(errno), acc);
        return;
    }
    struct stat stb;
    if (fstat(fileno(fp), &stb) == 0 && S_ISDIR(stb.st_mode)) {
        diag_add(ld->diag, true, "%s: is a directory (accepted: %s)", named, acc);
        fclose(fp);
        return;
    }

    unsigned nul_line = find_nul(fp);
    if (nul_line != 0) {
        diag_add(ld->diag, true, "%s:%u: NUL byte in the file; the file is not read (accepted: "
                 "a text INI file)", path, nul_line);
        fclose(fp);
        return;
    }

    ini_state_t st;
    memset(&st, 0, sizeof st);
    st.ld = ld;
    st.fp = fp;
    st.path = path;
    st.at_line_start = true;
    /* Heap line buffer that grows: pattern lists can exceed inih's 200-character stack
     * line. These are globals of our private static copy of inih. */
    ini_use_stack = false;
    ini_allow_realloc = true;
    ini_max_line = INI_MAX_LINE_LEN;
    ini_allow_multiline = true;
    ini_stop_on_first_error = false;
    int rc = ini_parse_stream(ini_read, &st, ini_handler_fn, &st);
    if (ferror(fp))
        diag_add(ld->diag, true, "%s: read error: %s", named, strerror(errno));
    fclose(fp);
    if (rc == -2) {
        diag_add(ld->diag, true, "%s: out of memory while reading", named);
        return;
    }
    if (rc > 0 && (unsigned)rc != st.error_line && st.error_line == 0)
        diag_add(ld->diag, true, "%s:%d: syntax error", path, rc);
    if (!st.seen_section) {
        bool other_format = ends_with(path, ".json") || ends_with(path, ".yaml") ||
                            ends_with(path, ".yml");
        diag_add(ld->diag, true, "%s: no [flextensor] section (accepted: %s%s)", path, acc,
                 other_format ? "; JSON and YAML files are read by the Python library only"
                              : "");
    }
}

/* -- the environment -- */

static bool is_foreign(const char *var)
{
    for (size_t i = 0; i < sizeof foreign_prefixes / sizeof foreign_prefixes[0]; i++)
        if (strncmp(var, foreign_prefixes[i], strlen(foreign_prefixes[i])) == 0)
            return true;
    return false;
}

/* First FT_CONFIG_FILE of envp (getenv's choice when a name repeats), or NULL. */
static const char *env_config_file(char *const *envp)
{
    for (size_t i = 0; envp != NULL && envp[i] != NULL; i++)
        if (strncmp(envp[i], "FT_CONFIG_FILE=", 15) == 0)
            return envp[i] + 15;
    return NULL;
}

static void load_env(loader_t *ld, char *const *envp)
{
    bool seen[FT_CONFIG_N_OPTIONS] = {false};
    for (size_t i = 0; envp != NULL && envp[i] != NULL; i++) {
        const char *var = envp[i];
        if (strncmp(var, "FT_", 3) != 0)
            continue;
        const char *eq = strchr(var, '=');
        if (eq == NULL)
            continue;
        char name[128], sh[128], where[512];
        size_t n = (size_t)(eq - var - 3);
        if (n >= sizeof name)
            n = sizeof name - 1;
        memcpy(name, var + 3, n);
        name[n] = '\0';
        const char *value = eq + 1;
        if (strcmp(name, "CONFIG_FILE") == 0 || is_foreign(var))
            continue;
        int opt = find_option(name, false);
        if (opt < 0) {
            int near = nearest_option(name);
            char sg[96];
            diag_add(ld->diag, false, "unknown variable FT_%s=%s ignored (%s)", name,
                     show(value, sh, sizeof sh),
                     suggest(name, near, options[near].env, sg, sizeof sg));
            continue;
        }
        if (seen[opt])
            continue; /* getenv would see the first */
        seen[opt] = true;
        snprintf(where, sizeof where, "%s=%s", options[opt].env, show(value, sh, sizeof sh));
        apply(ld, opt, value, FT_CONFIG_SRC_ENV, 0, NULL, where);
    }
}

static void load_explicit(loader_t *ld, const ft_config_override_t *set, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *origin = set[i].origin ? set[i].origin : "explicit setting";
        const char *name = set[i].name ? set[i].name : "";
        const char *key = strncasecmp(name, "FT_", 3) == 0 ? name + 3 : name;
        char sh[128], where[512];
        int opt = find_option(key, true);
        if (opt < 0) {
            int near = nearest_option(key);
            char sg[96];
            diag_add(ld->diag, true, "%s: unknown option %s (%s)", origin, name,
                     suggest(key, near, options[near].name, sg, sizeof sg));
            continue;
        }
        if (set[i].value == NULL) {
            diag_add(ld->diag, true, "%s: %s: no value", origin, options[opt].name);
            continue;
        }
        snprintf(where, sizeof where, "%s: %s=%s", origin, options[opt].env,
                 show(set[i].value, sh, sizeof sh));
        apply(ld, opt, set[i].value, FT_CONFIG_SRC_EXPLICIT, 0, origin, where);
    }
}

/* Checks that involve two options, once every layer is applied. */
static void check_combinations(loader_t *ld)
{
    ft_config_t *cfg = ld->cfg;
    char s1[4200], s2[4200];
    if (cfg->min_blocks > cfg->num_blocks)
        diag_add(ld->diag, true,
                 "FT_MIN_BLOCKS=%d (%s) is greater than FT_NUM_BLOCKS=%d (%s) (accepted: "
                 "MIN_BLOCKS from 2 to NUM_BLOCKS)",
                 cfg->min_blocks, ft_config_source_text(cfg, FT_CONFIG_OPT_MIN_BLOCKS, s1, sizeof s1),
                 cfg->num_blocks, ft_config_source_text(cfg, FT_CONFIG_OPT_NUM_BLOCKS, s2, sizeof s2));
    /* Skipping discovery takes the units from a saved profile: without a folder to find
     * one in, the engine would have nothing to plan with. */
    if (cfg->skip_discovery && cfg->profile_dir[0] == '\0')
        diag_add(ld->diag, true,
                 "FT_SKIP_DISCOVERY=true (%s) needs a saved profile, and FT_PROFILE_DIR is not set "
                 "(accepted: false, or FT_PROFILE_DIR)",
                 ft_config_source_text(cfg, FT_CONFIG_OPT_SKIP_DISCOVERY, s1, sizeof s1));
    /* The namespace becomes part of a shm_open name: nothing in it may lead the name
     * out of the segment folder, or make it another namespace's (core/shmseg.h). */
    if (cfg->shm_namespace[0] != '\0' && !ft_shmseg_namespace_ok(cfg->shm_namespace))
        diag_add(ld->diag, true,
                 "FT_SHM_NAMESPACE=\"%.*s\" (%s) is not a valid namespace (accepted: 1 to %d characters of "
                 "A-Z a-z 0-9 . _ -, not starting with a dot, without \"..\")",
                 64, cfg->shm_namespace, ft_config_source_text(cfg, FT_CONFIG_OPT_SHM_NAMESPACE, s1, sizeof s1),
                 FT_SHMSEG_NAMESPACE_MAX);
    if (cfg->shm_enabled && cfg->shm_namespace[0] == '\0')
        diag_add(ld->diag, true,
                 "FT_SHM_ENABLED=true (%s) needs FT_SHM_NAMESPACE: the processes that share a copy "
                 "name it alike",
                 ft_config_source_text(cfg, FT_CONFIG_OPT_SHM_ENABLED, s1, sizeof s1));
}

/* Whether a secure-execution load has anything to ignore: an FT_ variable of ours
 * (FT_CONFIG_FILE included), a file or an explicit setting. */
static bool anything_to_ignore(char *const *envp, const char *file_path, size_t n_explicit)
{
    if (file_path != NULL || n_explicit > 0)
        return true;
    for (size_t i = 0; envp != NULL && envp[i] != NULL; i++)
        if (strncmp(envp[i], "FT_", 3) == 0 && !is_foreign(envp[i]))
            return true;
    return false;
}

/* ft_config_load, with the process's secure-execution status given. */
static int load(ft_config_t *cfg, char *const *envp, const char *file_path,
                const ft_config_override_t *explicit_settings, size_t n_explicit,
                ft_config_diag_t *diag, bool secure)
{
    static ft_config_diag_t discarded; /* a caller that passes no diag gets only rc */
    if (diag == NULL)
        diag = &discarded;
    memset(cfg, 0, sizeof *cfg);
    diag->n = diag->n_errors = diag->n_warnings = 0;
    for (int i = 0; i < FT_CONFIG_N_OPTIONS; i++)
        if (options[i].type == T_STRING)
            *(const char **)field_of(cfg, i) = empty_string;
    cfg->config_file_origin = "";
    cfg->enabled_valid = true;
    cfg->loaded = true;
    loader_t ld = {cfg, diag, {false}};

    load_defaults(&ld);

    if (secure) {
        /* A setuid or setgid program runs with its caller's environment: a library
         * inside it must not let that environment choose a file to read, a trace file
         * to write or what to do with the program's memory. Defaults only, with
         * FlexTensor off whatever ENABLED's default; said once, and only when something
         * was set. */
        snprintf(cfg->source[FT_CONFIG_OPT_ENABLED].origin, FT_CONFIG_ORIGIN_MAX,
                 "secure-execution process");
        if (anything_to_ignore(envp, file_path, explicit_settings ? n_explicit : 0))
            diag_add(diag, false,
                     "secure-execution process (setuid, setgid or file capabilities): every "
                     "FT_* variable and the config file are ignored; FlexTensor stays off");
        cfg->enabled = false;
        return 0;
    }

    const char *named_by = "explicit";
    if (file_path == NULL) {
        file_path = env_config_file(envp);
        named_by = "FT_CONFIG_FILE";
        if (file_path != NULL && (file_path[0] == '\0' || is_none(file_path, file_path + strlen(file_path))))
            file_path = NULL;
    }
    if (file_path != NULL) {
        cfg->config_file_origin = named_by;
        load_file(&ld, file_path, named_by);
        /* As the Python library: ENABLED defaults to true when a file is named (even
         * an unreadable one, so that the error stops the process), to false from the
         * environment alone. */
        if (cfg->source[FT_CONFIG_OPT_ENABLED].kind == FT_CONFIG_SRC_DEFAULT) {
            cfg->enabled = true;
            snprintf(cfg->source[FT_CONFIG_OPT_ENABLED].origin, FT_CONFIG_ORIGIN_MAX,
                     "a config file is named");
        }
    }

    load_env(&ld, envp);
    load_explicit(&ld, explicit_settings, explicit_settings ? n_explicit : 0);
    check_combinations(&ld);
    return diag->n_errors ? -1 : 0;
}

int ft_config_load(ft_config_t *cfg, char *const *envp, const char *file_path,
                   const ft_config_override_t *explicit_settings, size_t n_explicit,
                   ft_config_diag_t *diag)
{
    return load(cfg, envp, file_path, explicit_settings, n_explicit, diag,
                getauxval(AT_SECURE) != 0);
}

int ft_config_load_secure(ft_config_t *cfg, char *const *envp, const char *file_path,
                          const ft_config_override_t *explicit_settings, size_t n_explicit,
                          ft_config_diag_t *diag)
{
    return load(cfg, envp, file_path, explicit_settings, n_explicit, diag, true);
}

bool ft_config_enabled_requested(const ft_config_t *cfg)
{
    return cfg->enabled || !cfg->enabled_valid;
}

void ft_config_free(ft_config_t *cfg)
{
    if (!cfg->loaded)
        return;
    for (int i = 0; i < FT_CONFIG_N_OPTIONS; i++)
        release_value(cfg, i);
}

/* ---- output -------------------------------------------------------------------- */

/* Buffered writer over a descriptor; remembers a write failure. */
typedef struct {
    int fd;
    int failed;
    size_t len;
    char buf[4096];
} out_t;

static void out_flush(out_t *o)
{
    if (ft_log_write_all(o->fd, o->buf, o->len) != 0)
        o->failed = 1;
    o->len = 0;
}

static void out_str(out_t *o, const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        if (o->len == sizeof o->buf)
            out_flush(o);
        size_t k = sizeof o->buf - o->len;
        if (k > n)
            k = n;
        memcpy(o->buf + o->len, s, k);
        o->len += k;
        s += k;
        n -= k;
    }
}

static void out_printf(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_printf(out_t *o, const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    out_str(o, line);
}

static const char *config_file_source(const ft_config_t *cfg)
{
    if (cfg->config_file[0] == '\0')
        return "default";
    return strcmp(cfg->config_file_origin, "explicit") == 0 ? "explicit" : "env";
}

void ft_config_print(const ft_config_t *cfg, int fd)
{
    static out_t o; /* 4 KiB: kept off the stack of an early caller */
    o.fd = fd;
    o.failed = 0;
    o.len = 0;
    int width = (int)strlen("FT_CONFIG_FILE");
    for (int i = 0; i < FT_CONFIG_N_OPTIONS; i++)
        if ((int)strlen(options[i].env) > width)
            width = (int)strlen(options[i].env);
    out_printf(&o, "%-*s = %-20s (%s)\n", width, "FT_CONFIG_FILE",
               cfg->config_file[0] ? cfg->config_file : "none", config_file_source(cfg));
    for (int i = 0; i < FT_CONFIG_N_OPTIONS; i++) {
        char val[1024], src[4200];
        out_printf(&o, "%-*s = %-20s (%s%s)\n", width, options[i].env,
                   ft_config_format_value(cfg, (ft_config_opt_t)i, val, sizeof val),
                   ft_config_source_text(cfg, i, src, sizeof src),
                   (options[i].flags & FT_OPT_NOT_IMPL) ? "; not implemented yet" : "");
    }
    out_flush(&o);
}

/* Markdown table cells: '|' would end the cell. */
static void out_cell(out_t *o, const char *s)
{
    char c[2] = {0, 0};
    for (; *s; s++) {
        if (*s == '|') {
            out_str(o, "\\|");
        } else {
            c[0] = *s;
            out_str(o, c);
        }
    }
}

int ft_config_write_doc(int fd)
{
    static out_t o;
    o.fd = fd;
    o.failed = 0;
    o.len = 0;
    out_str(&o,
            "# FlexTensor configuration\n"
            "\n"
            "<!-- Generated by build/bin/ft-config-doc from config/options.def: do not edit;\n"
            "     `make docs` regenerates it and `make check` fails when it is stale. -->\n"
            "\n"
            "Every option is an environment variable `FT_<NAME>` and a key `<name>` (any case)\n"
            "in the `[flextensor]` section of an INI file. The file is `FT_CONFIG_FILE`, or the\n"
            "one given explicitly (`ft-run --config PATH`). Precedence, lowest first:\n"
            "\n"
            "1. the defaults below;\n"
            "2. the INI file;\n"
            "3. `FT_*` environment variables;\n"
            "4. explicit settings (`ft-run` flags).\n"
            "\n"
            "Values: booleans are `true/false`, `1/0`, `yes/no` or `on/off` in any case;\n"
            "optional values take `none` or `null`; words are matched in any case; lists are\n"
            "comma-separated (in the INI file they may continue on indented lines); sizes take\n"
            "`B`, `K`/`KiB`, `M`/`MiB`, `G`/`GiB`, `T`/`TiB` (powers of 1024) or `KB`, `MB`,\n"
            "`GB`, `TB` (powers of 1000), and a fraction (`1.5GiB`). A number without a unit\n"
            "is bytes and must be 0 or at least 1 MiB: `8192` is an error that asks whether\n"
            "`8192MiB` was meant (write `8192B` for bytes). A value that is not 0 but less\n"
            "than a byte (`0.0001K`) is an error too, since 0 turns a size option off.\n"
            "\n"
            "Errors name the variable (or `file:line`), the value given and what is accepted;\n"
            "all of them are reported, not only the first. With offloading requested, an\n"
            "invalid configuration stops the process with exit status 2 before the application\n"
            "runs. An unknown `FT_` variable or `[flextensor]` key is a warning naming the\n"
            "nearest option. `ft-run --print-config` shows every effective value and where it\n"
            "came from (`default`, `file PATH:LINE`, `env`, or the explicit flag).\n"
            "\n"
            "Every option is read once, when the library starts (like the Python library's\n"
            "one-shot fields); changing a variable afterwards has no effect on that process.\n"
            "\n"
            "In a secure-execution process (a setuid or setgid program, or one that gained\n"
            "file capabilities: `getauxval(AT_SECURE)`), every `FT_*` variable and the config\n"
            "file are ignored and FlexTensor stays off; one warning says so when any was set.\n"
            "\n");
    int any_not_impl = 0;
    for (int i = 0; i < FT_CONFIG_N_OPTIONS; i++)
        any_not_impl |= (options[i].flags & FT_OPT_NOT_IMPL) != 0;
    if (any_not_impl)
        out_str(&o, "Options marked **Not implemented yet** are accepted (the Python library has\n"
                    "them) but nothing reads them: setting one prints a warning naming it, and\n"
                    "`--print-config` says so after its source.\n"
                    "\n");
    out_str(&o,
            "| Variable | Type | Default | Accepted | Description |\n"
            "|---|---|---|---|---|\n"
            "| `FT_CONFIG_FILE` | path | `\"\"` | a readable INI file with a [flextensor] section | "
            "The INI file to read (environment only; `ft-run --config` names one explicitly). "
            "Naming one makes `FT_ENABLED` default to true. |\n");
    for (int i = 0; i < FT_CONFIG_N_OPTIONS; i++) {
        const opt_desc_t *d = &options[i];
        char acc[512];
        out_printf(&o, "| `%s` | %s | `%s` | ", d->env, type_names[d->type],
                   d->def[0] ? d->def : "\"\"");
        out_cell(&o, accepted_text(i, acc, sizeof acc));
        out_str(&o, " | ");
        if (d->flags & FT_OPT_NOT_IMPL)
            out_str(&o, "**Not implemented yet**: nothing reads it; setting it prints a "
                        "warning. ");
        out_cell(&o, d->doc);
        if (d->type == T_ENUM)
            for (size_t w = 0; w < N_WORDS; w++)
                if (words[w].opt == i && words[w].doc != NULL) {
                    out_printf(&o, " `%s`: ", words[w].word);
                    out_cell(&o, words[w].doc);
                    out_str(&o, ".");
                }
        out_str(&o, " |\n");
    }
    out_str(&o,
            "\n"
            "## Example\n"
            "\n"
            "```ini\n"
            "[flextensor]\n"
            "enabled = true\n"
            "gpu_mem_limit = 8GiB\n"
            "num_blocks = 4\n"
            "include_patterns = unit.*\n"
            "log_level = info\n"
            "```\n");
    out_flush(&o);
    return o.failed ? -1 : 0;
}
