/* options.c -- the option engine (options.h).
 *
 * Everything is generated from the caller's table: argv and environment
 * parsing, the table-driven part of the config file walk, defaults, the
 * JSON dump and --help. Every value goes through set_value() whatever its
 * source, so a flag, a variable and a file key accept exactly the same
 * text; only the wording of an error differs (see value_error()). */
#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "build_info.h"
#include "errmsg.h"
#include "log.h"
#include "yamlcfg.h"

#define WHY_LEN 256
/* set_value() reports a bad item of a list as "<item>\x1f<why>", so that
 * the message names the item rather than the whole comma-joined value. */
#define ITEM_SEP '\x1f'

static void append_text(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append_text(char *buf, size_t len, const char *fmt, ...)
{
    size_t used = strnlen(buf, len);
    if (used + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------ */
/* Bounded parsers.                                                    */

int options_parse_bool(const char *text, bool *out)
{
    if (strcasecmp(text, "true") == 0 || strcmp(text, "1") == 0) {
        *out = true;
        return 0;
    }
    if (strcasecmp(text, "false") == 0 || strcmp(text, "0") == 0) {
        *out = false;
        return 0;
    }
    return -1;
}

int options_parse_long(const char *text, long min, long max, long *out)
{
    if (text[0] == '\0' || isspace((unsigned char)text[0]))
        return -1;
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

struct duration_unit {
    const char *name;
    uint64_t ns;
};

static const struct duration_unit duration_units[] = {
    {"ns", 1},
    {"us", 1000},
    /* U+00B5 micro sign and U+03BC Greek mu, as Go accepts */
    {"\xc2\xb5s", 1000},
    {"\xce\xbcs", 1000},
    {"ms", 1000000},
    {"s", 1000000000ull},
    {"m", 60000000000ull},
    {"h", 3600000000000ull},
};

/* Longest unit name that starts at s (so "ms" is not read as "m"). */
static const struct duration_unit *duration_unit_at(const char *s, size_t *len)
{
    const struct duration_unit *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < sizeof duration_units / sizeof duration_units[0]; i++) {
        size_t l = strlen(duration_units[i].name);
        if (l > best_len && strncmp(s, duration_units[i].name, l) == 0) {
            best = &duration_units[i];
            best_len = l;
        }
    }
    *len = best_len;
    return best;
}

/* Go's time.ParseDuration syntax, non-negative ("1.5h", "1m30s", "500ms",
 * "0"), converted to whole milliseconds; at most INT_MAX ms. */
int options_parse_duration_ms(const char *s, int *out_ms)
{
    if (strcmp(s, "0") == 0) {
        *out_ms = 0;
        return 0;
    }
    if (*s == '+')
        s++;
    if (*s == '\0')
        return -1;
    const long double limit = (long double)INT_MAX * 1e6L;
    long double total_ns = 0;
    while (*s != '\0') {
        uint64_t whole = 0, frac = 0, scale = 1;
        bool digits = false;
        for (; isdigit((unsigned char)*s); s++, digits = true) {
            if (whole > (UINT64_MAX - 9) / 10)
                return -1;
            whole = whole * 10 + (uint64_t)(*s - '0');
        }
        if (*s == '.') {
            for (s++; isdigit((unsigned char)*s); s++, digits = true)
                if (scale < 1000000000000000000ull) { /* extra digits cannot matter */
                    frac = frac * 10 + (uint64_t)(*s - '0');
                    scale *= 10;
                }
        }
        size_t ulen;
        const struct duration_unit *u = duration_unit_at(s, &ulen);
        if (!digits || u == NULL)
            return -1;
        s += ulen;
        total_ns += (long double)whole * u->ns + (long double)frac / scale * u->ns;
        if (total_ns > limit)
            return -1;
    }
    *out_ms = (int)(total_ns / 1e6L);
    return 0;
}

/* Go-style rendering of whole milliseconds for the JSON dump. */
static void format_duration(int ms, char *buf, size_t len)
{
    if (ms == 0)
        snprintf(buf, len, "0s");
    else if (ms % 3600000 == 0)
        snprintf(buf, len, "%dh", ms / 3600000);
    else if (ms % 60000 == 0)
        snprintf(buf, len, "%dm", ms / 60000);
    else if (ms % 1000 == 0)
        snprintf(buf, len, "%ds", ms / 1000);
    else
        snprintf(buf, len, "%dms", ms);
}

/* ------------------------------------------------------------------ */
/* Enumerations.                                                       */

/* "want a, b or c", refused (unsupported) words left out. */
static void want_values(const struct option_value *v, char *why, size_t len)
{
    size_t supported = 0, k = 0;
    for (size_t i = 0; v[i].name != NULL; i++)
        supported += v[i].unsupported == NULL;
    snprintf(why, len, "want ");
    for (size_t i = 0; v[i].name != NULL; i++) {
        if (v[i].unsupported != NULL)
            continue;
        k++;
        append_text(why, len, "%s%s", k == 1 ? "" : k == supported ? " or " : ", ", v[i].name);
    }
}

static const struct option_value *find_value(const struct option_value *v, const char *name,
                                             size_t len)
{
    for (; v->name != NULL; v++)
        if (strlen(v->name) == len && strncmp(v->name, name, len) == 0)
            return v;
    return NULL;
}

static const char *value_name(const struct option_value *v, int value)
{
    for (; v->name != NULL; v++)
        if (v->unsupported == NULL && v->value == value)
            return v->name;
    return "?";
}

/* ------------------------------------------------------------------ */
/* Setting one option from text: every source comes through here.      */

/* Storage for OPTION_NO_FIELD rows: parsed for validation, then dropped. */
union scratch {
    struct option_hostport hp;
    char *s;
    bool b;
    int i;
    unsigned u;
    size_t z;
};

static void *field_of(const struct option_spec *o, void *obj, union scratch *tmp)
{
    return o->offset == OPTION_NO_FIELD ? (void *)tmp : (char *)obj + o->offset;
}

/* Replaces *field by text, or appends ",text" to it (lists). */
static int set_string(char **field, const char *text, bool append)
{
    char *v;
    if (append && *field != NULL && **field != '\0' && *text != '\0') {
        size_t a = strlen(*field), b = strlen(text);
        v = malloc(a + b + 2);
        if (v != NULL) {
            memcpy(v, *field, a);
            v[a] = ',';
            memcpy(v + a + 1, text, b + 1);
        }
    } else {
        v = strdup(append && *field != NULL && *text == '\0' ? *field : text);
    }
    if (v == NULL)
        return -1;
    free(*field);
    *field = v;
    return 0;
}

int options_parse_hostport(const char *text, char *host, size_t hostlen, unsigned *port, char *why,
                           size_t whylen)
{
    const char *colon = strrchr(text, ':');
    const char *h = text;
    size_t hlen = colon ? (size_t)(colon - text) : 0;
    if (colon == NULL || colon[1] == '\0')
        return gp_errf(why, whylen, "want HOST:PORT, [IPv6]:PORT or :PORT");
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    } else if (memchr(h, ':', hlen) != NULL) {
        return gp_errf(why, whylen, "put an IPv6 host in brackets, [::1]:9400");
    }
    char *end = NULL;
    errno = 0;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (errno != 0 || *end != '\0' || p > 65535 || colon[1] < '0' || colon[1] > '9')
        return gp_errf(why, whylen, "the port must be 0-65535");
    if (hlen >= hostlen)
        return gp_errf(why, whylen, "host too long");
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port = (unsigned)p;
    return 0;
}

/* Splits text before taking it: a bad value leaves the field as it was. */
static int set_hostport(struct option_hostport *field, const char *text, char *why, size_t whylen)
{
    struct option_hostport next = {0};
    if (text[0] != '\0' &&
        options_parse_hostport(text, next.host, sizeof next.host, &next.port, why, whylen) != 0)
        return -1;
    next.text = strdup(text);
    if (next.text == NULL)
        return gp_errf(why, whylen, "out of memory");
    free(field->text);
    *field = next;
    return 0;
}

static int set_enum_set(const struct option_spec *o, unsigned *field, const char *text, bool append,
                        char *why, size_t whylen)
{
    unsigned bits = append ? *field : 0;
    const char *p = text;
    for (;;) {
        size_t len = strcspn(p, ",");
        const struct option_value *v = find_value(o->values, p, len);
        if (v == NULL || v->unsupported != NULL) {
            char w[WHY_LEN];
            want_values(o->values, w, sizeof w);
            if (v != NULL)
                return gp_errf(why, whylen, "%.*s%c%s (%s)", (int)len, p, ITEM_SEP, v->unsupported,
                               w);
            return gp_errf(why, whylen, "%.*s%c%s", (int)len, p, ITEM_SEP, w);
        }
        bits |= (unsigned)v->value;
        if (p[len] == '\0')
            break;
        p += len + 1;
    }
    *field = bits;
    return 0;
}

static int set_int(const struct option_spec *o, int *field, const char *text, char *why,
                   size_t whylen)
{
    long max = o->max != 0 ? o->max : INT_MAX, v;
    if (options_parse_long(text, o->min, max, &v) == 0) {
        *field = (int)v;
        return 0;
    }
    if (max == INT_MAX)
        return gp_errf(why, whylen, "want an integer >= %ld", o->min);
    return gp_errf(why, whylen, "want an integer from %ld to %ld", o->min, max);
}

static int set_enum(const struct option_spec *o, int *field, const char *text, char *why,
                    size_t whylen)
{
    const struct option_value *v = find_value(o->values, text, strlen(text));
    char w[WHY_LEN];
    want_values(o->values, w, sizeof w);
    if (v == NULL)
        return gp_errf(why, whylen, "%s", w);
    if (v->unsupported != NULL)
        return gp_errf(why, whylen, "%s (%s)", v->unsupported, w);
    *field = v->value;
    return 0;
}

/* Parses `text` into the option's field; `append` adds an item to a list
 * instead of replacing it. On error `why` says what is wanted. */
static int set_value(const struct option_spec *o, void *obj, const char *text, bool append,
                     char *why, size_t whylen)
{
    union scratch tmp = {0};
    void *field = field_of(o, obj, &tmp);
    int ms, rc = 0;
    switch (o->type) {
    case OPT_STRING:
    case OPT_STRLIST:
        if (set_string(field, text, o->type == OPT_STRLIST && append) != 0)
            rc = gp_errf(why, whylen, "out of memory");
        if (o->offset == OPTION_NO_FIELD)
            free(tmp.s);
        break;
    case OPT_HOSTPORT:
        rc = set_hostport(field, text, why, whylen);
        if (o->offset == OPTION_NO_FIELD)
            free(tmp.hp.text);
        break;
    case OPT_BOOL:
        if (options_parse_bool(text, field) != 0)
            rc = gp_errf(why, whylen, "want true or false");
        break;
    case OPT_INT:
        rc = set_int(o, field, text, why, whylen);
        break;
    case OPT_DURATION:
        if (options_parse_duration_ms(text, &ms) != 0 || ms < o->min)
            rc = gp_errf(why, whylen, "want a duration such as 5s or 500ms%s",
                         o->min > 0 ? " (at least 1ms)" : "");
        else
            *(int *)field = ms;
        break;
    case OPT_ENUM:
        rc = set_enum(o, field, text, why, whylen);
        break;
    case OPT_ENUM_SET:
        rc = set_enum_set(o, field, text, append, why, whylen);
        break;
    case OPT_CUSTOM:
        rc = o->custom->parse(field, text, append, why, whylen);
        break;
    case OPT_HELP:
    case OPT_VERSION:
        break;
    }
    return rc;
}

/* "--port (PORT)", "-v", "--a (A, B)", "DP_DISABLE_HEALTHCHECKS". */
static void option_label(const struct option_spec *o, char *buf, size_t len)
{
    buf[0] = '\0';
    if (o->flag != NULL)
        append_text(buf, len, "%s%s%s", strlen(o->flag) == 1 ? "-" : "--", o->flag,
                    o->env[0] != NULL ? " (" : "");
    for (size_t i = 0; i < 2 && o->env[i] != NULL; i++)
        append_text(buf, len, "%s%s", i ? ", " : "", o->env[i]);
    if (o->flag != NULL && o->env[0] != NULL)
        append_text(buf, len, ")");
}

/* `<prefix>invalid value "x" for <what>: <why>`; a list names its bad item. */
static void value_error(char *err, size_t errlen, const char *prefix, const char *what,
                        const char *text, const char *why)
{
    const char *sep = strchr(why, ITEM_SEP);
    if (sep != NULL)
        gp_errf(err, errlen, "%sinvalid value \"%.*s\" for %s: %s", prefix, (int)(sep - why), why,
                what, sep + 1);
    else
        gp_errf(err, errlen, "%sinvalid value \"%s\" for %s: %s", prefix, text, what, why);
}

static int set_from_cli(const struct option_spec *o, void *obj, const char *text, bool append,
                        char *err, size_t errlen)
{
    char why[WHY_LEN], label[160];
    if (set_value(o, obj, text, append, why, sizeof why) == 0)
        return 0;
    option_label(o, label, sizeof label);
    value_error(err, errlen, "", label, text, why);
    return -1;
}

static bool is_action(const struct option_spec *o)
{
    return o->type == OPT_HELP || o->type == OPT_VERSION;
}

static bool takes_value(const struct option_spec *o)
{
    return o->type != OPT_BOOL && !is_action(o);
}

static bool is_list(const struct option_spec *o)
{
    return o->type == OPT_STRLIST || o->type == OPT_ENUM_SET ||
           (o->type == OPT_CUSTOM && o->custom->list_only);
}

/* ------------------------------------------------------------------ */
/* Defaults and environment.                                           */

int options_defaults(const struct options_table *t, void *obj, char *err, size_t errlen)
{
    for (size_t i = 0; i < t->count; i++) {
        const struct option_spec *o = &t->specs[i];
        char why[WHY_LEN];
        if (o->def == NULL || o->offset == OPTION_NO_FIELD || is_action(o))
            continue;
        if (set_value(o, obj, o->def, false, why, sizeof why) != 0)
            return gp_errf(err, errlen, "default of %s: %s", o->flag ? o->flag : o->path, why);
    }
    return 0;
}

static const char *env_lookup(char **envp, const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; envp != NULL && envp[i] != NULL; i++)
        if (strncmp(envp[i], name, len) == 0 && envp[i][len] == '=')
            return envp[i] + len + 1;
    return NULL;
}

/* The current names first, so that a manifest that sets both during a
 * migration gets the new one. *deprecated (may be NULL) tells which. */
static const char *option_env(const struct option_spec *o, char **envp, bool *deprecated)
{
    if (deprecated != NULL)
        *deprecated = false;
    for (size_t i = 0; i < 2 && o->env[i] != NULL; i++) {
        const char *v = env_lookup(envp, o->env[i]);
        if (v != NULL)
            return v;
    }
    const char *v = o->deprecated_env ? env_lookup(envp, o->deprecated_env) : NULL;
    if (v != NULL && deprecated != NULL)
        *deprecated = true;
    return v;
}

/* An empty variable is "unset", except for strings where "" is a value
 * (the device plugin's KUBELET_SOCKET="" means: do not register). */
int options_apply_env(const struct options_table *t, void *obj, char **envp, char *err,
                      size_t errlen)
{
    for (size_t i = 0; i < t->count; i++) {
        const struct option_spec *o = &t->specs[i];
        bool deprecated;
        const char *v = option_env(o, envp, &deprecated);
        if (v == NULL || (v[0] == '\0' && o->type != OPT_STRING) || is_action(o))
            continue;
        if (deprecated) {
            char names[160];
            option_label(o, names, sizeof names);
            log_warn("$%s is deprecated: use %s", o->deprecated_env, names);
        }
        if (set_from_cli(o, obj, v, false, err, errlen) != 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Command line.                                                       */

struct flag_use {
    const struct option_spec *o;
    const char *value;
    bool deprecated; /* given by o->deprecated_flag */
};

struct cmdline {
    struct flag_use *uses; /* argc entries */
    size_t count;
    enum option_type action; /* OPT_HELP, OPT_VERSION, or OPT_STRING for none */
};

static const struct option_spec *find_flag(const struct options_table *t, const char *name,
                                           size_t len)
{
    for (size_t i = 0; i < t->count; i++) {
        const struct option_spec *o = &t->specs[i];
        const char *names[3] = {o->flag, o->alias[0], o->alias[1]};
        for (size_t k = 0; k < 3 && names[k] != NULL; k++)
            if (strlen(names[k]) == len && strncmp(names[k], name, len) == 0)
                return o;
    }
    return NULL;
}

static const struct option_spec *find_deprecated_flag(const struct options_table *t,
                                                      const char *name, size_t len)
{
    for (size_t i = 0; i < t->count; i++) {
        const char *old = t->specs[i].deprecated_flag;
        if (old != NULL && strlen(old) == len && strncmp(old, name, len) == 0)
            return &t->specs[i];
    }
    return NULL;
}

/* One flag at argv[*i]; advances *i past a separate value. Unknown names
 * are collected into `unknown` rather than failing at once. */
static int scan_flag(const struct options_table *t, int argc, char **argv, int *i,
                     struct cmdline *cl, char *unknown, size_t unknown_len, size_t *n_unknown,
                     char *err, size_t errlen)
{
    const char *arg = argv[*i];
    const char *name = arg + (arg[1] == '-' ? 2 : 1);
    const char *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const struct option_spec *o = find_flag(t, name, len);
    bool deprecated = false;
    if (o == NULL) {
        o = find_deprecated_flag(t, name, len);
        deprecated = o != NULL;
    }
    if (o == NULL) {
        append_text(unknown, unknown_len, "%s%.*s", (*n_unknown)++ ? ", " : "",
                    (int)(eq ? (size_t)(eq - arg) : strlen(arg)), arg);
        return 0;
    }
    const char *value = eq ? eq + 1 : NULL;
    if (is_action(o)) {
        if (value != NULL)
            return gp_errf(err, errlen, "flag takes no value: %.*s", (int)(eq - arg), arg);
        if (cl->action != OPT_HELP) /* --help wins over --version */
            cl->action = o->type;
        return 0;
    }
    if (value == NULL && takes_value(o)) {
        if (*i + 1 >= argc)
            return gp_errf(err, errlen, "flag needs an argument: %s", arg);
        value = argv[++*i];
    }
    cl->uses[cl->count++] = (struct flag_use){o, value ? value : "true", deprecated};
    return 0;
}

static int scan_argv(const struct options_table *t, int argc, char **argv, struct cmdline *cl,
                     char *err, size_t errlen)
{
    size_t n_unknown = 0;
    char unknown[512] = "";
    cl->count = 0;
    cl->action = OPT_STRING;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0 || arg[0] != '-' || arg[1] == '\0') {
            int at = strcmp(arg, "--") == 0 ? i + 1 : i;
            if (at < argc)
                return gp_errf(err, errlen, "unexpected argument \"%s\": %s takes no arguments",
                               argv[at], t->program);
            break;
        }
        if (scan_flag(t, argc, argv, &i, cl, unknown, sizeof unknown, &n_unknown, err, errlen) != 0)
            return -1;
    }
    if (n_unknown > 0)
        return gp_errf(err, errlen, "unknown flag%s: %s (see --help)", n_unknown > 1 ? "s" : "",
                       unknown);
    return 0;
}

/* Values in argv order: a repeated list flag accumulates, any other takes
 * its last value. */
static int apply_uses(const struct options_table *t, void *obj, const struct cmdline *cl, char *err,
                      size_t errlen)
{
    bool *seen = calloc(t->count ? t->count : 1, sizeof *seen);
    if (seen == NULL)
        return gp_errf(err, errlen, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < cl->count && rc == 0; i++) {
        size_t idx = (size_t)(cl->uses[i].o - t->specs);
        if (cl->uses[i].deprecated) {
            /* Warned here, where the value is applied, not at the scan:
             * options_load and options_apply_argv both scan argv. */
            char names[160];
            option_label(cl->uses[i].o, names, sizeof names);
            log_warn("%s%s is deprecated: use %s",
                     strlen(cl->uses[i].o->deprecated_flag) == 1 ? "-" : "--",
                     cl->uses[i].o->deprecated_flag, names);
        }
        rc = set_from_cli(cl->uses[i].o, obj, cl->uses[i].value, seen[idx], err, errlen);
        seen[idx] = true;
    }
    free(seen);
    return rc;
}

void options_print_version(const struct options_table *t, FILE *out)
{
    fprintf(out, "%s version %s (commit %s)\n", t->program, t->version ? t->version : "unknown",
            gp_build_revision);
}

static void run_action(const struct options_table *t, enum option_type action)
{
    if (action == OPT_HELP)
        options_print_usage(t, stdout);
    else
        options_print_version(t, stdout);
}

static int cmdline_scan(const struct options_table *t, int argc, char **argv, struct cmdline *cl,
                        char *err, size_t errlen)
{
    cl->uses = calloc(argc > 0 ? (size_t)argc : 1, sizeof *cl->uses);
    if (cl->uses == NULL)
        return gp_errf(err, errlen, "out of memory");
    return scan_argv(t, argc, argv, cl, err, errlen);
}

enum options_result options_apply_argv(const struct options_table *t, void *obj, int argc,
                                       char **argv, char *err, size_t errlen)
{
    struct cmdline cl = {0};
    enum options_result r = OPTIONS_ERROR;
    if (cmdline_scan(t, argc, argv, &cl, err, errlen) != 0)
        goto out;
    if (cl.action != OPT_STRING) {
        run_action(t, cl.action);
        r = OPTIONS_EXIT;
    } else if (apply_uses(t, obj, &cl, err, errlen) == 0) {
        r = OPTIONS_OK;
    }
out:
    free(cl.uses);
    return r;
}

/* ------------------------------------------------------------------ */
/* Config file.                                                        */

struct file_walk {
    struct options_file f; /* first: file_key gets &walk->f */
    const struct options_table *t;
    void *obj;
};

int options_file_error(const struct options_file *f, const struct ycfg_node *n, const char *fmt,
                       ...)
{
    va_list ap;
    va_start(ap, fmt);
    gp_verrf_at(f->err, f->errlen, f->path, (unsigned long)ycfg_line(n), fmt, ap);
    va_end(ap);
    return -1;
}

/* Keys must be scalars and unique: libyaml keeps duplicates, and silently
 * taking one of them hides a typo. */
int options_file_keys(const struct options_file *f, const struct ycfg_node *map, const char *where)
{
    size_t n = ycfg_count(map);
    for (size_t i = 0; i < n; i++) {
        const struct ycfg_node *k, *v;
        ycfg_pair(f->doc, map, i, &k, &v);
        if (ycfg_kind(k) != YCFG_SCALAR)
            return options_file_error(f, k, "%s: keys must be strings, got %s", where,
                                      ycfg_kind_name(k));
        for (size_t j = 0; j < i; j++) {
            const struct ycfg_node *k2, *v2;
            ycfg_pair(f->doc, map, j, &k2, &v2);
            if (strcmp(ycfg_text(k), ycfg_text(k2)) == 0)
                return options_file_error(f, k, "duplicate key \"%s%s%s\" (first at line %d)",
                                          where, *where ? "." : "", ycfg_text(k), ycfg_line(k2));
        }
    }
    return 0;
}

int options_file_mapping(const struct options_file *f, const struct ycfg_node *n, const char *where)
{
    if (ycfg_kind(n) == YCFG_NULL)
        return 0;
    if (ycfg_kind(n) != YCFG_MAPPING)
        return options_file_error(f, n, "%s: want a mapping, got %s", where, ycfg_kind_name(n));
    return options_file_keys(f, n, where);
}

/* YAML 1.1 (what NVIDIA's Go decoder reads) also spells bools yes/no/on/off. */
static const char *yaml_bool_text(const char *text)
{
    if (strcasecmp(text, "yes") == 0 || strcasecmp(text, "on") == 0)
        return "true";
    if (strcasecmp(text, "no") == 0 || strcasecmp(text, "off") == 0)
        return "false";
    return text;
}

int options_file_bool(const struct options_file *f, const struct ycfg_node *n, const char *what,
                      bool *out)
{
    if (ycfg_kind(n) != YCFG_SCALAR || ycfg_quoted(n))
        return options_file_error(f, n, "%s: want a bool, got %s", what,
                                  ycfg_kind(n) == YCFG_SCALAR ? "a string" : ycfg_kind_name(n));
    if (options_parse_bool(yaml_bool_text(ycfg_text(n)), out) != 0)
        return options_file_error(f, n, "invalid value \"%s\" for %s: want true or false",
                                  ycfg_text(n), what);
    return 0;
}

static const char *type_name(const struct option_spec *o)
{
    switch (o->type) {
    case OPT_BOOL:
        return "a bool";
    case OPT_INT:
        return "an integer";
    case OPT_DURATION:
        return "a duration";
    case OPT_STRLIST:
    case OPT_ENUM_SET:
        return "a string or a list of strings";
    case OPT_CUSTOM:
        return o->custom->type_name;
    default:
        return "a string";
    }
}

/* Scalars YAML types as bool or number: a quoted "true" or "4" is a string
 * to a Go decoder too, and is refused the same way. */
static bool needs_plain(const struct option_spec *o)
{
    return o->type == OPT_BOOL || o->type == OPT_INT || (o->type == OPT_CUSTOM && o->custom->plain);
}

static int file_scalar(const struct file_walk *w, const struct option_spec *o,
                       const struct ycfg_node *n, bool append)
{
    const struct options_file *f = &w->f;
    enum ycfg_kind kind = ycfg_kind(n);
    bool stringy = o->type == OPT_STRING || o->type == OPT_STRLIST || o->type == OPT_HOSTPORT;
    if (kind != YCFG_SCALAR && !(kind == YCFG_NULL && stringy))
        return options_file_error(f, n, "%s: want %s, got %s", o->path, type_name(o),
                                  ycfg_kind_name(n));
    if (needs_plain(o) && ycfg_quoted(n))
        return options_file_error(f, n, "%s: want %s, got a string", o->path, type_name(o));
    const char *text = kind == YCFG_NULL ? "" : ycfg_text(n);
    if (o->type == OPT_BOOL)
        text = yaml_bool_text(text);
    char why[WHY_LEN], prefix[4096 + 32];
    if (set_value(o, w->obj, text, append, why, sizeof why) == 0)
        return 0;
    snprintf(prefix, sizeof prefix, "%s:%d: ", f->path, ycfg_line(n));
    value_error(f->err, f->errlen, prefix, o->path, text, why);
    return -1;
}

/* One option's value: a scalar, or a list for list-typed options. The
 * first item replaces what an earlier source set, the others append; an
 * empty list is the empty text (a custom parser sees ""). */
static int file_option(const struct file_walk *w, const struct option_spec *o,
                       const struct ycfg_node *n)
{
    const struct options_file *f = &w->f;
    if (ycfg_kind(n) != YCFG_SEQUENCE) {
        if (o->type == OPT_CUSTOM && o->custom->list_only)
            return options_file_error(f, n, "%s: want %s, got %s", o->path, type_name(o),
                                      ycfg_kind_name(n));
        return file_scalar(w, o, n, false);
    }
    if (!is_list(o))
        return options_file_error(f, n, "%s: want %s, got a list", o->path, type_name(o));
    size_t count = ycfg_count(n);
    if (count == 0 && o->type == OPT_ENUM_SET) {
        char want[WHY_LEN];
        want_values(o->values, want, sizeof want);
        return options_file_error(f, n, "%s: want at least one of %s", o->path,
                                  want + strlen("want "));
    }
    char why[WHY_LEN];
    if (count == 0 && set_value(o, w->obj, "", false, why, sizeof why) != 0)
        return options_file_error(f, n, "invalid value [] for %s: %s", o->path, why);
    for (size_t i = 0; i < count; i++)
        if (file_scalar(w, o, ycfg_item(f->doc, n, i), i > 0) != 0)
            return -1;
    return 0;
}

static const struct option_spec *file_option_at(const struct options_table *t, const char *path)
{
    for (size_t i = 0; i < t->count; i++)
        if ((t->specs[i].flags & OPT_IN_FILE) && strcmp(t->specs[i].path, path) == 0)
            return &t->specs[i];
    return NULL;
}

/* True when some file key lies below `path` ("flags" for "flags.x"). */
static bool is_section(const struct options_table *t, const char *path)
{
    size_t len = strlen(path);
    for (size_t i = 0; i < t->count; i++) {
        const struct option_spec *o = &t->specs[i];
        if ((o->flags & OPT_IN_FILE) && strncmp(o->path, path, len) == 0 && o->path[len] == '.')
            return true;
    }
    return false;
}

/* Table-driven keys, recursively down to their leaves. */
static int file_options(const struct file_walk *w, const char *prefix, const struct ycfg_node *key,
                        const struct ycfg_node *value)
{
    const struct options_file *f = &w->f;
    char path[256];
    if ((size_t)snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", ycfg_text(key)) >=
        sizeof path)
        return options_file_error(f, key, "unknown key \"%s\"", ycfg_text(key));
    const struct option_spec *o = file_option_at(w->t, path);
    if (o != NULL)
        return file_option(w, o, value);
    if (!is_section(w->t, path))
        return options_file_error(f, key, "unknown key \"%s\"", path);
    if (options_file_mapping(f, value, path) != 0)
        return -1;
    for (size_t i = 0; i < ycfg_count(value); i++) {
        const struct ycfg_node *k, *v;
        ycfg_pair(f->doc, value, i, &k, &v);
        if (file_options(w, path, k, v) != 0)
            return -1;
    }
    return 0;
}

static int file_root(const struct file_walk *w, const struct ycfg_node *root)
{
    const struct options_file *f = &w->f;
    if (root == NULL || ycfg_kind(root) == YCFG_NULL)
        return 0; /* an empty file is an empty configuration */
    if (ycfg_kind(root) != YCFG_MAPPING)
        return options_file_error(f, root, "want a mapping at the top level, got %s",
                                  ycfg_kind_name(root));
    if (options_file_keys(f, root, "") != 0)
        return -1;
    for (size_t i = 0; i < ycfg_count(root); i++) {
        const struct ycfg_node *k, *v;
        ycfg_pair(f->doc, root, i, &k, &v);
        const char *key = ycfg_text(k);
        int rc;
        if (file_option_at(w->t, key) != NULL || is_section(w->t, key) || w->t->file_key == NULL)
            rc = file_options(w, "", k, v);
        else
            rc = w->t->file_key(w->obj, f, k, v);
        if (rc != 0)
            return -1;
    }
    return 0;
}

int options_apply_file(const struct options_table *t, void *obj, const char *path, char *err,
                       size_t errlen)
{
    struct ycfg_doc doc;
    if (ycfg_load(path, &doc, err, errlen) != 0)
        return -1;
    struct file_walk w = {{path, &doc, err, errlen}, t, obj};
    int rc = file_root(&w, ycfg_root(&doc));
    ycfg_free(&doc);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Everything.                                                         */

/* The config file named on the command line (last use) or in the
 * environment; NULL when neither names one. */
static const char *config_file_source(const struct options_table *t, const struct cmdline *cl,
                                      char **envp)
{
    const struct option_spec *spec = NULL;
    for (size_t i = 0; i < t->count && spec == NULL; i++)
        if (t->specs[i].flags & OPT_CONFIG_FILE)
            spec = &t->specs[i];
    if (spec == NULL)
        return NULL;
    const char *path = NULL;
    for (size_t i = 0; i < cl->count; i++)
        if (cl->uses[i].o == spec)
            path = cl->uses[i].value;
    return path != NULL ? path : option_env(spec, envp, NULL);
}

enum options_result options_load(const struct options_table *t, void *obj, int argc, char **argv,
                                 char **envp, char *err, size_t errlen)
{
    if (errlen > 0)
        err[0] = '\0';
    struct cmdline cl = {0};
    enum options_result r = OPTIONS_ERROR;
    const char *file;
    if (cmdline_scan(t, argc, argv, &cl, err, errlen) != 0)
        goto out;
    if (cl.action != OPT_STRING) {
        run_action(t, cl.action);
        r = OPTIONS_EXIT;
        goto out;
    }
    if (options_defaults(t, obj, err, errlen) != 0)
        goto out;
    file = config_file_source(t, &cl, envp);
    if (file != NULL && file[0] != '\0' && options_apply_file(t, obj, file, err, errlen) != 0)
        goto out;
    if (options_apply_env(t, obj, envp, err, errlen) != 0 ||
        apply_uses(t, obj, &cl, err, errlen) != 0)
        goto out;
    r = OPTIONS_OK;
out:
    free(cl.uses);
    if (r != OPTIONS_OK)
        options_free(t, obj);
    return r;
}

void options_free(const struct options_table *t, void *obj)
{
    for (size_t i = 0; i < t->count; i++) {
        const struct option_spec *o = &t->specs[i];
        if ((o->type == OPT_STRING || o->type == OPT_STRLIST) && o->offset != OPTION_NO_FIELD) {
            char **field = (char **)((char *)obj + o->offset);
            free(*field);
            *field = NULL;
        } else if (o->type == OPT_HOSTPORT && o->offset != OPTION_NO_FIELD) {
            struct option_hostport *field = (void *)((char *)obj + o->offset);
            free(field->text);
            field->text = NULL;
        }
    }
}

/* ------------------------------------------------------------------ */
/* JSON and usage.                                                     */

/* Object at dotted `path` minus its last component (created on demand);
 * *leaf points at that last component. */
static json_t *json_parent(json_t *root, const char *path, const char **leaf)
{
    json_t *obj = root;
    const char *p = path;
    const char *dot;
    while ((dot = strchr(p, '.')) != NULL) {
        char key[64];
        size_t len = (size_t)(dot - p);
        if (len >= sizeof key)
            return NULL;
        memcpy(key, p, len);
        key[len] = '\0';
        json_t *next = json_object_get(obj, key);
        if (next == NULL) {
            next = json_object();
            if (next == NULL || json_object_set_new(obj, key, next) != 0)
                return NULL;
        }
        obj = next;
        p = dot + 1;
    }
    *leaf = p;
    return obj;
}

/* A value as a JSON string. Flags and environment variables are bytes, not
 * necessarily UTF-8, and JSON strings must be UTF-8: such a value is shown
 * with '?' for every byte above 0x7f rather than lost (which failed the whole
 * dump as if out of memory). NULL only when out of memory. */
static json_t *text_json(const char *text, size_t len)
{
    json_t *v = json_stringn(text, len);
    if (v != NULL)
        return v;
    char *ascii = malloc(len + 1);
    if (ascii == NULL)
        return NULL;
    for (size_t i = 0; i < len; i++)
        ascii[i] = (unsigned char)text[i] > 0x7f ? '?' : text[i];
    v = json_stringn(ascii, len);
    free(ascii);
    return v;
}

static json_t *strlist_json(const char *text)
{
    json_t *a = json_array();
    for (const char *p = text; a != NULL && p != NULL && *p != '\0';) {
        size_t len = strcspn(p, ",");
        json_array_append_new(a, text_json(p, len));
        p += len + (p[len] == ',');
    }
    return a;
}

static json_t *option_json(const struct option_spec *o, const void *obj)
{
    const void *f = (const char *)obj + o->offset;
    char buf[32];
    switch (o->type) {
    case OPT_STRING:
        return *(char *const *)f ? text_json(*(char *const *)f, strlen(*(char *const *)f))
                                 : json_null();
    case OPT_STRLIST:
        return strlist_json(*(char *const *)f);
    case OPT_HOSTPORT: {
        const struct option_hostport *hp = f;
        return text_json(hp->text != NULL ? hp->text : "", hp->text != NULL ? strlen(hp->text) : 0);
    }
    case OPT_BOOL:
        return json_boolean(*(const bool *)f);
    case OPT_INT:
        return json_integer(*(const int *)f);
    case OPT_DURATION:
        format_duration(*(const int *)f, buf, sizeof buf);
        return json_string(buf);
    case OPT_ENUM:
        return json_string(value_name(o->values, *(const int *)f));
    case OPT_ENUM_SET: {
        /* Each set bit once, by the first word that covers it: a word such
         * as `all` listed before the single bits stands for all of them. */
        json_t *a = json_array();
        unsigned set = *(const unsigned *)f, covered = 0;
        for (const struct option_value *v = o->values; a != NULL && v->name != NULL; v++) {
            unsigned bits = (unsigned)v->value;
            if (v->unsupported == NULL && bits != 0 && (set & bits) == bits &&
                (bits & ~covered) != 0) {
                json_array_append_new(a, json_string(v->name));
                covered |= bits;
            }
        }
        return a;
    }
    case OPT_CUSTOM:
        return o->custom->to_json(f);
    default:
        return NULL;
    }
}

json_t *options_to_json(const struct options_table *t, const void *obj, json_t *into)
{
    json_t *root = into != NULL ? into : json_object();
    if (root == NULL)
        return NULL;
    for (size_t i = 0; i < t->count; i++) {
        const struct option_spec *o = &t->specs[i];
        const char *leaf;
        if (o->path == NULL || o->offset == OPTION_NO_FIELD || is_action(o))
            continue;
        json_t *parent = json_parent(root, o->path, &leaf);
        json_t *v = parent ? option_json(o, obj) : NULL;
        if (v == NULL || json_object_set_new(parent, leaf, v) != 0) {
            if (into == NULL)
                json_decref(root);
            return NULL;
        }
    }
    return root;
}

static void print_default(FILE *out, const struct option_spec *o)
{
    if (o->type == OPT_BOOL || o->type == OPT_INT || o->type == OPT_DURATION)
        fprintf(out, " (default: %s)", o->def ? o->def : "unset");
    else if (o->def != NULL && o->def[0] != '\0')
        fprintf(out, " (default: \"%s\")", o->def);
}

/* Whether `word` stands in `text` as a word of its own: "gpu" is not
 * named by "gpu-mem", nor "MiB" by "MiBs". */
static bool names_word(const char *text, const char *word)
{
    size_t len = strlen(word);
    for (const char *p = strstr(text, word); p != NULL; p = strstr(p + 1, word)) {
        bool starts = p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '-');
        bool ends = !(isalnum((unsigned char)p[len]) || p[len] == '-');
        if (starts && ends)
            return true;
    }
    return false;
}

/* A help text written around its choices ("`gpu` (whole GPUs) or `gpu-mem`")
 * says them better than the appended list would; saying them twice only
 * makes the reader compare the two. */
static bool help_names_choices(const struct option_spec *o)
{
    for (const struct option_value *v = o->values; v->name != NULL; v++)
        if (v->unsupported == NULL && !names_word(o->help, v->name))
            return false;
    return true;
}

static void print_option(FILE *out, const struct option_spec *o)
{
    const char *names[3] = {o->flag, o->alias[0], o->alias[1]};
    fprintf(out, " ");
    for (size_t k = 0; k < 3 && names[k] != NULL; k++)
        fprintf(out, "%s %s%s%s", k ? "," : "", strlen(names[k]) == 1 ? "-" : "--", names[k],
                takes_value(o) ? " value" : "");
    for (size_t k = 0; k < 2 && o->env[k] != NULL; k++)
        fprintf(out, "%s$%s", k ? ", " : o->flag ? "  " : " ", o->env[k]);
    fprintf(out, "\n        %s", o->help);
    if ((o->type == OPT_ENUM || o->type == OPT_ENUM_SET) && !help_names_choices(o)) {
        char w[WHY_LEN];
        want_values(o->values, w, sizeof w);
        fprintf(out, ": %s", w + strlen("want "));
    } else if (o->type == OPT_INT && o->max != 0) {
        fprintf(out, " (%ld to %ld)", o->min, o->max);
    }
    print_default(out, o);
    if (o->flags & OPT_IN_FILE)
        fprintf(out, " [file: %s]", o->path);
    if (o->deprecated_flag != NULL || o->deprecated_env != NULL)
        fprintf(out, " (deprecated name%s: %s%s%s%s%s)",
                o->deprecated_flag && o->deprecated_env ? "s" : "",
                o->deprecated_flag ? (strlen(o->deprecated_flag) == 1 ? "-" : "--") : "",
                o->deprecated_flag ? o->deprecated_flag : "",
                o->deprecated_flag && o->deprecated_env ? ", " : "", o->deprecated_env ? "$" : "",
                o->deprecated_env ? o->deprecated_env : "");
    fprintf(out, "\n");
}

void options_print_usage(const struct options_table *t, FILE *out)
{
    bool has_file = false, has_env = false;
    for (size_t i = 0; i < t->count; i++) {
        has_file |= (t->specs[i].flags & OPT_CONFIG_FILE) != 0;
        has_env |= t->specs[i].env[0] != NULL;
    }
    fprintf(out, "Usage: %s [options]\n\n", t->program);
    if (t->summary != NULL)
        fprintf(out, "%s\n", t->summary);
    /* A program that reads no variable does not claim to. */
    fprintf(out, "Precedence: flag > %s%sdefault.\n\nOptions:\n",
            has_env ? "environment variable > " : "", has_file ? "config file > " : "");
    for (size_t i = 0; i < t->count; i++)
        if (t->specs[i].help != NULL)
            print_option(out, &t->specs[i]);
}
