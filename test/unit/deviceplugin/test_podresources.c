/* Unit tests: counting device IDs per resource in a PodResources List reply
 * (podresources_count_decode, what gpupool_deviceplugin_devices_allocated
 * shows). Replies are built and encoded with protobuf-c, as the kubelet's
 * would be on the wire. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "podresources.h"
#include "podresources.pb-c.h"

#define NAMES 4
static const char *const names[NAMES] = {"nvidia.com/gpu", "nvidia.com/mig-1g.5gb",
                                         "aliyun.com/gpu-mem", "nvidia.com/unheld"};

/* Encodes resp into a malloc'd buffer; *len its size. */
static uint8_t *encode(const V1__ListPodResourcesResponse *resp, size_t *len)
{
    *len = v1__list_pod_resources_response__get_packed_size(resp);
    uint8_t *buf = malloc(*len + 1);
    assert_non_null(buf);
    assert_int_equal(v1__list_pod_resources_response__pack(resp, buf), *len);
    return buf;
}

/* Two pods, three containers: whole GPUs, time-sliced replicas (IDs with a
 * ::N suffix count one each), MIG devices, gpu-mem units, a resource we do
 * not advertise, a device entry without a name. */
static void test_counts_every_container_of_every_pod(void **state)
{
    (void)state;
    char *gpus_a[] = {"GPU-a", "GPU-b"};
    char *replicas[] = {"GPU-c::0", "GPU-c::1", "GPU-d::3"};
    char *migs[] = {"MIG-1"};
    char *units[] = {"GPU-a-_-0", "GPU-a-_-1", "GPU-a-_-2", "GPU-a-_-3", "GPU-a-_-4"};
    char *foreign[] = {"x", "y"};
    char *anonymous[] = {"z"};
    V1__ContainerDevices d[6];
    for (int i = 0; i < 6; i++)
        v1__container_devices__init(&d[i]);
    d[0].resource_name = "nvidia.com/gpu", d[0].n_device_ids = 2, d[0].device_ids = gpus_a;
    d[1].resource_name = "nvidia.com/mig-1g.5gb", d[1].n_device_ids = 1, d[1].device_ids = migs;
    d[2].resource_name = "nvidia.com/gpu", d[2].n_device_ids = 3, d[2].device_ids = replicas;
    d[3].resource_name = "aliyun.com/gpu-mem", d[3].n_device_ids = 5, d[3].device_ids = units;
    d[4].resource_name = "example.com/fpga", d[4].n_device_ids = 2, d[4].device_ids = foreign;
    d[5].n_device_ids = 1, d[5].device_ids = anonymous; /* resource_name "" on the wire */
    V1__ContainerDevices *c1_devs[] = {&d[0], &d[1]}, *c2_devs[] = {&d[2], &d[4], &d[5]},
                         *c3_devs[] = {&d[3]};
    V1__ContainerResources c[4];
    for (int i = 0; i < 4; i++)
        v1__container_resources__init(&c[i]);
    c[0].name = "a", c[0].n_devices = 2, c[0].devices = c1_devs;
    c[1].name = "b", c[1].n_devices = 3, c[1].devices = c2_devs;
    c[2].name = "sidecar"; /* no devices */
    c[3].name = "c", c[3].n_devices = 1, c[3].devices = c3_devs;
    V1__ContainerResources *p1_containers[] = {&c[0], &c[1], &c[2]}, *p2_containers[] = {&c[3]};
    V1__PodResources p1 = V1__POD_RESOURCES__INIT, p2 = V1__POD_RESOURCES__INIT,
                     p3 = V1__POD_RESOURCES__INIT;
    p1.name = "one", p1.namespace_ = "ns", p1.n_containers = 3, p1.containers = p1_containers;
    p2.name = "two", p2.namespace_ = "ns", p2.n_containers = 1, p2.containers = p2_containers;
    p3.name = "empty", p3.namespace_ = "ns";
    V1__PodResources *pods[] = {&p1, &p2, &p3};
    V1__ListPodResourcesResponse resp = V1__LIST_POD_RESOURCES_RESPONSE__INIT;
    resp.n_pod_resources = 3;
    resp.pod_resources = pods;

    size_t len;
    uint8_t *buf = encode(&resp, &len);
    size_t counts[NAMES] = {99, 99, 99, 99}; /* overwritten, not added to */
    char err[128];
    assert_int_equal(podresources_count_decode(buf, len, names, NAMES, counts, err, sizeof err), 0);
    assert_int_equal(counts[0], 5); /* 2 whole GPUs + 3 replicas, two pods' containers */
    assert_int_equal(counts[1], 1);
    assert_int_equal(counts[2], 5);
    assert_int_equal(counts[3], 0); /* advertised, held by nobody */
    free(buf);
}

/* No pods: an empty message, 0 bytes on the wire. */
static void test_empty_reply_counts_zero(void **state)
{
    (void)state;
    V1__ListPodResourcesResponse resp = V1__LIST_POD_RESOURCES_RESPONSE__INIT;
    size_t len;
    uint8_t *buf = encode(&resp, &len);
    assert_int_equal(len, 0);
    size_t counts[NAMES] = {7, 7, 7, 7};
    char err[128];
    assert_int_equal(podresources_count_decode(buf, len, names, NAMES, counts, err, sizeof err), 0);
    for (int i = 0; i < NAMES; i++)
        assert_int_equal(counts[i], 0);
    /* No names to count is valid too. */
    assert_int_equal(podresources_count_decode(buf, len, names, 0, counts, err, sizeof err), 0);
    free(buf);
}

static void test_garbage_is_an_error(void **state)
{
    (void)state;
    const uint8_t garbage[] = {0xff, 0xff, 0xff};
    size_t counts[NAMES];
    char err[128] = "";
    assert_int_equal(
        podresources_count_decode(garbage, sizeof garbage, names, NAMES, counts, err, sizeof err),
        -1);
    assert_non_null(strstr(err, "ListPodResourcesResponse (3 bytes)"));
    /* A truncated valid message: field 1 announces more bytes than follow. */
    const uint8_t truncated[] = {0x0a, 0x10, 0x0a, 0x01, 'p'};
    assert_int_equal(podresources_count_decode(truncated, sizeof truncated, names, NAMES, counts,
                                               err, sizeof err),
                     -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_every_container_of_every_pod),
        cmocka_unit_test(test_empty_reply_counts_zero),
        cmocka_unit_test(test_garbage_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
