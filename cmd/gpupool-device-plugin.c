/* gpupool-device-plugin: serves the node's NVIDIA GPUs to the kubelet. */
#include "daemon.h"

int main(int argc, char **argv, char **envp)
{
    return daemon_run(argc, argv, envp);
}
