/* config.h - FlexTensor's configuration: defaults < INI file ([flextensor]) < FT_*
 * environment variables < explicit settings (ft-run's flags, say).
 *
 * Owns: ft_config_t (generated from options.def), the loader, the diagnostics, the
 * effective-configuration print-out, the documentation generator. Size options are
 * read with core/size.h's grammar.
 *
 * The loader never exits and never prints: it returns failure and the collected
 * messages; the caller prints them (ft_config_diag_print) and decides (the shim exits
 * with status 2 when offloading was requested, ft_config_enabled_requested).
 * It is the only place that reads the environment, and it reads it from the envp it
 * is given, so tests need no setenv. Not thread-safe: call it once, at start-up.
 */
#ifndef FT_CONFIG_H
#define FT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


/* Flags of an FT_OPT row (options.def). */
#define FT_OPT_NONE_OK 1u /* "none"/"null" unset the value */
#define FT_OPT_LO_OPEN 2u /* the lower bound is excluded */
#define FT_OPT_NOT_IMPL 4u /* nothing reads it yet: setting it warns, the print-out and
                              the documentation say so */

/* Option ids: FT_CONFIG_OPT_<NAME>, in table order. */
typedef enum {
#define FT_OPT(NAME, field, TYPE, def, lo, hi, flags, doc) FT_CONFIG_OPT_##NAME,
#include "config/options.def"
    FT_CONFIG_N_OPTIONS
} ft_config_opt_t;

/* Enum words: FT_<OPTION>_<WORD>, e.g. FT_STRATEGY_GREEDY. Values are unique across
 * options (a constant of the wrong option never compares equal). */
enum {
    FT_CONFIG_WORD_NONE = 0,
#define FT_WORD(NAME, CONST, word, doc) FT_##NAME##_##CONST,
#include "config/options.def"
};

/* A comma list: items trimmed, empty items dropped; n == 0 when unset. One allocation
 * holds the pointers and the text. */
typedef struct {
    size_t n;
    char **items;
} ft_config_list_t;

/* Where an option's effective value came from. */
typedef enum {
    FT_CONFIG_SRC_DEFAULT = 0,
    FT_CONFIG_SRC_FILE,
    FT_CONFIG_SRC_ENV,
    FT_CONFIG_SRC_EXPLICIT,
} ft_config_src_kind_t;

#define FT_CONFIG_ORIGIN_MAX 64

typedef struct {
    ft_config_src_kind_t kind;
    unsigned line;                     /* FILE: line in cfg->config_file */
    char origin[FT_CONFIG_ORIGIN_MAX]; /* EXPLICIT: the caller's description; DEFAULT:
                                          a note ("config file given") or "" */
} ft_config_source_t;

#define FT_CONFIG_CTYPE_BOOL bool
#define FT_CONFIG_CTYPE_INT int
#define FT_CONFIG_CTYPE_FLOAT double      /* < 0 when unset (FT_OPT_NONE_OK) */
#define FT_CONFIG_CTYPE_SIZE uint64_t     /* bytes; 0 = none */
#define FT_CONFIG_CTYPE_STRING const char * /* never NULL; "" when unset */
#define FT_CONFIG_CTYPE_ENUM int          /* an FT_<OPTION>_<WORD> constant */
#define FT_CONFIG_CTYPE_LEVEL int         /* an FT_LOG_* level (core/log.h) */
#define FT_CONFIG_CTYPE_LIST ft_config_list_t

typedef struct ft_config {
#define FT_OPT(NAME, field, TYPE, def, lo, hi, flags, doc) FT_CONFIG_CTYPE_##TYPE field;
#include "config/options.def"

    ft_config_source_t source[FT_CONFIG_N_OPTIONS];
    /* The file read, "" when none; where it was named ("FT_CONFIG_FILE", or "explicit"
     * when the caller passed the path). */
    char config_file[4096];
    const char *config_file_origin;
    /* false when ENABLED's own value was invalid (cfg->enabled then keeps the value of
     * the layer below); see ft_config_enabled_requested. */
    bool enabled_valid;
    bool loaded; /* set by ft_config_load: ft_config_free may release */
} ft_config_t;

