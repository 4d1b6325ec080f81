/* options.h -- one table of options drives flags, environment, config file,
 * JSON dump and --help, for every gpupool program.
 *
 * A program describes each option once (struct option_spec) and points it
 * at a field of its own configuration struct. options_load() then fills the
 * struct from, in increasing precedence:
 *
 *     default  <  config file  <  environment  <  command line
 *
 * Each source overwrites only the fields it names. Every value, whatever its
 * source, goes through the same bounded parser; only the wording of an error
 * differs: `invalid value "x" for --port (PORT): want an integer in [1, 65535]`
 * for flags and environment, `file.yaml:7: invalid value "x" for server.port:
 * ...` for the file.
 *
 * Command line (GNU / urfave-cli style): `--flag=value`, `--flag value`,
 * `-v N`, `-v=N` (one-letter names take one dash, longer ones one or two),
 * bool flags without a value mean true (`--flag=false` to clear), a repeated
 * string-list or enum-set flag accumulates, any other takes its last value.
 * Unknown flags are all named in one error. Positional arguments are refused.
 *
 * Usage:
 *
 *     struct server_config { int port; char *kubeconfig; int verbosity; bool dry_run; };
 *
 *     static const struct option_spec specs[] = {
 *         {.flag = "port", .env = {"PORT"}, .type = OPT_INT,
 *          .offset = offsetof(struct server_config, port), .def = "8888",
 *          .min = 1, .max = 65535, .help = "TCP port to listen on"},
 *         {.flag = "kubeconfig", .env = {"KUBECONFIG"}, .type = OPT_STRING,
 *          .offset = offsetof(struct server_config, kubeconfig), .def = "",
 *          .help = "kubeconfig file; empty = in-cluster"},
 *         {.flag = "v", .env = {"LOG_LEVEL"}, .type = OPT_INT,
 *          .offset = offsetof(struct server_config, verbosity), .def = "0",
 *          .help = "log verbosity"},
 *         {.flag = "dry-run", .type = OPT_BOOL,
 *          .offset = offsetof(struct server_config, dry_run), .def = "false",
 *          .help = "print the decisions, change nothing"},
 *         {.flag = "help", .alias = {"h"}, .type = OPT_HELP, .help = "show help"},
 *     };
 *     static const struct options_table table = {
 *         .program = "gpupool-scheduler-extender", .version = GP_VERSION,
 *         .summary = "The gpupool scheduler extender.",
 *         .specs = specs, .count = sizeof specs / sizeof specs[0],
 *     };
 *
 *     struct server_config cfg;
 *     char err[512];
 *     enum options_result r = options_load(&table, &cfg, argc, argv, envp, err, sizeof err);
 *     if (r != OPTIONS_OK) {            // OPTIONS_EXIT: --help / --version printed
 *         if (r == OPTIONS_ERROR)
 *             fprintf(stderr, "%s\n", err);
 *         return r == OPTIONS_EXIT ? 0 : 2;
 *     }
 *     ...
 *     options_free(&table, &cfg);
 *
 * Ownership: string fields (OPT_STRING, OPT_STRLIST) are malloc'd by the
 * engine and released by options_free(); everything else is stored in place.
 * The table and the values it points to are static and never freed.
 * Not thread-safe; a loaded struct is read-only by convention. */
#ifndef GP_OPTIONS_H
#define GP_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "compiler.h"

struct json_t;    /* jansson; include <jansson.h> to use options_to_json() */
struct ycfg_doc;  /* yamlcfg.h */
struct ycfg_node; /* yamlcfg.h */

#define OPTION_NO_FIELD SIZE_MAX /* .offset: parse and validate, then drop */

