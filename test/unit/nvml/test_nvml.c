/* test_nvml.c -- the NVML loader against the fake NVML library: search
 * order, error messages, versioned-symbol fallback, and the fake's run-time
 * controls (XID events, lost GPUs, injected errors). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <time.h>

#include "fake_nvml_env.h"
#include "gpu.h"
#include "nvml.h"

static struct nvml *open_fake(int v1only)
{
    struct nvml *nvml = NULL;
    char err[2048] = "";
    int rc = nvml_open(fake_driver_root(v1only), &nvml, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "nvml_open: %s\n", err);
    assert_int_equal(rc, 0);
    assert_non_null(nvml);
    return nvml;
}

static void test_library_absent(void **state)
{
    (void)state;
    /* A real driver on the test machine would make this test meaningless. */
    void *real = dlopen(NVML_LIBRARY_SONAME, RTLD_LAZY);
    if (real != NULL) {
        dlclose(real);
        skip();
    }
    struct nvml *nvml = (struct nvml *)1;
    char err[2048] = "";
    assert_int_equal(nvml_open("/nonexistent-driver-root", &nvml, err, sizeof err), -1);
    assert_null(nvml);
    assert_non_null(strstr(err, "could not load NVML library libnvidia-ml.so.1"));
    assert_non_null(strstr(err, "/nonexistent-driver-root"));
    assert_non_null(strstr(err, "default loader path"));
    assert_non_null(strstr(err, "--driver-root / NVIDIA_DRIVER_ROOT"));
    assert_non_null(strstr(err, "dlerror:"));
}

static void test_init_error_is_reported_with_nvml_text(void **state)
{
    (void)state;
    json_t *root = fake_inventory_load("4gpu.json");
    json_object_set_new(root, "init_error", json_string("DRIVER_NOT_LOADED"));
    char *path = fake_inventory_use_json(root);
    struct nvml *nvml = NULL;
    char err[2048] = "";
    assert_int_equal(nvml_open(fake_driver_root(0), &nvml, err, sizeof err), -1);
    assert_null(nvml);
    assert_non_null(strstr(err, "nvmlInit_v2 failed: Driver Not Loaded"));
    fake_inventory_remove(path);
    json_decref(root);
}

static void test_missing_inventory_means_no_driver(void **state)
{
    (void)state;
    setenv("FAKE_NVML_INVENTORY", "/nonexistent/inventory.json", 1);
    struct nvml *nvml = NULL;
    char err[2048] = "";
    assert_int_equal(nvml_open(fake_driver_root(0), &nvml, err, sizeof err), -1);
    assert_non_null(strstr(err, "Driver Not Loaded"));
}

