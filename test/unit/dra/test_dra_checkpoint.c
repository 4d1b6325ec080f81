/* Unit tests: dra_checkpoint.c -- round trip, and every refused file
 * (corrupt, truncated, wrong magic, wrong version, bad entries) named in the
 * error, kept aside as <file>.bad byte for byte, the record empty and usable. */
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

#include "dra_checkpoint.h"

struct dir {
    char path[256];
    char file[300];
};

static int setup(void **state)
{
    struct dir *d = calloc(1, sizeof *d);
    snprintf(d->path, sizeof d->path, "/tmp/gp-dracp-XXXXXX");
    if (d == NULL || mkdtemp(d->path) == NULL)
        return -1;
    snprintf(d->file, sizeof d->file, "%s/" DRA_CHECKPOINT_FILE, d->path);
    *state = d;
    return 0;
}

static int teardown(void **state)
{
    struct dir *d = *state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->path);
    int rc = system(cmd);
    free(d);
    return rc == 0 ? 0 : -1;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static struct dra_claim_entry make_entry(const char *uid, enum dra_claim_state st,
                                         struct dra_device *devs, size_t n)
{
    struct dra_claim_entry e = {0};
    snprintf(e.uid, sizeof e.uid, "%s", uid);
    snprintf(e.ns, sizeof e.ns, "team-a");
    snprintf(e.name, sizeof e.name, "claim-%s", uid);
    e.state = st;
    e.devices = devs;
    e.device_count = n;
    return e;
}

