/* Unit tests: cdi_spec.c -- the vendor-neutral CDI spec builder: the JSON
 * a runtime reads (parsed back with jansson), refusal of bad kinds and
 * names, the atomic write into a temporary directory and removal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>

#include "arena.h"
#include "cdi_spec.h"
#include "container_edits.h"

/* A claim-like spec: two devices of kind example.com/claim, one with a
 * device node and a limit variable, one with a read-write mount, and
 * common edits with a read-only mount and a hook. */
struct sample {
    struct arena a;
    struct container_edits common, d0, d1;
    struct cdi_spec_device devices[2];
    struct cdi_spec spec;
};

static void sample_init(struct sample *s)
{
    s->a = (struct arena)ARENA_INIT;
    container_edits_init(&s->common, &s->a);
    container_edits_init(&s->d0, &s->a);
    container_edits_init(&s->d1, &s->a);
    const char *args[2] = {"hookbin", "update-ldcache"};
    assert_int_equal(container_edits_add_mount(&s->common, "/h/lib.so", "/lib.so", true), 0);
    assert_int_equal(
        container_edits_add_hook(&s->common, "createContainer", "/bin/hookbin", args, 2), 0);
    assert_int_equal(
        container_edits_add_device_node(&s->d0, "/dev/nvidia0", "/r/dev/nvidia0", NULL), 0);
    assert_int_equal(container_edits_set_env(&s->d0, "CUDA_DEVICE_MEMORY_LIMIT_0", "4294967296"),
                     0);
    assert_int_equal(container_edits_add_mount(&s->d1, "/host/region", "/run/region", false), 0);
    /* CDI names are what name a spec, never in it. */
    assert_int_equal(container_edits_add_cdi_device(&s->d1, "example.com/claim=x"), 0);
    s->devices[0] = (struct cdi_spec_device){"uid-gpu-0", &s->d0};
    s->devices[1] = (struct cdi_spec_device){"uid-gpu-1", &s->d1};
    s->spec = (struct cdi_spec){"example.com/claim", s->devices, 2, &s->common};
}

static json_t *parse(const char *text)
{
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    assert_non_null(root);
    return root;
}

static void test_json_shape(void **state)
{
    (void)state;
    struct sample s;
    sample_init(&s);
    char err[256];
    char *text = cdi_spec_json(&s.spec, err, sizeof err);
    assert_non_null(text);
    assert_int_equal(text[strlen(text) - 1], '\n');
    json_t *root = parse(text);
    assert_string_equal(json_string_value(json_object_get(root, "cdiVersion")), "0.5.0");
    assert_string_equal(json_string_value(json_object_get(root, "kind")), "example.com/claim");

    json_t *devs = json_object_get(root, "devices");
    assert_int_equal(json_array_size(devs), 2);
    json_t *d0 = json_array_get(devs, 0);
    assert_string_equal(json_string_value(json_object_get(d0, "name")), "uid-gpu-0");
    json_t *e0 = json_object_get(d0, "containerEdits");
    assert_string_equal(json_string_value(json_array_get(json_object_get(e0, "env"), 0)),
                        "CUDA_DEVICE_MEMORY_LIMIT_0=4294967296");
    json_t *node = json_array_get(json_object_get(e0, "deviceNodes"), 0);
    assert_string_equal(json_string_value(json_object_get(node, "path")), "/dev/nvidia0");
    assert_string_equal(json_string_value(json_object_get(node, "hostPath")), "/r/dev/nvidia0");
    assert_null(json_object_get(node, "permissions")); /* NULL: the runtime's default */
    assert_null(json_object_get(e0, "mounts"));        /* empty lists left out */
    assert_null(json_object_get(e0, "hooks"));

    json_t *e1 = json_object_get(json_array_get(devs, 1), "containerEdits");
    json_t *rw = json_array_get(json_object_get(e1, "mounts"), 0);
    assert_string_equal(json_string_value(json_object_get(rw, "hostPath")), "/host/region");
    assert_string_equal(json_string_value(json_object_get(rw, "containerPath")), "/run/region");
    assert_string_equal(json_string_value(json_array_get(json_object_get(rw, "options"), 0)), "rw");
    assert_null(json_object_get(e1, "env"));
    assert_null(strstr(text, "example.com/claim=x"));

    json_t *common = json_object_get(root, "containerEdits");
    json_t *ro = json_array_get(json_object_get(common, "mounts"), 0);
    json_t *opts = json_object_get(ro, "options");
    assert_int_equal(json_array_size(opts), 4);
    assert_string_equal(json_string_value(json_array_get(opts, 0)), "ro");
    assert_string_equal(json_string_value(json_array_get(opts, 3)), "bind");
    json_t *hook = json_array_get(json_object_get(common, "hooks"), 0);
    assert_string_equal(json_string_value(json_object_get(hook, "hookName")), "createContainer");
    assert_string_equal(json_string_value(json_object_get(hook, "path")), "/bin/hookbin");
    assert_string_equal(json_string_value(json_array_get(json_object_get(hook, "args"), 1)),
                        "update-ldcache");
    json_decref(root);
    free(text);

    /* No common edits: no containerEdits at the top. */
    s.spec.common = NULL;
    text = cdi_spec_json(&s.spec, err, sizeof err);
    assert_non_null(text);
    root = parse(text);
    assert_null(json_object_get(root, "containerEdits"));
    json_decref(root);
    free(text);
    arena_free(&s.a);
}

