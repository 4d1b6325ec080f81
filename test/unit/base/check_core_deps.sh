#!/bin/sh
# check_core_deps.sh SO -- fails when the gp_core probe needs libyaml or
# jansson (or anything beyond libc, libdl, pthread and the loader).
set -eu
so=$1
needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "NEEDED: $needed"
status=0
for lib in $needed; do
    case $lib in
    libc.so.*|libdl.so.*|libpthread.so.*|ld-linux*|libasan.so.*|libubsan.so.*|libgcc_s.so.*) ;;
    *) echo "gp_core must not need $lib" >&2; status=1 ;;
    esac
done
if nm -D --undefined-only "$so" | grep -E ' (yaml_|json_)'; then
    echo "gp_core references libyaml or jansson symbols" >&2
    status=1
fi
exit $status
