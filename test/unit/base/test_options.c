/* Unit tests: the option engine (options.c) on a table of its own, one
 * option of every type, as another program (the extender) would use it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "build_info.h"
#include "log.h"
#include "options.h"
#include "yamlcfg.h"

enum color { RED, GREEN, BLUE };
enum { FEAT_A = 1, FEAT_B = 2, FEAT_C = 4 };

struct test_config {
    int port;
    char *kubeconfig;
    bool dry_run;
    int timeout_ms;
    int color;
    unsigned features;
    char *tags;
    int odd; /* custom: an odd number */
    int verbosity;
    char *config_file;
    char *extra; /* set by the file_key callback */
};

static int odd_parse(void *field, const char *text, bool append, char *why, size_t whylen)
{
    long v;
    if (options_parse_long(text, 0, 99, &v) != 0 || v % 2 == 0) {
        snprintf(why, whylen, "want an odd number below 100");
        return -1;
    }
    *(int *)field = append ? *(int *)field + (int)v : (int)v;
    return 0;
}

static json_t *odd_json(const void *field)
{
    return json_integer(*(const int *)field);
}

static const struct option_custom odd_type = {
    .parse = odd_parse, .to_json = odd_json, .type_name = "an odd number", .plain = true};

static const struct option_value colors[] = {{"red", RED, NULL},
                                             {"green", GREEN, NULL},
                                             {"blue", BLUE, "blue is refused here"},
                                             {NULL, 0, NULL}};
static const struct option_value features[] = {{"all", FEAT_A | FEAT_B | FEAT_C, NULL},
                                               {"a", FEAT_A, NULL},
                                               {"b", FEAT_B, NULL},
                                               {"c", FEAT_C, NULL},
                                               {NULL, 0, NULL}};

#define F(x) offsetof(struct test_config, x)

static const struct option_spec specs[] = {
    {.flag = "port",
     .env = {"PORT"},
     .path = "server.port",
     .flags = OPT_IN_FILE,
     .type = OPT_INT,
     .offset = F(port),
     .def = "8888",
     .min = 1,
     .max = 65535,
     .help = "TCP port"},
    {.flag = "kubeconfig",
     .env = {"KUBECONFIG", "KCFG"},
     .path = "kube.config",
     .flags = OPT_IN_FILE,
     .type = OPT_STRING,
     .offset = F(kubeconfig),
     .def = "",
     .help = "kubeconfig path"},
    {.flag = "dry-run",
     .alias = {"n"},
     .env = {"DRY_RUN"},
     .path = "dryRun",
     .flags = OPT_IN_FILE,
     .type = OPT_BOOL,
     .offset = F(dry_run),
     .def = "false",
     .help = "change nothing"},
    {.flag = "timeout",
     .env = {"TIMEOUT"},
     .path = "server.timeout",
     .flags = OPT_IN_FILE,
     .type = OPT_DURATION,
     .offset = F(timeout_ms),
     .def = "1m30s",
     .min = 1,
     .help = "request timeout"},
    {.flag = "color",
     .env = {"COLOR"},
     .path = "color",
     .flags = OPT_IN_FILE,
     .type = OPT_ENUM,
     .offset = F(color),
     .def = "red",
     .values = colors,
     .help = "a color"},
    {.flag = "feature",
     .env = {"FEATURES"},
     .path = "features",
     .flags = OPT_IN_FILE,
     .type = OPT_ENUM_SET,
     .offset = F(features),
     .def = "a",
     .values = features,
     .help = "features"},
    {.flag = "tag",
     .env = {"TAGS"},
     .path = "tags",
     .flags = OPT_IN_FILE,
     .type = OPT_STRLIST,
     .offset = F(tags),
     .help = "tags"},
    {.flag = "odd",
     .path = "odd",
     .flags = OPT_IN_FILE,
     .type = OPT_CUSTOM,
     .offset = F(odd),
     .def = "1",
     .custom = &odd_type,
     .help = "an odd number"},
    {.flag = "v",
     .env = {"LOG_LEVEL"},
     .path = "verbosity",
     .type = OPT_INT,
     .offset = F(verbosity),
     .def = "0",
     .help = "log verbosity"},
    {.flag = "config",
     .env = {"CONFIG"},
     .type = OPT_STRING,
     .flags = OPT_CONFIG_FILE,
     .offset = F(config_file),
     .def = "/nonexistent/default.yaml",
     .help = "config file"},
    {.path = "legacy.knob", .flags = OPT_IN_FILE, .type = OPT_INT, .offset = OPTION_NO_FIELD},
    {.flag = "help", .alias = {"h"}, .type = OPT_HELP, .help = "show help"},
    {.flag = "version", .type = OPT_VERSION, .help = "print the version"},
};

