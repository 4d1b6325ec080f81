/* gpupool-dra-plugin: the DRA kubelet plugin for the node's NVIDIA GPUs. */
#include <malloc.h>

#include "dra_daemon.h"

int main(int argc, char **argv, char **envp)
{
    /* As the device plugin: its few threads allocate little and rarely at
     * once, so one malloc arena serves them all (less private memory). On
     * failure the default stays, which is only less frugal. */
    mallopt(M_ARENA_MAX, 1);
    return dra_daemon_run(argc, argv, envp);
}
