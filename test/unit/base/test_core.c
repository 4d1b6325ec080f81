/* Unit tests: the dependency-free base core -- clock deadlines, the text
 * buffer, the dlopen symbol-table loader and the log sink. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "clock.h"
#include "dl.h"
#include "file.h"
#include "log.h"

static void test_clock_deadline_normalised(void **state)
{
    (void)state;
    for (long ms = 0; ms < 3000; ms += 7) {
        struct timespec before, d = clock_deadline(CLOCK_MONOTONIC, ms);
        clock_gettime(CLOCK_MONOTONIC, &before);
        assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
        long long diff_ms =
            ((long long)d.tv_sec - before.tv_sec) * 1000 + (d.tv_nsec - before.tv_nsec) / 1000000;
        assert_true(diff_ms <= ms && diff_ms >= ms - 50);
    }
    int64_t a = clock_now_ns(), b = clock_now_ns();
    assert_true(b >= a);
    assert_true(clock_now_ms() <= clock_now_us() / 1000 + 1);
    assert_true(clock_wall_ns() > 1600000000LL * 1000000000LL);
}

/* A condition variable from clock_cond_init waits on CLOCK_MONOTONIC: a
 * deadline from clock_deadline(CLOCK_MONOTONIC) times out when it says (on
 * a REALTIME condvar the same timespec would be decades in the past and
 * return at once). */
static void test_clock_cond_waits_on_monotonic(void **state)
{
    (void)state;
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cond;
    clock_cond_init(&cond);
    int64_t start = clock_now_ms();
    struct timespec d = clock_deadline(CLOCK_MONOTONIC, 50);
    pthread_mutex_lock(&lock);
    int rc = 0;
    while (rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&cond, &lock, &d);
    pthread_mutex_unlock(&lock);
    int64_t waited = clock_now_ms() - start;
    assert_true(waited >= 49 && waited < 5000);
    pthread_cond_destroy(&cond);
}

static void test_buf_appends_and_takes(void **state)
{
    (void)state;
    struct buf b = {0};
    assert_true(buf_str(&b, "a="));
    assert_true(buf_u64(&b, 18446744073709551615ULL));
    assert_true(buf_printf(&b, " %s", "x"));
    char big[9000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_true(buf_printf(&b, "%s", big)); /* longer than the room: grows and retries */
    assert_true(buf_json_string(&b, "q\"\\\n"));
    size_t len;
    char *text = buf_take(&b, &len);
    assert_non_null(text);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(text, "a=18446744073709551615 x", 24);
    assert_string_equal(text + 24 + 8999, "\"q\\\"\\\\\\u000a\"");
    free(text);
    assert_null(b.data);
    text = buf_take(&b, NULL); /* empty: "" */
    assert_string_equal(text, "");
    free(text);
}

static void test_dl_open_and_bind(void **state)
{
    (void)state;
    struct dl_library lib;
    char err[GP_ERR_LEN];
    const char *const names[] = {"/nonexistent/libm.so.6", "libgpupool-nonexistent.so.1",
                                 "libm.so.6"};
    assert_int_equal(dl_open(&lib, names, 3, RTLD_NOW | RTLD_LOCAL, err, sizeof err), 0);
    assert_string_equal(lib.path, "libm.so.6");
    /* absent absolute paths are skipped, bare names listed */
    assert_string_equal(lib.tried, "libgpupool-nonexistent.so.1; libm.so.6");

    double (*cosine)(double) = NULL, (*nothing)(double) = (double (*)(double))1;
    const char *bound = NULL;
    static const char *const cos_names[] = {"cos_v9", "cos", NULL};
    static const char *const none_names[] = {"gpupool_no_such_symbol", NULL};
    struct dl_symbol table[] = {
        {cos_names, &cosine, &bound, true},
        {none_names, &nothing, NULL, false},
    };
    assert_int_equal(dl_bind(&lib, table, 2, NULL, err, sizeof err), 0);
    assert_non_null(cosine);
    assert_string_equal(bound, "cos");
    assert_null(nothing);
    assert_true(cosine(0.0) == 1.0);

    table[1].required = true;
    const char *missing = NULL;
    assert_int_equal(dl_bind(&lib, table, 2, &missing, err, sizeof err), -1);
    assert_string_equal(missing, "gpupool_no_such_symbol");
    assert_string_equal(err, "libm.so.6 has no gpupool_no_such_symbol");
    assert_non_null(strstr(lib.error, "gpupool_no_such_symbol")); /* dlerror() kept */
    assert_int_equal(dl_close(&lib, err, sizeof err), 0);
    assert_int_equal(dl_close(&lib, err, sizeof err), 0); /* idempotent */

    const char *const absent[] = {"libgpupool-nonexistent.so.1"};
    assert_int_equal(dl_open(&lib, absent, 1, RTLD_NOW, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot load libgpupool-nonexistent.so.1: "));
    assert_non_null(strstr(lib.error, "libgpupool-nonexistent.so.1"));
}

struct captured {
    int calls;
    enum log_severity severity;
    char message[128];
};

static void capture(void *ctx, enum log_severity severity, const char *file, int line,
                    const char *message, size_t len)
{
    struct captured *c = ctx;
    c->calls++;
    c->severity = severity;
    assert_string_equal(file, "test_core.c");
    assert_true(line > 0);
    assert_int_equal(len, strlen(message));
    snprintf(c->message, sizeof c->message, "%s", message);
}

static void test_log_sink_replaces_stderr(void **state)
{
    (void)state;
    struct captured c = {0};
    log_set_sink(capture, &c);
    log_warn("gpu %d lost", 3);
    log_v(5, "not formatted at verbosity 0");
    log_set_sink(NULL, NULL);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.severity, LOG_WARNING);
    assert_string_equal(c.message, "gpu 3 lost");
}

static void test_file_replace(void **state)
{
    (void)state;
    char dir[] = "/tmp/gp-file-XXXXXX", path[64], tmp[80], got[16] = "";
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/f", dir);
    snprintf(tmp, sizeof tmp, "%s/.f.tmp", dir);
    mode_t old = umask(077);
    assert_int_equal(file_replace(path, "one", 3, 0644, 0), 0);
    assert_int_equal(file_replace(path, "two\n", 4, 0644, FILE_REPLACE_SYNC), 0);
    umask(old);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644); /* past the umask */
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(got, sizeof got, f));
    fclose(f);
    assert_string_equal(got, "two\n");
    assert_int_equal(access(tmp, F_OK), -1); /* nothing left beside it */
    /* A leftover temporary file, even a symlink, is replaced, not followed. */
    assert_int_equal(symlink("/etc/passwd", tmp), 0);
    assert_int_equal(file_replace(path, "three", 5, 0600, 0), 0);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 5);
    /* No directory: the old file is all there is, and the caller can tell. */
    char missing[96];
    snprintf(missing, sizeof missing, "%s/no/f", dir);
    errno = 0;
    assert_int_equal(file_replace(missing, "x", 1, 0600, 0), FILE_REPLACE_NO_TEMP);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clock_deadline_normalised),
        cmocka_unit_test(test_clock_cond_waits_on_monotonic),
        cmocka_unit_test(test_buf_appends_and_takes),
        cmocka_unit_test(test_file_replace),
        cmocka_unit_test(test_dl_open_and_bind),
        cmocka_unit_test(test_log_sink_replaces_stderr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