static int extra_key(void *obj, const struct options_file *f, const struct ycfg_node *key,
                     const struct ycfg_node *value)
{
    struct test_config *c = obj;
    if (strcmp(ycfg_text(key), "extra") != 0)
        return options_file_error(f, key, "unknown key \"%s\"", ycfg_text(key));
    if (ycfg_kind(value) != YCFG_SCALAR)
        return options_file_error(f, value, "extra: want a string, got %s", ycfg_kind_name(value));
    free(c->extra);
    c->extra = strdup(ycfg_text(value));
    return 0;
}

static const struct options_table table = {.program = "test-prog",
                                           .version = "1.2.3",
                                           .summary = "A test program.",
                                           .specs = specs,
                                           .count = sizeof specs / sizeof specs[0],
                                           .file_key = extra_key};

static char err[1024];

static enum options_result load(struct test_config *c, const char *const *args,
                                const char *const *env)
{
    char *argv[32] = {"test-prog"};
    char *envp[32] = {NULL};
    int argc = 1;
    for (size_t i = 0; args != NULL && args[i] != NULL; i++)
        argv[argc++] = (char *)args[i];
    for (size_t i = 0; env != NULL && env[i] != NULL; i++)
        envp[i] = (char *)env[i];
    memset(c, 0, sizeof *c);
    err[0] = '\0';
    return options_load(&table, c, argc, argv, envp, err, sizeof err);
}

static void load_ok(struct test_config *c, const char *const *args, const char *const *env)
{
    if (load(c, args, env) != OPTIONS_OK)
        fail_msg("options_load: %s", err);
}

static void expect_error(const char *const *args, const char *const *env, const char *want)
{
    struct test_config c;
    assert_int_equal(load(&c, args, env), OPTIONS_ERROR);
    if (strcmp(err, want) != 0)
        fail_msg("want: %s\ngot:  %s", want, err);
    /* options_load freed the strings already; freeing again is harmless */
    options_free(&table, &c);
    free(c.extra);
}

static char path_buf[64];

static const char *temp_file(const char *text)
{
    snprintf(path_buf, sizeof path_buf, "/tmp/gp-test-options-XXXXXX");
    int fd = mkstemp(path_buf);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path_buf;
}

static void free_config(struct test_config *c)
{
    options_free(&table, c);
    free(c->extra);
    c->extra = NULL;
}

/* ------------------------------------------------------------------ */

static void test_defaults(void **state)
{
    (void)state;
    struct test_config c;
    load_ok(&c, NULL, NULL); /* the default config file is not read */
    assert_int_equal(c.port, 8888);
    assert_string_equal(c.kubeconfig, "");
    assert_false(c.dry_run);
    assert_int_equal(c.timeout_ms, 90000);
    assert_int_equal(c.color, RED);
    assert_int_equal(c.features, FEAT_A);
    assert_null(c.tags);
    assert_int_equal(c.odd, 1);
    free_config(&c);
    assert_null(c.kubeconfig); /* options_free clears what it frees */
}