static void test_newest_symbols_are_bound(void **state)
{
    (void)state;
    fake_use_inventory("4gpu.json");
    struct nvml *nvml = open_fake(0);
    assert_string_equal(nvml->symbols.Init, "nvmlInit_v2");
    assert_string_equal(nvml->symbols.DeviceGetCount, "nvmlDeviceGetCount_v2");
    assert_string_equal(nvml->symbols.DeviceGetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2");
    assert_string_equal(nvml->symbols.DeviceGetPciInfo, "nvmlDeviceGetPciInfo_v3");
    assert_string_equal(nvml->symbols.EventSetWait, "nvmlEventSetWait_v2");
    assert_string_equal(nvml->symbols.DeviceGetNvLinkRemotePciInfo,
                        "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    assert_non_null(nvml->DeviceGetMemoryInfo_v2);
    assert_string_equal(nvml->symbols.DeviceGetComputeRunningProcesses,
                        "nvmlDeviceGetComputeRunningProcesses_v3");
    assert_string_equal(nvml->symbols.DeviceGetProcessUtilization,
                        "nvmlDeviceGetProcessUtilization");
    assert_non_null(strstr(nvml->library_path, "/root/usr/lib64/libnvidia-ml.so.1"));
    unsigned int count = 0;
    assert_int_equal(nvml->DeviceGetCount(&count), NVML_SUCCESS);
    assert_int_equal(count, 4);
    nvml_close(nvml);
}

static void test_v1_only_library_falls_back(void **state)
{
    (void)state;
    fake_use_inventory("4gpu.json");
    struct nvml *nvml = open_fake(1);
    assert_string_equal(nvml->symbols.Init, "nvmlInit");
    assert_string_equal(nvml->symbols.DeviceGetCount, "nvmlDeviceGetCount");
    assert_string_equal(nvml->symbols.DeviceGetPciInfo, "nvmlDeviceGetPciInfo");
    assert_string_equal(nvml->symbols.EventSetWait, "nvmlEventSetWait");
    assert_null(nvml->InitWithFlags);
    assert_null(nvml->DeviceGetMemoryInfo_v2);
    assert_non_null(strstr(nvml->library_path, "/v1only/root/"));
    unsigned int count = 0;
    assert_int_equal(nvml->DeviceGetCount(&count), NVML_SUCCESS);
    assert_int_equal(count, 4);
    nvmlDevice_t device;
    nvmlPciInfo_t pci;
    assert_int_equal(nvml->DeviceGetHandleByIndex(3, &device), NVML_SUCCESS);
    assert_int_equal(nvml->DeviceGetPciInfo(device, &pci), NVML_SUCCESS);
    assert_string_equal(pci.busId, "00000000:4E:00.0");
    nvml_close(nvml);
}

static void test_strerror(void **state)
{
    (void)state;
    assert_string_equal(nvml_strerror(NULL, NVML_ERROR_GPU_IS_LOST),
                        "GPU is lost (NVML_ERROR_GPU_IS_LOST)");
    assert_string_equal(nvml_error_name(NVML_ERROR_TIMEOUT), "NVML_ERROR_TIMEOUT");
    assert_string_equal(nvml_error_name((nvmlReturn_t)12345), "NVML_ERROR_UNKNOWN");
    fake_use_inventory("4gpu.json");
    struct nvml *nvml = open_fake(0);
    assert_string_equal(nvml_strerror(nvml, NVML_ERROR_DRIVER_NOT_LOADED), "Driver Not Loaded");
    nvml_close(nvml);
    nvml_close(NULL);
}

/* ---- the fake's run-time controls ------------------------------------------------- */

struct control_fixture {
    char dir[64];
    char control[128];
    char event_log[128];
    struct nvml *nvml;
};

static int control_setup(void **state)
{
    struct control_fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/gp-fakenvml-ctl-XXXXXX");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    snprintf(f->control, sizeof f->control, "%s/control", f->dir);
    snprintf(f->event_log, sizeof f->event_log, "%s/events.log", f->dir);
    fake_use_inventory("8gpu-nvlink.json");
    setenv("FAKE_NVML_CONTROL", f->control, 1);
    setenv("FAKE_NVML_EVENT_LOG", f->event_log, 1);
    f->nvml = open_fake(0);
    *state = f;
    return 0;
}

static int control_teardown(void **state)
{
    struct control_fixture *f = *state;
    nvml_close(f->nvml);
    unlink(f->control);
    unlink(f->event_log);
    rmdir(f->dir);
    unsetenv("FAKE_NVML_CONTROL");
    unsetenv("FAKE_NVML_EVENT_LOG");
    free(f);
    return 0;
}

static void append_line(const char *path, const char *line)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, line, strlen(line)), (ssize_t)strlen(line));
    close(fd);
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

struct delayed_write {
    const char *path;
    const char *line;
    long long written_ns;
};

static void *write_later(void *arg)
{
    struct delayed_write *w = arg;
    struct timespec nap = {0, 50 * 1000000L};
    nanosleep(&nap, NULL);
    w->written_ns = now_ns();
    append_line(w->path, w->line);
    return NULL;
}