/* An explicit setting: name with or without "FT_", any case. */
typedef struct {
    const char *name;
    const char *value;
    const char *origin; /* shown as the source, e.g. "ft-run --gpu-mem" */
} ft_config_override_t;

/* Collected errors and warnings, fixed size: the caller keeps it on the stack or in a
 * static. Counts include messages that did not fit. */
#define FT_CONFIG_DIAG_MAX 32
#define FT_CONFIG_DIAG_TEXT 400
typedef struct ft_config_diag {
    unsigned n_errors;
    unsigned n_warnings;
    unsigned n; /* stored in msg[] */
    struct {
        bool is_error;
        char text[FT_CONFIG_DIAG_TEXT]; /* without the "flextensor: error: " prefix */
    } msg[FT_CONFIG_DIAG_MAX];
} ft_config_diag_t;

/* Loads the configuration into *cfg: defaults, then the INI file (file_path, or
 * FT_CONFIG_FILE from envp when NULL; no file when neither), then FT_* variables of
 * envp (NULL: none), then explicit_settings in order. *diag is reset and receives
 * every error and warning found, not only the first. On an invalid value the option
 * keeps the value of the layer below, so cfg is always complete and usable for
 * printing. *cfg need not be initialized (a previous load's memory is not released:
 * call ft_config_free first); diag may be NULL. Returns 0 when there are no errors
 * (warnings allowed), -1 otherwise
 * (-ENOMEM style failures are reported as errors too). Call ft_config_free after, in
 * both cases.
 * In a secure-execution process (getauxval(AT_SECURE): a setuid or setgid program, or
 * one that gained file capabilities) envp, the file and the explicit settings are all
 * ignored: *cfg holds the defaults (ENABLED false), one warning says so when any FT_*
 * variable, file or setting was given, and the result is 0. */
int ft_config_load(ft_config_t *cfg, char *const *envp, const char *file_path,
                   const ft_config_override_t *explicit_settings, size_t n_explicit,
                   ft_config_diag_t *diag);

/* ft_config_load as in a secure-execution process, whatever this one is: for the
 * tests, which cannot easily run setuid. */
int ft_config_load_secure(ft_config_t *cfg, char *const *envp, const char *file_path,
                          const ft_config_override_t *explicit_settings, size_t n_explicit,
                          ft_config_diag_t *diag);

/* Whether offloading was asked for, usable after a failed load: true when ENABLED
 * is true, or when its value is invalid (someone tried to set it, so the caller
 * should stop rather than silently pass through). */
bool ft_config_enabled_requested(const ft_config_t *cfg);

/* Releases the strings and lists; cfg then holds defaults-free garbage. Safe on a
 * zeroed struct and twice. */
void ft_config_free(ft_config_t *cfg);

/* One line per message: "flextensor: error: TEXT" / "flextensor: warning: TEXT",
 * and a count of the messages that did not fit. */
void ft_config_diag_print(const ft_config_diag_t *diag, int fd);

/* Every option: "FT_NAME = value   (source)", source being "default", "file PATH:LINE",
 * "env" or the explicit origin; the config file first. */
void ft_config_print(const ft_config_t *cfg, int fd);

/* The source of one option as ft_config_print shows it, into buf. */
const char *ft_config_source_text(const ft_config_t *cfg, ft_config_opt_t opt, char *buf,
                                  size_t len);

/* The whole of docs/configuration.md (markdown), generated from options.def.
 * 0 on success, -1 on a write error. */
int ft_config_write_doc(int fd);

/* Option metadata, for tools (ft-run --help): NULL past the end. */
const char *ft_config_option_name(ft_config_opt_t opt); /* "GPU_MEM_LIMIT" */
const char *ft_config_option_doc(ft_config_opt_t opt);

/* The word of an ENUM constant ("greedy" for FT_STRATEGY_GREEDY), "?" if none. */
const char *ft_config_word_name(int word);

/* The value of option `opt` formatted as the parser accepts it (into buf). */
const char *ft_config_format_value(const ft_config_t *cfg, ft_config_opt_t opt, char *buf,
                                   size_t len);

/* Edit distance (case-insensitive) between two names, capped at 64 characters each;
 * exposed for the tests. */
unsigned ft_config_edit_distance(const char *a, const char *b);

#endif