static void test_every_type_from_flags(void **state)
{
    (void)state;
    struct test_config c;
    const char *args[] = {"--port=80",
                          "--kubeconfig",
                          "/k",
                          "-n",
                          "--timeout=250ms",
                          "-color=green",
                          "--feature",
                          "b",
                          "--feature=c",
                          "--tag=x",
                          "--tag",
                          "y,z",
                          "--odd=7",
                          "-v",
                          "3",
                          "--",
                          NULL};
    load_ok(&c, args, NULL);
    assert_int_equal(c.port, 80);
    assert_string_equal(c.kubeconfig, "/k");
    assert_true(c.dry_run);
    assert_int_equal(c.timeout_ms, 250);
    assert_int_equal(c.color, GREEN);
    assert_int_equal(c.features, FEAT_B | FEAT_C); /* a repeated set accumulates */
    assert_string_equal(c.tags, "x,y,z");
    assert_int_equal(c.odd, 7);
    assert_int_equal(c.verbosity, 3);
    free_config(&c);

    const char *again[] = {"--port=80", "--port=81", "--dry-run=false", "-v=2", NULL};
    load_ok(&c, again, NULL);
    assert_int_equal(c.port, 81); /* the last value wins */
    assert_false(c.dry_run);
    assert_int_equal(c.verbosity, 2);
    free_config(&c);
}

static void test_env(void **state)
{
    (void)state;
    struct test_config c;
    const char *env[] = {"PORT=9000", "KCFG=/second", "DRY_RUN=1", "TIMEOUT=2s", "FEATURES=a,b",
                         "TAGS=p,q",  "LOG_LEVEL=5",  "COLOR=",    NULL};
    load_ok(&c, NULL, env);
    assert_int_equal(c.port, 9000);
    assert_string_equal(c.kubeconfig, "/second"); /* second variable of the option */
    assert_true(c.dry_run);
    assert_int_equal(c.timeout_ms, 2000);
    assert_int_equal(c.color, RED); /* empty = unset for non-strings */
    assert_int_equal(c.features, FEAT_A | FEAT_B);
    assert_string_equal(c.tags, "p,q");
    assert_int_equal(c.verbosity, 5);
    free_config(&c);

    const char *both[] = {"KUBECONFIG=/first", "KCFG=/second", NULL};
    load_ok(&c, NULL, both);
    assert_string_equal(c.kubeconfig, "/first");
    free_config(&c);

    const char *empty[] = {"KUBECONFIG=", NULL};
    const char *args[] = {NULL};
    load_ok(&c, args, empty);
    assert_string_equal(c.kubeconfig, ""); /* for strings "" is a value */
    free_config(&c);
}

static void test_file_and_precedence(void **state)
{
    (void)state;
    const char *path = temp_file("server:\n  port: 7000\n  timeout: 3s\nkube:\n  config: /file\n"
                                 "dryRun: yes\ncolor: green\nfeatures: [b, c]\ntags: [t1, t2]\n"
                                 "odd: 9\nextra: hello\nlegacy:\n  knob: 4\n");
    struct test_config c;
    const char *args[] = {"--config", path, "--port=1", NULL};
    const char *env[] = {"PORT=2", "TIMEOUT=4s", NULL};
    load_ok(&c, args, env);
    assert_int_equal(c.port, 1);                /* flag > env > file */
    assert_int_equal(c.timeout_ms, 4000);       /* env > file */
    assert_string_equal(c.kubeconfig, "/file"); /* file > default */
    assert_true(c.dry_run);
    assert_int_equal(c.color, GREEN);
    assert_int_equal(c.features, FEAT_B | FEAT_C); /* a file list replaces the default */
    assert_string_equal(c.tags, "t1,t2");
    assert_int_equal(c.odd, 9);
    assert_string_equal(c.extra, "hello"); /* handed to file_key */
    free_config(&c);

    const char *env_file[] = {"CONFIG=", NULL}; /* empty: no file */
    load_ok(&c, NULL, env_file);
    assert_int_equal(c.port, 8888);
    free_config(&c);
    const char *env_file2[] = {"CONFIG=/nonexistent/x.yaml", NULL};
    struct test_config d;
    assert_int_equal(load(&d, NULL, env_file2), OPTIONS_ERROR);
    assert_non_null(strstr(err, "/nonexistent/x.yaml"));
    unlink(path);
}

