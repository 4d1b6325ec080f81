/* gpupool-device-plugin: serves the node's NVIDIA GPUs to the kubelet. */
#include <malloc.h>

#include "daemon.h"

int main(int argc, char **argv, char **envp)
{
    /* glibc gives every thread that allocates an arena of its own (a 132 KiB
     * heap with touched pages); the plugin's ten threads allocate little and
     * rarely at once, so one arena serves them all (about 90 KiB less
     * private memory at 8 GPUs, bench/plugin_bench). On failure the default
     * stays, which is only less frugal. */
    mallopt(M_ARENA_MAX, 1);
    return daemon_run(argc, argv, envp);
}
