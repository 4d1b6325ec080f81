#!/usr/bin/env bash
# krew-archive.sh BUILD_DIR [URL_BASE] -- the krew archive of kubectl-gpupool for the
# platform BUILD_DIR was built for, and deploy/krew/gpupool.yaml with that platform's
# uri and sha256 filled in.
#
#   BUILD_DIR/krew/kubectl-gpupool-v<version>-linux-<arch>.tar.gz
#       kubectl-gpupool and LICENSE, the files the manifest's `files` names;
#       deterministic (sorted, owner 0, mtimes = SOURCE_DATE_EPOCH, default the
#       last commit's time), so a rebuild from the same commit has the same sha256
#   BUILD_DIR/krew/gpupool.yaml
#       the manifest: this platform's uri = URL_BASE/<archive name> (default: the
#       placeholder's own base) and sha256 = the archive's; other platforms keep
#       their placeholders (deploy/krew/README.md), or what GP_KREW_MANIFEST (the
#       manifest to start from) holds: a first run's output fills the second platform
# Prints the two paths. Exit 0; 1 on failure; 2 on a usage error.
set -euo pipefail

die() { printf 'krew-archive.sh: %s\n' "$*" >&2; exit 1; }
[[ $# -ge 1 && $# -le 2 ]] || { echo "usage: $0 BUILD_DIR [URL_BASE]" >&2; exit 2; }
BUILD=$(cd "$1" 2>/dev/null && pwd) || die "build dir $1 not found"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MANIFEST=${GP_KREW_MANIFEST:-$ROOT/deploy/krew/gpupool.yaml}
BIN=$BUILD/bin/kubectl-gpupool
[[ -x $BIN ]] || die "$BIN is not built"

case $(readelf -h "$BIN" | sed -n 's/^ *Machine: *//p') in
  *X86-64*) ARCH=amd64 ;;
  AArch64) ARCH=arm64 ;;
  *) die "$BIN: a machine krew's manifest does not list" ;;
esac
VERSION=v$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
[[ $VERSION != v ]] || die "no CMAKE_PROJECT_VERSION in $BUILD/CMakeCache.txt"
grep -q "^  version: $VERSION\$" "$MANIFEST" ||
  die "$MANIFEST is not for $VERSION (its spec.version must follow CMakeLists.txt's project version)"
NAME=kubectl-gpupool-$VERSION-linux-$ARCH.tar.gz
URL_BASE=${2:-$(sed -n "s|^    uri: \(.*\)/$NAME\$|\1|p" "$MANIFEST")}
[[ -n $URL_BASE ]] || die "$MANIFEST has no uri for $NAME"

if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
  SOURCE_DATE_EPOCH=$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || echo 0)
fi
OUT=$BUILD/krew
mkdir -p "$OUT"
STAGE=$(mktemp -d "$OUT/.stage.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
install -m 0755 "$BIN" "$STAGE/kubectl-gpupool"
install -m 0644 "$ROOT/LICENSE" "$STAGE/LICENSE"
tar -C "$STAGE" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
  -cf - kubectl-gpupool LICENSE | gzip -n -9 >"$OUT/$NAME"
SHA=$(sha256sum "$OUT/$NAME" | cut -d' ' -f1)

# The platform block of this archive: the uri line names it, the sha256 line follows.
awk -v name="$NAME" -v uri="$URL_BASE/$NAME" -v sha="$SHA" '
  index($0, "    uri: ") == 1 && substr($0, length($0) - length(name) + 1) == name {
    print "    uri: " uri; fill = 1; next }
  fill && index($0, "    sha256: ") == 1 { print "    sha256: \"" sha "\""; fill = 0; next }
  { print }' "$MANIFEST" >"$STAGE/gpupool.yaml"
grep -q "$SHA" "$STAGE/gpupool.yaml" || die "could not fill the sha256 of $NAME"
mv "$STAGE/gpupool.yaml" "$OUT/gpupool.yaml" # GP_KREW_MANIFEST may be this very file
echo "$OUT/$NAME"
echo "$OUT/gpupool.yaml"