static void expect_file_error(const char *text, const char *want)
{
    const char *path = temp_file(text);
    const char *args[] = {"--config", path, NULL};
    char expected[1200];
    snprintf(expected, sizeof expected, "%s:%s", path, want);
    expect_error(args, NULL, expected);
    unlink(path);
}

static void test_file_errors(void **state)
{
    (void)state;
    expect_file_error("server:\n  port: 0\n",
                      "2: invalid value \"0\" for server.port: want an integer from 1 to 65535");
    expect_file_error("server:\n  port: \"80\"\n", "2: server.port: want an integer, got a string");
    expect_file_error("server:\n  port: [1]\n", "2: server.port: want an integer, got a list");
    expect_file_error("server: 3\n", "1: server: want a mapping, got a scalar");
    expect_file_error("server:\n  bogus: 1\n", "2: unknown key \"server.bogus\"");
    expect_file_error("nope: 1\n", "1: unknown key \"nope\"");
    expect_file_error("dryRun: maybe\n",
                      "1: invalid value \"maybe\" for dryRun: want true or false");
    expect_file_error("color: blue\n", "1: invalid value \"blue\" for color: blue is refused "
                                       "here (want red or green)");
    expect_file_error("features: []\n", "1: features: want at least one of all, a, b or c");
    expect_file_error("features: [a, d]\n",
                      "1: invalid value \"d\" for features: want all, a, b or c");
    expect_file_error("odd: 4\n", "1: invalid value \"4\" for odd: want an odd number below 100");
    expect_file_error("odd: '5'\n", "1: odd: want an odd number, got a string");
    expect_file_error("legacy:\n  knob: x\n",
                      "2: invalid value \"x\" for legacy.knob: want an integer >= 0");
    expect_file_error("color: red\ncolor: green\n", "2: duplicate key \"color\" (first at line 1)");
    expect_file_error("extra: [1]\n", "1: extra: want a string, got a list");
    expect_file_error("- 1\n", "1: want a mapping at the top level, got a list");
}

static void test_cli_errors(void **state)
{
    (void)state;
    const char *a1[] = {"--port=0", NULL};
    expect_error(a1, NULL,
                 "invalid value \"0\" for --port (PORT): want an integer from 1 to 65535");
    const char *e1[] = {"PORT=70000", NULL};
    expect_error(NULL, e1,
                 "invalid value \"70000\" for --port (PORT): want an integer from 1 to 65535");
    const char *a2[] = {"--timeout=5", NULL};
    expect_error(a2, NULL,
                 "invalid value \"5\" for --timeout (TIMEOUT): want a duration such "
                 "as 5s or 500ms (at least 1ms)");
    const char *a3[] = {"--color=blue", NULL};
    expect_error(a3, NULL,
                 "invalid value \"blue\" for --color (COLOR): blue is refused here "
                 "(want red or green)");
    const char *a4[] = {"--feature=a,zz", NULL};
    expect_error(a4, NULL, "invalid value \"zz\" for --feature (FEATURES): want all, a, b or c");
    const char *a5[] = {"-v=x", NULL};
    expect_error(a5, NULL, "invalid value \"x\" for -v (LOG_LEVEL): want an integer >= 0");
    const char *a6[] = {"--bogus", "-q=1", NULL};
    expect_error(a6, NULL, "unknown flags: --bogus, -q (see --help)");
    const char *a7[] = {"--port", NULL};
    expect_error(a7, NULL, "flag needs an argument: --port");
    const char *a8[] = {"stray", NULL};
    expect_error(a8, NULL, "unexpected argument \"stray\": test-prog takes no arguments");
    const char *a9[] = {"--version=1", NULL};
    expect_error(a9, NULL, "flag takes no value: --version");
    const char *a10[] = {"--dry-run=perhaps", NULL};
    expect_error(a10, NULL,
                 "invalid value \"perhaps\" for --dry-run (DRY_RUN): want true or false");
    const char *a11[] = {"--odd=2", NULL};
    expect_error(a11, NULL, "invalid value \"2\" for --odd: want an odd number below 100");
}