enum option_type {
    OPT_STRING,   /* char *; "" is a value (an empty env var sets it) */
    OPT_STRLIST,  /* char *; repeated flag / file list / commas joined with ',' */
    OPT_BOOL,     /* bool; true/false/1/0 (file also yes/no/on/off, unquoted) */
    OPT_INT,      /* int in [min, max]; max == 0 means INT_MAX */
    OPT_DURATION, /* int milliseconds >= min; Go syntax: "5s", "1m30s", "500ms" */
    OPT_ENUM,     /* int, the .value of one of .values */
    OPT_ENUM_SET, /* unsigned, OR of .values (bits); repeated / comma-separated */
    OPT_HOSTPORT, /* struct option_hostport: "HOST:PORT", "[IPv6]:PORT", ":PORT"; "" unset */
    OPT_CUSTOM,   /* parsed by .custom (e.g. NVIDIA's IMEX channel id list) */
    OPT_HELP,     /* action: print usage to stdout, options_load returns EXIT */
    OPT_VERSION,  /* action: print "<program> version <version> (commit <rev>)", returns EXIT */
};

/* An OPT_HOSTPORT field: the text as given (malloc'd, freed by
 * options_free; "" when unset) and its parts, split once at load. */
#define OPTION_HOST_LEN 256
struct option_hostport {
    char *text;
    char host[OPTION_HOST_LEN]; /* brackets stripped; "" = every interface */
    unsigned port;              /* 0-65535; 0 = any free port */
};

/* Splits "HOST:PORT", "[IPv6]:PORT" or ":PORT" (all interfaces); the port
 * must be 0-65535. -1 + why ("the port must be 0-65535", ...). */
GP_MUST_USE int options_parse_hostport(const char *text, char *host, size_t hostlen, unsigned *port,
                                       char *why, size_t whylen);

/* One accepted word of an OPT_ENUM / OPT_ENUM_SET option. */
struct option_value {
    const char *name;
    int value;
    /* Non-NULL: a word that is known (e.g. NVIDIA's) but refused; the text
     * says why and becomes the error message. */
    const char *unsupported;
};

/* An option type the engine does not know. parse() stores `text` into the
 * field (append: a further item of a list; an empty file list is parsed as
 * "" with append false); on error it writes what is wanted into why
 * ("want ...") and returns -1. A custom option must have a field. */
struct option_custom {
    int (*parse)(void *field, const char *text, bool append, char *why, size_t whylen);
    struct json_t *(*to_json)(const void *field); /* new reference */
    const char *type_name;                        /* "a list of integers" */
    bool list_only; /* the file value must be a list (else a scalar or list) */
    bool plain;     /* file scalars must be unquoted (YAML numbers/bools) */
};

enum option_spec_flags {
    OPT_IN_FILE = 1u << 0,     /* .path is a key of the config file (else JSON dump only) */
    OPT_CONFIG_FILE = 1u << 1, /* this OPT_STRING names the config file to read */
};

struct option_spec {
    const char *flag;     /* long name without dashes; NULL = no flag */
    const char *alias[2]; /* further flag names */
    const char *env[2];   /* environment variables; the first one set wins */
    const char *path;     /* dotted file / JSON key ("flags.migStrategy"); NULL = neither */
    unsigned flags;       /* OPT_IN_FILE, OPT_CONFIG_FILE */
    enum option_type type;
    size_t offset;                      /* field in the caller's struct, or OPTION_NO_FIELD */
    const char *def;                    /* default, parsed like any value; NULL = leave zero */
    long min, max;                      /* OPT_INT range; OPT_DURATION: min milliseconds */
    const struct option_value *values;  /* OPT_ENUM / OPT_ENUM_SET, {NULL} terminated */
    const struct option_custom *custom; /* OPT_CUSTOM */
    const char *help;                   /* NULL = not shown by --help */
    /* A former name of the setting, still accepted so that existing
     * manifests keep working; each use logs a warning naming the new one.
     * The current names win when both are given. */
    const char *deprecated_flag;
    const char *deprecated_env;
};

/* A config file's keys the table does not name (e.g. the device plugin's
 * `resources:`), handed to the program; `f` carries the context for the
 * helpers below. Returns 0, or -1 with f->err filled (use options_file_error). */
struct options_file;
typedef int (*options_file_key_fn)(void *obj, const struct options_file *f,
                                   const struct ycfg_node *key, const struct ycfg_node *value);