static void test_refuses_bad_kind_and_names(void **state)
{
    (void)state;
    struct sample s;
    sample_init(&s);
    char err[256];
    const char *bad_kinds[] = {"claim", "/claim", "example.com/", "a/b/c", NULL};
    for (size_t i = 0; i < sizeof bad_kinds / sizeof bad_kinds[0]; i++) {
        s.spec.kind = bad_kinds[i];
        err[0] = '\0';
        assert_null(cdi_spec_json(&s.spec, err, sizeof err));
        assert_non_null(strstr(err, "vendor/class"));
    }
    s.spec.kind = "example.com/claim";
    s.devices[1].name = "uid-gpu-0";
    assert_null(cdi_spec_json(&s.spec, err, sizeof err));
    assert_non_null(strstr(err, "listed twice"));
    s.devices[1].name = "";
    assert_null(cdi_spec_json(&s.spec, err, sizeof err));
    assert_non_null(strstr(err, "no name"));
    arena_free(&s.a);
}

static void test_write_replace_and_remove(void **state)
{
    (void)state;
    struct sample s;
    sample_init(&s);
    char root[] = "/tmp/gp-cdi-spec-XXXXXX", dir[128], path[192], err[256];
    assert_non_null(mkdtemp(root));
    snprintf(dir, sizeof dir, "%s/cdi", root); /* created by the write */
    snprintf(path, sizeof path, "%s/example.com-claim_uid.json", dir);

    assert_int_equal(cdi_spec_write(&s.spec, dir, "example.com-claim_uid.json", err, sizeof err),
                     0);
    json_error_t jerr;
    json_t *first = json_load_file(path, 0, &jerr);
    assert_non_null(first);
    assert_int_equal(json_array_size(json_object_get(first, "devices")), 2);
    json_decref(first);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);

    /* Rewritten whole with fewer devices; no temporary file left beside it. */
    s.spec.device_count = 1;
    assert_int_equal(cdi_spec_write(&s.spec, dir, "example.com-claim_uid.json", err, sizeof err),
                     0);
    json_t *second = json_load_file(path, 0, &jerr);
    assert_int_equal(json_array_size(json_object_get(second, "devices")), 1);
    json_decref(second);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "test $(ls -A %s | wc -l) -eq 1", dir);
    assert_int_equal(system(cmd), 0);

    /* Names that would leave the directory, or that CDI would not read. */
    assert_int_equal(cdi_spec_write(&s.spec, dir, "../escape.json", err, sizeof err), -1);
    assert_int_equal(cdi_spec_write(&s.spec, dir, "spec.txt", err, sizeof err), -1);
    assert_int_equal(cdi_spec_remove(dir, "../x.json", err, sizeof err), -1);

    /* A spec that does not build leaves the old file in place. */
    s.spec.kind = "nokind";
    assert_int_equal(cdi_spec_write(&s.spec, dir, "example.com-claim_uid.json", err, sizeof err),
                     -1);
    assert_int_equal(stat(path, &st), 0);

    assert_int_equal(cdi_spec_remove(dir, "example.com-claim_uid.json", err, sizeof err), 0);
    assert_int_equal(stat(path, &st), -1);
    assert_int_equal(cdi_spec_remove(dir, "example.com-claim_uid.json", err, sizeof err), 0);

    assert_int_equal(rmdir(dir), 0);
    assert_int_equal(rmdir(root), 0);
    arena_free(&s.a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_shape),
        cmocka_unit_test(test_refuses_bad_kind_and_names),
        cmocka_unit_test(test_write_replace_and_remove),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