static void test_help_version_and_usage(void **state)
{
    (void)state;
    struct test_config c;
    FILE *saved = stdout;
    stdout = fopen("/dev/null", "w");
    const char *a1[] = {"--port=80", "-h", "--bogus-is-reported-first", NULL};
    assert_int_equal(load(&c, a1, NULL), OPTIONS_ERROR); /* unknown flags win over help */
    const char *a2[] = {"--version", "--help", NULL};
    assert_int_equal(load(&c, a2, NULL), OPTIONS_EXIT);
    fclose(stdout);
    stdout = saved;

    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    options_print_usage(&table, mem);
    fclose(mem);
    static const char *const must[] = {"Usage: test-prog [options]",
                                       "A test program.",
                                       "config file > default",
                                       "--port value  $PORT",
                                       "(1 to 65535)",
                                       "(default: 8888)",
                                       "[file: server.port]",
                                       "--kubeconfig value  $KUBECONFIG, $KCFG",
                                       "--dry-run, -n  $DRY_RUN",
                                       "red or green",
                                       "-v value  $LOG_LEVEL",
                                       "--help, -h"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        if (strstr(text, must[i]) == NULL)
            fail_msg("usage lacks \"%s\":\n%s", must[i], text);
    assert_null(strstr(text, "legacy")); /* no help text: not shown */
    assert_null(strstr(text, "blue"));   /* refused words are not offered */
    free(text);
}

static void test_json(void **state)
{
    (void)state;
    struct test_config c;
    const char *args[] = {"--feature=all", "--tag=x,y", "--timeout=2m", NULL};
    load_ok(&c, args, NULL);
    json_t *root = options_to_json(&table, &c, NULL);
    assert_non_null(root);
    json_t *server = json_object_get(root, "server");
    assert_int_equal(json_integer_value(json_object_get(server, "port")), 8888);
    assert_string_equal(json_string_value(json_object_get(server, "timeout")), "2m");
    assert_string_equal(json_string_value(json_object_get(json_object_get(root, "kube"), "config")),
                        "");
    assert_true(json_is_false(json_object_get(root, "dryRun")));
    assert_string_equal(json_string_value(json_object_get(root, "color")), "red");
    json_t *f = json_object_get(root, "features");
    assert_int_equal(json_array_size(f), 1); /* `all` stands for a, b and c */
    assert_string_equal(json_string_value(json_array_get(f, 0)), "all");
    json_t *t = json_object_get(root, "tags");
    assert_int_equal(json_array_size(t), 2);
    assert_string_equal(json_string_value(json_array_get(t, 1)), "y");
    assert_int_equal(json_integer_value(json_object_get(root, "odd")), 1);
    assert_null(json_object_get(root, "legacy")); /* no field: not dumped */

    /* The dump fed back as a file gives the same values. */
    json_object_del(root, "verbosity");
    char *text = json_dumps(root, 0);
    const char *path = temp_file(text);
    struct test_config d;
    const char *args2[] = {"--config", path, NULL};
    load_ok(&d, args2, NULL);
    json_t *again = options_to_json(&table, &d, NULL);
    json_object_del(again, "verbosity");
    assert_true(json_equal(root, again));
    unlink(path);
    free(text);
    json_decref(root);
    json_decref(again);
    free_config(&c);
    free_config(&d);
}

static void test_parsers(void **state)
{
    (void)state;
    long l;
    bool b;
    int ms;
    assert_int_equal(options_parse_long("42", 0, 100, &l), 0);
    assert_int_equal(l, 42);
    assert_int_equal(options_parse_long(" 4", 0, 100, &l), -1);
    assert_int_equal(options_parse_long("4 ", 0, 100, &l), -1);
    assert_int_equal(options_parse_long("101", 0, 100, &l), -1);
    assert_int_equal(options_parse_long("", 0, 100, &l), -1);
    assert_int_equal(options_parse_long("99999999999999999999", 0, LONG_MAX, &l), -1);
    assert_int_equal(options_parse_bool("TRUE", &b), 0);
    assert_true(b);
    assert_int_equal(options_parse_bool("0", &b), 0);
    assert_false(b);
    assert_int_equal(options_parse_bool("yes", &b), -1); /* YAML spellings only in files */
    assert_int_equal(options_parse_duration_ms("1.5h", &ms), 0);
    assert_int_equal(ms, 5400000);
    assert_int_equal(options_parse_duration_ms("1m30s500ms", &ms), 0);
    assert_int_equal(ms, 90500);
    assert_int_equal(options_parse_duration_ms("0", &ms), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(options_parse_duration_ms("-1s", &ms), -1);
    assert_int_equal(options_parse_duration_ms("5", &ms), -1);
    assert_int_equal(options_parse_duration_ms("999999999h", &ms), -1);
}

/* OPT_HOSTPORT: split once at load, a bad value refused with the reason and
 * the field left as it was, the text kept for JSON and freed by options_free. */
struct hp_config {
    struct option_hostport listen;
};

static const struct option_spec hp_specs[] = {
    {.flag = "listen",
     .env = {"LISTEN"},
     .path = "listen",
     .flags = OPT_IN_FILE,
     .type = OPT_HOSTPORT,
     .offset = offsetof(struct hp_config, listen),
     .def = "",
     .help = "HOST:PORT"},
};
static const struct options_table hp_table = {
    .program = "hp", .version = "1", .summary = "s", .specs = hp_specs, .count = 1};

static enum options_result hp_load(struct hp_config *c, const char *arg)
{
    char *argv[] = {"hp", (char *)arg, NULL};
    char *envp[] = {NULL};
    memset(c, 0, sizeof *c);
    err[0] = '\0';
    return options_load(&hp_table, c, arg != NULL ? 2 : 1, argv, envp, err, sizeof err);
}

static void test_hostport(void **state)
{
    (void)state;
    struct hp_config c;
    static const struct {
        const char *arg, *host;
        unsigned port;
    } good[] = {
        {"--listen=127.0.0.1:9400", "127.0.0.1", 9400},
        {"--listen=[::1]:0", "::1", 0},
        {"--listen=:65535", "", 65535},
        {"--listen=node.example:80", "node.example", 80},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        if (hp_load(&c, good[i].arg) != OPTIONS_OK)
            fail_msg("%s: %s", good[i].arg, err);
        assert_string_equal(c.listen.host, good[i].host);
        assert_int_equal(c.listen.port, good[i].port);
        assert_string_equal(c.listen.text, strchr(good[i].arg, '=') + 1);
        json_t *j = options_to_json(&hp_table, &c, NULL);
        assert_string_equal(json_string_value(json_object_get(j, "listen")), c.listen.text);
        json_decref(j);
        options_free(&hp_table, &c);
        assert_null(c.listen.text);
    }
    assert_int_equal(hp_load(&c, NULL), OPTIONS_OK); /* default "": unset */
    assert_string_equal(c.listen.text, "");
    assert_int_equal(c.listen.port, 0);
    options_free(&hp_table, &c);

    static const struct {
        const char *arg, *why;
    } bad[] = {
        {"--listen=9400", "want HOST:PORT, [IPv6]:PORT or :PORT"},
        {"--listen=host:", "want HOST:PORT, [IPv6]:PORT or :PORT"},
        {"--listen=::1:80", "put an IPv6 host in brackets, [::1]:9400"},
        {"--listen=:65536", "the port must be 0-65535"},
        {"--listen=:-1", "the port must be 0-65535"},
        {"--listen=:80x", "the port must be 0-65535"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(hp_load(&c, bad[i].arg), OPTIONS_ERROR);
        char want[256];
        snprintf(want, sizeof want, "invalid value \"%s\" for --listen (LISTEN): %s",
                 strchr(bad[i].arg, '=') + 1, bad[i].why);
        if (strcmp(err, want) != 0)
            fail_msg("want: %s\ngot:  %s", want, err);
        options_free(&hp_table, &c);
    }
    char host[4];
    unsigned port;
    char why[64];
    assert_int_equal(
        options_parse_hostport("long-host:1", host, sizeof host, &port, why, sizeof why), -1);
    assert_string_equal(why, "host too long");
}

/* The steps can be run one by one (a program that interleaves work). */
static void test_steps(void **state)
{
    (void)state;
    struct test_config c = {0};
    assert_int_equal(options_defaults(&table, &c, err, sizeof err), 0);
    char *env[] = {"PORT=5", NULL};
    assert_int_equal(options_apply_env(&table, &c, env, err, sizeof err), 0);
    char *argv[] = {"test-prog", "--port=6", NULL};
    assert_int_equal(options_apply_argv(&table, &c, 2, argv, err, sizeof err), OPTIONS_OK);
    assert_int_equal(c.port, 6);
    char *bad[] = {"test-prog", "--port=x", NULL};
    assert_int_equal(options_apply_argv(&table, &c, 2, bad, err, sizeof err), OPTIONS_ERROR);
    assert_int_equal(c.port, 6); /* a bad value changes nothing */
    const char *path = temp_file("");
    assert_int_equal(options_apply_file(&table, &c, path, err, sizeof err), 0); /* empty file */
    unlink(path);
    free_config(&c);
}

/* A second program: an enum whose help says its choices itself, and a
 * setting renamed with its old names kept. */
struct renamed_config {
    int shade;
    int unit;
};

static const struct option_value shades[] = {
    {"light", 0, NULL}, {"dark", 1, NULL}, {NULL, 0, NULL}};
static const struct option_value units[] = {{"GiB", 0, NULL}, {"MiB", 1, NULL}, {NULL, 0, NULL}};

static const struct option_spec renamed_specs[] = {
    {.flag = "shade",
     .type = OPT_ENUM,
     .offset = offsetof(struct renamed_config, shade),
     .def = "light",
     .values = shades,
     .help = "`light` (white paper) or `dark` (for the night)"},
    {.flag = "gpu-memory-unit",
     .env = {"GPU_MEMORY_UNIT"},
     .type = OPT_ENUM,
     .offset = offsetof(struct renamed_config, unit),
     .def = "GiB",
     .values = units,
     .help = "the unit: gigabytes",
     .deprecated_flag = "memory-unit",
     .deprecated_env = "MEMORY_UNIT"},
    {.flag = "version", .type = OPT_VERSION, .help = "print the version"},
};
static const struct options_table renamed_table = {
    .program = "renamed-prog", .version = "1.2.3", .specs = renamed_specs, .count = 3};

struct captured_log {
    char text[1024];
    int warnings;
};

static void capture_sink(void *ctx, enum log_severity severity, const char *file, int line,
                         const char *message, size_t len)
{
    struct captured_log *c = ctx;
    c->warnings += severity == LOG_WARNING;
    strncat(c->text, message, sizeof c->text - strlen(c->text) - 2);
    strcat(c->text, "\n");
}

static enum options_result load_renamed(struct renamed_config *c, struct captured_log *log,
                                        const char *const *args, const char *const *env)
{
    char *argv[8] = {"renamed-prog"};
    char *envp[8] = {NULL};
    int argc = 1;
    for (size_t i = 0; args != NULL && args[i] != NULL; i++)
        argv[argc++] = (char *)args[i];
    for (size_t i = 0; env != NULL && env[i] != NULL; i++)
        envp[i] = (char *)env[i];
    memset(c, 0, sizeof *c);
    memset(log, 0, sizeof *log);
    log_set_sink(capture_sink, log);
    enum options_result r = options_load(&renamed_table, c, argc, argv, envp, err, sizeof err);
    log_set_sink(NULL, NULL);
    return r;
}

static char *usage_of(const struct options_table *t)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    assert_non_null(mem);
    options_print_usage(t, mem);
    assert_int_equal(fclose(mem), 0);
    return text;
}

static void test_help_says_choices_once(void **state)
{
    (void)state;
    char *text = usage_of(&renamed_table);
    /* The help names light and dark: no ": light or dark" after it. */
    if (strstr(text, "light or dark") != NULL)
        fail_msg("choices said twice:\n%s", text);
    /* "the unit: gigabytes" names neither GiB nor MiB: the list is added. */
    if (strstr(text, "the unit: gigabytes: GiB or MiB") == NULL)
        fail_msg("choices missing:\n%s", text);
    assert_non_null(strstr(text, "(deprecated names: --memory-unit, $MEMORY_UNIT)"));
    free(text);
    /* "red" in a word of its own only: the main table's "a color" names none. */
    text = usage_of(&table);
    assert_non_null(strstr(text, "a color: red or green"));
    free(text);
}

static void test_deprecated_names_work_and_warn(void **state)
{
    (void)state;
    struct renamed_config c;
    struct captured_log log;
    const char *old_flag[] = {"--memory-unit=MiB", NULL};
    assert_int_equal(load_renamed(&c, &log, old_flag, NULL), OPTIONS_OK);
    assert_int_equal(c.unit, 1);
    assert_int_equal(log.warnings, 1);
    assert_non_null(strstr(log.text, "--memory-unit is deprecated: use --gpu-memory-unit"));

    const char *old_env[] = {"MEMORY_UNIT=MiB", NULL};
    assert_int_equal(load_renamed(&c, &log, NULL, old_env), OPTIONS_OK);
    assert_int_equal(c.unit, 1);
    assert_int_equal(log.warnings, 1);
    assert_non_null(strstr(log.text, "$MEMORY_UNIT is deprecated: use --gpu-memory-unit"));

    /* The new names win, and say nothing. */
    const char *both_env[] = {"MEMORY_UNIT=MiB", "GPU_MEMORY_UNIT=GiB", NULL};
    assert_int_equal(load_renamed(&c, &log, NULL, both_env), OPTIONS_OK);
    assert_int_equal(c.unit, 0);
    assert_int_equal(log.warnings, 0);
    const char *new_flag[] = {"--gpu-memory-unit", "MiB", NULL};
    assert_int_equal(load_renamed(&c, &log, new_flag, old_env), OPTIONS_OK);
    assert_int_equal(c.unit, 1);

    /* An old name takes the same values, with the same errors. */
    const char *bad[] = {"--memory-unit=TiB", NULL};
    assert_int_equal(load_renamed(&c, &log, bad, NULL), OPTIONS_ERROR);
    assert_non_null(strstr(err, "want GiB or MiB"));
}

static void test_version_names_the_commit(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    assert_non_null(mem);
    options_print_version(&renamed_table, mem);
    assert_int_equal(fclose(mem), 0);
    char want[128];
    snprintf(want, sizeof want, "renamed-prog version 1.2.3 (commit %s)\n", gp_build_revision);
    assert_string_equal(text, want);
    free(text);
    /* A revision is always there: a commit id, or "unknown" outside git. */
    assert_true(strlen(gp_build_revision) > 0);
    /* Under git (the source tree of this test), the commit of HEAD. */
    const char *src = getenv("GP_SOURCE_DIR");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "git -C '%s' rev-parse --short=12 HEAD 2>/dev/null", src ? src : ".");
    FILE *git = src ? popen(cmd, "r") : NULL;
    char head[64] = "";
    if (git != NULL) {
        if (fgets(head, sizeof head, git) == NULL)
            head[0] = '\0';
        pclose(git);
    }
    head[strcspn(head, "\n")] = '\0';
    if (head[0] != '\0')
        assert_string_equal(gp_build_revision, head);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_type_from_flags),
        cmocka_unit_test(test_env),
        cmocka_unit_test(test_file_and_precedence),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_cli_errors),
        cmocka_unit_test(test_help_version_and_usage),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_parsers),
        cmocka_unit_test(test_steps),
        cmocka_unit_test(test_hostport),
        cmocka_unit_test(test_help_says_choices_once),
        cmocka_unit_test(test_deprecated_names_work_and_warn),
        cmocka_unit_test(test_version_names_the_commit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
