/* test_curl_api.c -- the libcurl loader: nothing of libcurl is mapped until
 * the first use, a missing library or a library without curl's functions is
 * reported clearly, and the real one binds every function once per process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "curl_api.h"
#include "kube.h"

static bool libcurl_is_mapped(void)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    assert_non_null(maps);
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, maps) != NULL)
        found = strstr(line, "/libcurl") != NULL;
    fclose(maps);
    return found;
}

static bool table_is_empty(const struct kube_curl *api)
{
    static const struct kube_curl empty;
    return memcmp(api, &empty, sizeof empty) == 0;
}

/* Runs first: linking gp_kube must not load libcurl (the point of the loader). */
static void test_not_loaded_before_first_use(void **state)
{
    assert_false(libcurl_is_mapped());
}

static void test_missing_library(void **state)
{
    struct kube_curl api;
    void *library = &api;
    char err[512] = "";
    assert_int_equal(
        kube_curl_open("libgpupool-test-missing.so.4", &api, &library, err, sizeof err), -1);
    assert_null(library);
    assert_true(table_is_empty(&api));
    assert_non_null(strstr(err, "libgpupool-test-missing.so.4: cannot open shared object file"));
    assert_non_null(strstr(err, "(install libcurl4)"));
    assert_false(libcurl_is_mapped());
}

static void test_library_without_curl(void **state)
{
    struct kube_curl api;
    void *library = &api;
    char err[512] = "";
    assert_int_equal(kube_curl_open("libc.so.6", &api, &library, err, sizeof err), -1);
    assert_null(library);
    assert_true(table_is_empty(&api));
    assert_string_equal(err, "libc.so.6 has no curl_global_init: it is not libcurl, or older "
                             "than 7.68 (install libcurl4)");
}

static void test_real_library(void **state)
{
    struct kube_curl api;
    void *library = NULL;
    char err[512] = "";
    assert_int_equal(kube_curl_open(KUBE_CURL_SONAME, &api, &library, err, sizeof err), 0);
    assert_non_null(library);
#define CHECK_BOUND(name) assert_non_null((void *)api.name);
    KUBE_CURL_FUNCTIONS(CHECK_BOUND)
#undef CHECK_BOUND
    char *escaped = api.easy_escape(NULL, "a=b c", 0);
    assert_string_equal(escaped, "a%3Db%20c");
    api.free(escaped);
    assert_int_equal(dlclose(library), 0);
}

/* The process-wide table: loaded once, the same for every caller. */
static void test_process_table(void **state)
{
    char err[512] = "";
    const struct kube_curl *first = kube_curl_get(err, sizeof err);
    assert_non_null(first);
    assert_ptr_equal(kube_curl_get(NULL, 0), first);
    assert_true(libcurl_is_mapped());
    char *escaped = kube_escape("spec.nodeName=n1");
    assert_string_equal(escaped, "spec.nodeName%3Dn1");
    free(escaped);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_loaded_before_first_use),
        cmocka_unit_test(test_missing_library),
        cmocka_unit_test(test_library_without_curl),
        cmocka_unit_test(test_real_library),
        cmocka_unit_test(test_process_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
