/* kubectl-gpupool -- the kubectl plugin: `kubectl gpupool inspect`.
 * Installed also as kubectl-inspect-gpushare (a link to this binary), it
 * prints gpushare's tables instead. Everything is in src/cli (cli.h). */
#include "cli.h"

#include <stdio.h>

int main(int argc, char **argv)
{
    return cli_main(argc, argv, stdout, stderr);
}
