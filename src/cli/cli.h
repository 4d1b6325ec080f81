/* cli.h -- kubectl-gpupool and kubectl-inspect-gpushare (one program).
 *
 *   kubectl gpupool inspect [NODE] [-d] [-o wide|json] [--kubeconfig F]
 *                           [--context C] [-n NAMESPACE] [-v N]
 *   kubectl inspect gpushare [-d] [NODE]     (argv[0] kubectl-inspect-gpushare)
 *
 * The program's name decides the personality: invoked as
 * kubectl-inspect-gpushare it prints gpushare's tables byte for byte (and
 * gpushare's "Failed due to ..." on stdout when the API fails), otherwise
 * gpupool's views. See docs/cli.md.
 *
 * Reads the cluster with one paginated LIST per collection (nodes,
 * kube-system ConfigMaps, pods; 500 items a page) -- never a request per
 * node -- and keeps only the compact pool of pool_model.h. */
#ifndef GP_CLI_H
#define GP_CLI_H

#include <stdio.h>

/* Runs the program with its arguments (argv[0] included) and returns the
 * exit status: 0, 1 when the cluster could not be read, 2 on a usage error.
 * Results go to out, errors to errout (stdout in gpushare mode). */
int cli_main(int argc, char **argv, FILE *out, FILE *errout);

#endif
