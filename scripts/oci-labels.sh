#!/usr/bin/env bash
# oci-labels.sh BUILD_DIR VERSION -- the OCI labels/annotations that say where an image
# comes from, one "key=value" a line, for scripts/image.sh (image config labels and
# manifest annotations alike):
#   org.opencontainers.image.source     the repository's URL: GP_IMAGE_SOURCE, else the
#                                       checkout's `origin` remote as an https URL; left
#                                       out (with a note on stderr) when neither says
#   org.opencontainers.image.revision   the commit the programs were built from: the one
#                                       BUILD_DIR's configure baked into --version
#                                       (src/base/build_info.c), in full when git knows it
#   org.opencontainers.image.version    VERSION (the image tag)
#   org.opencontainers.image.licenses   Apache-2.0 (LICENSE; the images ship no data/)
# Exit 0; 2 on a usage error.
set -euo pipefail

[[ $# -eq 2 ]] || { echo "usage: $0 BUILD_DIR VERSION" >&2; exit 2; }
BUILD=$1
VERSION=$2
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# "git@host:owner/repo.git" and "https://host/owner/repo(.git)" -> https://host/owner/repo;
# anything else (a local path) is no public source.
https_url() {
  local u=$1
  case $u in
    git@*:*) u=${u#git@}; u="https://${u%%:*}/${u#*:}" ;;
    ssh://git@*) u="https://${u#ssh://git@}" ;;
    https://*) ;;
    *) return 1 ;;
  esac
  u=${u%.git}
  # no credentials in a label: https://user:token@host/... -> https://host/...
  [[ $u =~ ^https://[^/@]*@(.*)$ ]] && u="https://${BASH_REMATCH[1]}"
  printf '%s\n' "$u"
}

source_url=${GP_IMAGE_SOURCE:-}
if [[ -z $source_url ]]; then
  origin=$(git -C "$ROOT" remote get-url origin 2>/dev/null || true)
  source_url=$( [[ -n $origin ]] && https_url "$origin" || true)
fi

revision=$(sed -n 's/^const char gp_build_revision\[\] = "\(.*\)";$/\1/p' \
  "$BUILD/src/base/build_info.c" 2>/dev/null || true)
revision=${revision:-unknown}
if [[ $revision != unknown ]]; then
  full=$(git -C "$ROOT" rev-parse --verify -q "$revision^{commit}" 2>/dev/null || true)
  revision=${full:-$revision}
fi

if [[ -n $source_url ]]; then
  echo "org.opencontainers.image.source=$source_url"
else
  echo "oci-labels.sh: no org.opencontainers.image.source: set GP_IMAGE_SOURCE (no https origin remote)" >&2
fi
echo "org.opencontainers.image.revision=$revision"
echo "org.opencontainers.image.version=$VERSION"
echo "org.opencontainers.image.licenses=Apache-2.0"