static void test_xid_wakes_event_wait(void **state)
{
    struct control_fixture *f = *state;
    struct nvml *nvml = f->nvml;
    nvmlEventSet_t set;
    nvmlDevice_t gpu1;
    assert_int_equal(nvml->EventSetCreate(&set), NVML_SUCCESS);
    assert_int_equal(nvml->DeviceGetHandleByIndex(1, &gpu1), NVML_SUCCESS);
    assert_int_equal(nvml->DeviceRegisterEvents(gpu1, nvmlEventTypeXidCriticalError, set),
                     NVML_SUCCESS);
    nvmlEventData_t event;
    assert_int_equal(nvml->EventSetWait(set, &event, 10), NVML_ERROR_TIMEOUT);

    /* An XID on an unregistered GPU is not delivered; one on GPU 1 is. */
    struct delayed_write w = {f->control, "xid 0 31\nxid 1 48\n", 0};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, write_later, &w), 0);
    assert_int_equal(nvml->EventSetWait(set, &event, 5000), NVML_SUCCESS);
    long long woke_ns = now_ns();
    pthread_join(thread, NULL);
    assert_ptr_equal(event.device, gpu1);
    assert_int_equal(event.eventType, nvmlEventTypeXidCriticalError);
    assert_int_equal(event.eventData, 48);
    assert_int_equal(event.gpuInstanceId, 0xFFFFFFFFu);
    /* inotify, not polling: well under the 10 ms poll fallback. */
    assert_true(woke_ns - w.written_ns < 5 * 1000000LL);
    assert_int_equal(nvml->EventSetWait(set, &event, 10), NVML_ERROR_TIMEOUT);

    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    assert_int_equal(nvml->DeviceGetUUID(gpu1, uuid, sizeof uuid), NVML_SUCCESS);
    FILE *log = fopen(f->event_log, "r");
    assert_non_null(log);
    long long ns;
    char logged_uuid[128];
    unsigned long long xid;
    assert_int_equal(fscanf(log, "%lld %127s %llu", &ns, logged_uuid, &xid), 3);
    fclose(log);
    assert_string_equal(logged_uuid, uuid);
    assert_int_equal(xid, 48);
    assert_true(ns >= w.written_ns);
    assert_int_equal(nvml->EventSetFree(set), NVML_SUCCESS);
}

static void test_lost_and_recover(void **state)
{
    struct control_fixture *f = *state;
    struct nvml *nvml = f->nvml;
    nvmlEventSet_t set;
    nvmlDevice_t gpu2;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    assert_int_equal(nvml->EventSetCreate(&set), NVML_SUCCESS);
    assert_int_equal(nvml->DeviceGetHandleByIndex(2, &gpu2), NVML_SUCCESS);
    assert_int_equal(nvml->DeviceGetUUID(gpu2, uuid, sizeof uuid), NVML_SUCCESS);
    assert_int_equal(nvml->DeviceRegisterEvents(gpu2, nvmlEventTypeXidCriticalError, set),
                     NVML_SUCCESS);
    char line[160];
    snprintf(line, sizeof line, "lost %s\n", uuid);
    append_line(f->control, line);
    nvmlEventData_t event;
    assert_int_equal(nvml->EventSetWait(set, &event, 1000), NVML_SUCCESS);
    assert_int_equal(event.eventData, 79);
    nvmlMemory_t memory;
    nvmlDevice_t again;
    assert_int_equal(nvml->DeviceGetMemoryInfo(gpu2, &memory), NVML_ERROR_GPU_IS_LOST);
    assert_int_equal(nvml->DeviceGetHandleByUUID(uuid, &again), NVML_ERROR_GPU_IS_LOST);
    append_line(f->control, "recover 2\n");
    assert_int_equal(nvml->DeviceGetMemoryInfo(gpu2, &memory), NVML_SUCCESS);
    assert_int_equal(memory.total, 40960ull << 20);
    assert_int_equal(nvml->EventSetFree(set), NVML_SUCCESS);
}

static void test_fail_and_unfail(void **state)
{
    struct control_fixture *f = *state;
    struct nvml *nvml = f->nvml;
    nvmlDevice_t gpu0, gpu5;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    assert_int_equal(nvml->DeviceGetHandleByIndex(0, &gpu0), NVML_SUCCESS);
    assert_int_equal(nvml->DeviceGetHandleByIndex(5, &gpu5), NVML_SUCCESS);
    append_line(f->control, "fail nvmlDeviceGetName NOT_SUPPORTED 5\n");
    assert_int_equal(nvml->DeviceGetName(gpu5, name, sizeof name), NVML_ERROR_NOT_SUPPORTED);
    assert_int_equal(nvml->DeviceGetName(gpu0, name, sizeof name), NVML_SUCCESS);
    assert_string_equal(name, "NVIDIA A100-SXM4-40GB");
    /* A rule names the function without its version: it covers _v3 too. */
    append_line(f->control, "fail nvmlDeviceGetPciInfo UNKNOWN\n");
    nvmlPciInfo_t pci;
    assert_int_equal(nvml->DeviceGetPciInfo(gpu0, &pci), NVML_ERROR_UNKNOWN);
    append_line(f->control, "unfail nvmlDeviceGetPciInfo\nunfail nvmlDeviceGetName\n");
    assert_int_equal(nvml->DeviceGetPciInfo(gpu0, &pci), NVML_SUCCESS);
    assert_int_equal(nvml->DeviceGetName(gpu5, name, sizeof name), NVML_SUCCESS);
}