struct options_table {
    const char *program; /* usage, --version, "takes no arguments" */
    const char *version;
    const char *summary; /* --help paragraph before the option list; may be NULL */
    const struct option_spec *specs;
    size_t count;
    options_file_key_fn file_key; /* top-level file keys not in the table; NULL = unknown */
};

enum options_result {
    OPTIONS_OK = 0,
    OPTIONS_EXIT = 1,   /* --help or --version was printed to stdout: exit 0 */
    OPTIONS_ERROR = -1, /* err holds the message */
};

/* Everything, in precedence order: scans argv (help, version, unknown
 * flags), applies defaults, the config file named by the OPT_CONFIG_FILE
 * option (its flag or env; a default is not read), the environment, then
 * argv. *obj must be zeroed by the caller (`= {0}`); on any result but
 * OPTIONS_OK its string fields are freed again (options_free). */
enum options_result options_load(const struct options_table *t, void *obj, int argc, char **argv,
                                 char **envp, char *err, size_t errlen) GP_MUST_USE;

/* The steps of options_load(), for programs that need to interleave work.
 * Each returns 0 or -1 with err filled, and leaves fields it did not reach. */
int options_defaults(const struct options_table *t, void *obj, char *err,
                     size_t errlen) GP_MUST_USE;
int options_apply_env(const struct options_table *t, void *obj, char **envp, char *err,
                      size_t errlen) GP_MUST_USE;
/* Applies argv[1..] (argv[0] is the program); OPTIONS_EXIT after printing
 * help/version, without applying anything. */
enum options_result options_apply_argv(const struct options_table *t, void *obj, int argc,
                                       char **argv, char *err, size_t errlen) GP_MUST_USE;
/* Reads a YAML file: table keys with OPT_IN_FILE, the rest through
 * t->file_key. An empty file is valid. */
int options_apply_file(const struct options_table *t, void *obj, const char *path, char *err,
                       size_t errlen) GP_MUST_USE;

/* Frees the string fields; safe on a zeroed or already freed struct. */
void options_free(const struct options_table *t, void *obj);

/* The options that have a .path as a JSON object nested by the dotted
 * paths; `into` (may be NULL) receives them, so a caller can pre-create
 * its key order and add sections of its own. Returns `into` (or a new
 * object), NULL on allocation failure. */
GP_MUST_USE struct json_t *options_to_json(const struct options_table *t, const void *obj,
                                           struct json_t *into);

/* --help text generated from the table. An enum's choices are appended
 * unless its help text already names every one of them. */
void options_print_usage(const struct options_table *t, FILE *out);

/* "<program> version <version> (commit <revision>)": what --version prints.
 * The revision is the source tree's git commit, taken when CMake configured
 * the build ("unknown" outside a git checkout; see build_info.h). */
void options_print_version(const struct options_table *t, FILE *out);

/* --- Helpers for t->file_key walkers (and other YAML schema code) --- */

struct options_file {
    const char *path;
    const struct ycfg_doc *doc;
    char *err;
    size_t errlen;
};

/* "path:line: <fmt>" into f->err; returns -1. */
int options_file_error(const struct options_file *f, const struct ycfg_node *n, const char *fmt,
                       ...) __attribute__((format(printf, 3, 4)));
/* A mapping (or empty) whose keys are unique scalars; `where` names it. */
int options_file_mapping(const struct options_file *f, const struct ycfg_node *n,
                         const char *where) GP_MUST_USE;
/* Key check only, for a node already known to be a mapping. */
int options_file_keys(const struct options_file *f, const struct ycfg_node *map,
                      const char *where) GP_MUST_USE;
/* An unquoted YAML bool (true/false/yes/no/on/off, any case). */
int options_file_bool(const struct options_file *f, const struct ycfg_node *n, const char *what,
                      bool *out) GP_MUST_USE;

/* Bounded parsers shared with schema code: 0, or -1 on any malformed or
 * out-of-range text (no blanks, no trailing characters). */
int options_parse_long(const char *text, long min, long max, long *out) GP_MUST_USE;
int options_parse_bool(const char *text, bool *out) GP_MUST_USE;
int options_parse_duration_ms(const char *text, int *out_ms) GP_MUST_USE;

#endif