static void test_round_trip(void **state)
{
    struct dir *d = *state;
    struct dra_checkpoint cp;
    char err[1024];
    assert_int_equal(dra_checkpoint_load(&cp, d->file, err, sizeof err), 0); /* absent: empty */
    assert_int_equal(cp.count, 0);
    struct dra_device devs[2] = {0};
    snprintf(devs[0].request, sizeof devs[0].request, "gpu");
    snprintf(devs[0].pool, sizeof devs[0].pool, "node1");
    snprintf(devs[0].device, sizeof devs[0].device, "gpu-0");
    snprintf(devs[0].share_id, sizeof devs[0].share_id, "s-1");
    snprintf(devs[0].uuid, sizeof devs[0].uuid, "GPU-abc");
    snprintf(devs[0].cdi_id, sizeof devs[0].cdi_id, "k8s.gpu.gpupool.io/claim=u1-gpu-0");
    devs[0].limit = 4ull << 30;
    devs[1] = devs[0];
    snprintf(devs[1].device, sizeof devs[1].device, "gpu-1");
    devs[1].share_id[0] = '\0';
    devs[1].request[0] = '\0';
    devs[1].limit = 0;
    struct dra_claim_entry a = make_entry("u1", DRA_PREPARE_COMPLETED, devs, 2);
    struct dra_claim_entry b = make_entry("u2", DRA_PREPARE_STARTED, NULL, 0);
    assert_int_equal(dra_checkpoint_put(&cp, &a), 0);
    assert_int_equal(dra_checkpoint_put(&cp, &b), 0);
    assert_int_equal(dra_checkpoint_save(&cp, err, sizeof err), 0);
    struct stat st;
    assert_int_equal(stat(d->file, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    dra_checkpoint_free(&cp);

    assert_int_equal(dra_checkpoint_load(&cp, d->file, err, sizeof err), 0);
    assert_int_equal(cp.count, 2);
    struct dra_claim_entry *e = dra_checkpoint_find(&cp, "u1");
    assert_non_null(e);
    assert_int_equal(e->state, DRA_PREPARE_COMPLETED);
    assert_string_equal(e->ns, "team-a");
    assert_int_equal(e->device_count, 2);
    assert_string_equal(e->devices[0].share_id, "s-1");
    assert_string_equal(e->devices[0].request, "gpu");
    assert_true(e->devices[0].limit == 4ull << 30);
    assert_string_equal(e->devices[1].device, "gpu-1");
    assert_string_equal(e->devices[1].share_id, "");
    assert_true(e->devices[1].limit == 0);
    assert_int_equal(dra_checkpoint_find(&cp, "u2")->state, DRA_PREPARE_STARTED);

    /* put replaces, remove drops */
    struct dra_claim_entry b2 = make_entry("u2", DRA_PREPARE_COMPLETED, devs, 1);
    assert_int_equal(dra_checkpoint_put(&cp, &b2), 0);
    assert_int_equal(cp.count, 2);
    assert_int_equal(dra_checkpoint_find(&cp, "u2")->device_count, 1);
    assert_true(dra_checkpoint_remove(&cp, "u1"));
    assert_false(dra_checkpoint_remove(&cp, "u1"));
    assert_int_equal(cp.count, 1);
    assert_string_equal(cp.entries[0].uid, "u2");
    dra_checkpoint_free(&cp);
}

/* A refused file: -1, the reason, the file kept aside unchanged, empty record. */
static void refused(struct dir *d, const char *content, const char *why)
{
    struct dra_checkpoint cp;
    char err[1024], bad[400];
    write_text(d->file, content);
    assert_int_equal(dra_checkpoint_load(&cp, d->file, err, sizeof err), -1);
    if (strstr(err, why) == NULL)
        fail_msg("error \"%s\" does not say \"%s\"", err, why);
    assert_non_null(strstr(err, d->file));
    snprintf(bad, sizeof bad, "%s.bad", d->file);
    assert_non_null(strstr(err, bad));
    assert_non_null(cp.path);
    assert_int_equal(cp.count, 0);
    assert_int_equal(access(d->file, F_OK), -1); /* moved, not copied */
    char *kept = read_text(bad);
    assert_non_null(kept);
    assert_string_equal(kept, content);
    /* the record is usable: a save writes a fresh file */
    assert_int_equal(dra_checkpoint_save(&cp, err, sizeof err), 0);
    dra_checkpoint_free(&cp);
    assert_int_equal(dra_checkpoint_load(&cp, d->file, err, sizeof err), 0);
    dra_checkpoint_free(&cp);
}

static void test_refused_files(void **state)
{
    struct dir *d = *state;
    const char *good_claim = "{\"uid\":\"u1\",\"namespace\":\"n\",\"name\":\"c\","
                             "\"state\":\"PrepareCompleted\",\"devices\":[]}";
    char text[1024];
    refused(d, "", "not complete JSON");
    refused(d, "{\"magic\":\"gpupool.io/dra-checkpoint\",\"version\":1,\"claims\":[{\"uid\"",
            "not complete JSON");
    refused(d, "[]", "not a JSON object");
    refused(d, "{\"version\":1,\"claims\":[]}", "magic missing");
    refused(d, "{\"magic\":\"other\",\"version\":1,\"claims\":[]}", "not a gpupool DRA checkpoint");
    refused(d, "{\"magic\":\"gpupool.io/dra-checkpoint\",\"version\":2,\"claims\":[]}",
            "version 2 is not 1");
    refused(d, "{\"magic\":\"gpupool.io/dra-checkpoint\",\"claims\":[]}", "version -1 is not 1");
    refused(d, "{\"magic\":\"gpupool.io/dra-checkpoint\",\"version\":1}", "\"claims\" is missing");
    refused(d,
            "{\"magic\":\"gpupool.io/dra-checkpoint\",\"version\":1,\"claims\":[{\"uid\":\"u1\","
            "\"namespace\":\"n\",\"name\":\"c\",\"state\":\"Prepared\",\"devices\":[]}]}",
            "\"state\" is not PrepareStarted or PrepareCompleted");
    refused(d,
            "{\"magic\":\"gpupool.io/dra-checkpoint\",\"version\":1,\"claims\":[{\"uid\":\"u1\","
            "\"namespace\":\"n\",\"name\":\"c\",\"state\":\"PrepareCompleted\",\"devices\":"
            "[{\"pool\":\"p\",\"device\":\"gpu-0\",\"cdiDeviceID\":\"x\",\"limit\":-5}]}]}",
            "\"limit\" is not a byte count");
    refused(d,
            "{\"magic\":\"gpupool.io/dra-checkpoint\",\"version\":1,\"claims\":[{\"uid\":\"u1\","
            "\"namespace\":\"n\",\"name\":\"c\",\"state\":\"PrepareCompleted\",\"devices\":"
            "[{\"pool\":\"p\",\"cdiDeviceID\":\"x\"}]}]}",
            "\"device\" is missing");
    snprintf(text, sizeof text,
             "{\"magic\":\"gpupool.io/dra-checkpoint\",\"version\":1,\"claims\":[%s,%s]}",
             good_claim, good_claim);
    refused(d, text, "claim u1 is listed twice");
    char longuid[200];
    memset(longuid, 'a', sizeof longuid - 1);
    longuid[sizeof longuid - 1] = '\0';
    snprintf(text, sizeof text,
             "{\"magic\":\"gpupool.io/dra-checkpoint\",\"version\":1,\"claims\":[{\"uid\":\"%s\","
             "\"namespace\":\"n\",\"name\":\"c\",\"state\":\"PrepareCompleted\",\"devices\":[]}]}",
             longuid);
    refused(d, text, "is longer than 63 bytes");
}

static void test_truncated_saved_file(void **state)
{
    /* every prefix of a real file is refused, never half-read */
    struct dir *d = *state;
    struct dra_checkpoint cp;
    char err[1024];
    assert_int_equal(dra_checkpoint_load(&cp, d->file, err, sizeof err), 0);
    struct dra_device dev = {.limit = 1};
    snprintf(dev.pool, sizeof dev.pool, "node1");
    snprintf(dev.device, sizeof dev.device, "gpu-0");
    snprintf(dev.cdi_id, sizeof dev.cdi_id, "k8s.x/claim=u-gpu-0");
    struct dra_claim_entry e = make_entry("u1", DRA_PREPARE_COMPLETED, &dev, 1);
    assert_int_equal(dra_checkpoint_put(&cp, &e), 0);
    assert_int_equal(dra_checkpoint_save(&cp, err, sizeof err), 0);
    dra_checkpoint_free(&cp);
    char full[8192];
    snprintf(full, sizeof full, "%s", read_text(d->file));
    size_t len = strlen(full);
    for (size_t cut = 0; cut < len; cut += 7) {
        char part[8192];
        memcpy(part, full, cut);
        part[cut] = '\0';
        write_text(d->file, part);
        assert_int_equal(dra_checkpoint_load(&cp, d->file, err, sizeof err), -1);
        assert_int_equal(cp.count, 0);
        dra_checkpoint_free(&cp);
    }
}

static void test_unwritable_directory(void **state)
{
    struct dir *d = *state;
    struct dra_checkpoint cp;
    char err[1024], path[400];
    snprintf(path, sizeof path, "%s/missing/" DRA_CHECKPOINT_FILE, d->path);
    assert_int_equal(dra_checkpoint_load(&cp, path, err, sizeof err), 0);
    assert_int_equal(dra_checkpoint_save(&cp, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot write the checkpoint"));
    assert_non_null(strstr(err, path));
    dra_checkpoint_free(&cp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated_saved_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unwritable_directory, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