static void test_error_after_calls(void **state)
{
    (void)state;
    json_t *root = fake_inventory_load("4gpu.json");
    fake_add_error(root, "nvmlDeviceGetMemoryInfo", -1, "NVML_ERROR_TIMEOUT", 2);
    char *path = fake_inventory_use_json(root);
    unsetenv("FAKE_NVML_CONTROL");
    struct nvml *nvml = open_fake(0);
    nvmlDevice_t device;
    nvmlMemory_t memory;
    assert_int_equal(nvml->DeviceGetHandleByIndex(0, &device), NVML_SUCCESS);
    assert_int_equal(nvml->DeviceGetMemoryInfo(device, &memory), NVML_SUCCESS);
    assert_int_equal(nvml->DeviceGetMemoryInfo(device, &memory), NVML_SUCCESS);
    assert_int_equal(nvml->DeviceGetMemoryInfo(device, &memory), NVML_ERROR_TIMEOUT);
    nvml_close(nvml);
    fake_inventory_remove(path);
    json_decref(root);
}

/* A health thread blocks in EventSetWait while another thread enumerates:
 * neither may block the other, and the event still arrives. */
struct waiter {
    struct nvml *nvml;
    nvmlEventSet_t set;
    nvmlReturn_t rc;
    nvmlEventData_t event;
};

static void *wait_for_event(void *arg)
{
    struct waiter *w = arg;
    w->rc = w->nvml->EventSetWait(w->set, &w->event, 5000);
    return NULL;
}

static void test_wait_does_not_block_enumeration(void **state)
{
    struct control_fixture *f = *state;
    struct waiter w = {.nvml = f->nvml, .rc = NVML_ERROR_UNKNOWN};
    nvmlDevice_t gpu7;
    assert_int_equal(f->nvml->EventSetCreate(&w.set), NVML_SUCCESS);
    assert_int_equal(f->nvml->DeviceGetHandleByIndex(7, &gpu7), NVML_SUCCESS);
    assert_int_equal(f->nvml->DeviceRegisterEvents(gpu7, nvmlEventTypeXidCriticalError, w.set),
                     NVML_SUCCESS);
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, wait_for_event, &w), 0);
    long long started = now_ns();
    for (int round = 0; round < 20; round++) {
        struct gpu_inventory inv;
        char err[512];
        assert_int_equal(gpu_inventory_load(f->nvml, &inv, err, sizeof err), 0);
        assert_int_equal(inv.count, 8);
        gpu_inventory_free(&inv);
    }
    assert_true(now_ns() - started < 2000 * 1000000LL);
    append_line(f->control, "xid 7 94 3 0\n");
    pthread_join(thread, NULL);
    assert_int_equal(w.rc, NVML_SUCCESS);
    assert_ptr_equal(w.event.device, gpu7);
    assert_int_equal(w.event.eventData, 94);
    assert_int_equal(w.event.gpuInstanceId, 3);
    assert_int_equal(w.event.computeInstanceId, 0);
    assert_int_equal(f->nvml->EventSetFree(w.set), NVML_SUCCESS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_library_absent),
        cmocka_unit_test(test_init_error_is_reported_with_nvml_text),
        cmocka_unit_test(test_missing_inventory_means_no_driver),
        cmocka_unit_test(test_newest_symbols_are_bound),
        cmocka_unit_test(test_v1_only_library_falls_back),
        cmocka_unit_test(test_strerror),
        cmocka_unit_test_setup_teardown(test_xid_wakes_event_wait, control_setup, control_teardown),
        cmocka_unit_test_setup_teardown(test_lost_and_recover, control_setup, control_teardown),
        cmocka_unit_test_setup_teardown(test_fail_and_unfail, control_setup, control_teardown),
        cmocka_unit_test_setup_teardown(test_wait_does_not_block_enumeration, control_setup,
                                        control_teardown),
        cmocka_unit_test(test_error_after_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
