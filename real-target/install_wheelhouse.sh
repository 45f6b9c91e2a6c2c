#!/usr/bin/env bash
# Install parts of the real-target kit's wheelhouse (build_wheelhouse.py) offline, into a --target dir.
#
#   install_wheelhouse.sh PART_DIR... --target DIR [--wheels DIR]
#
# Each PART_DIR is a `partIofN/` folder of the wheelhouse: its .tar.xz is unpacked into a scratch folder,
# every wheel checked against the part's .sha256 manifest, and all wheels of the parts given are installed
# with one `pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target DIR`.
# Parts may be installed in separate calls, in any order: no two parts install into the same top-level
# path (build_wheelhouse.py sees to that), except bin/, which this script merges. Wheels a part lists in
# its .keep file (SGLang itself: the target repo is made from it, see make_target_repo.py) are not
# installed but moved to --wheels (default: DIR.wheels). Then run servers with
# PYTHONPATH=<target repo>/python:DIR.
#
# Needs: bash, Python >= 3.8 with pip (PYTHON, default python3: the Python that will run the server),
# sha256sum. No network.
set -euo pipefail

usage() {
  sed -n '3,4p' "$0" | sed 's/^# \{0,1\}//'
}

PY=${PYTHON:-python3}
parts=()
target=""
wheels=""
while [ $# -gt 0 ]; do
  case "$1" in
    --target) [ $# -ge 2 ] || { usage >&2; exit 2; }; target=$2; shift 2 ;;
    --target=*) target=${1#*=}; shift ;;
    --wheels) [ $# -ge 2 ] || { usage >&2; exit 2; }; wheels=$2; shift 2 ;;
    --wheels=*) wheels=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "install_wheelhouse.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) parts+=("$1"); shift ;;
  esac
done
if [ -z "$target" ] || [ ${#parts[@]} -eq 0 ]; then
  usage >&2
  exit 2
fi
target=${target%/}
wheels=${wheels:-$target.wheels}

stage=$(mktemp -d "${TMPDIR:-/tmp}/wheelhouse.XXXXXX")
trap 'rm -rf "$stage"' EXIT
shopt -s nullglob

kept=()
for part in "${parts[@]}"; do
  part=${part%/}
  tarballs=("$part"/*.tar.xz)
  if [ ${#tarballs[@]} -eq 0 ]; then
    echo "install_wheelhouse.sh: no *.tar.xz in $part (not a wheelhouse part)" >&2
    exit 1
  fi
  for tarball in "${tarballs[@]}"; do
    manifest=${tarball%.tar.xz}.sha256
    [ -f "$manifest" ] || { echo "install_wheelhouse.sh: $manifest is missing" >&2; exit 1; }
    "$PY" - "$tarball" "$stage" <<'EOF'
import sys, tarfile
with tarfile.open(sys.argv[1]) as tar:
    try:
        tar.extractall(sys.argv[2], filter="data")
    except TypeError:  # a Python without extraction filters
        tar.extractall(sys.argv[2])
EOF
    manifest_abs=$(cd "$(dirname "$manifest")" && pwd)/$(basename "$manifest")
    (cd "$stage" && sha256sum --quiet --strict -c "$manifest_abs")
  done
  for keep in "$part"/*.keep; do
    while IFS= read -r name; do
      [ -n "$name" ] || continue
      mkdir -p "$wheels"
      mv "$stage/$name" "$wheels/$name"
      kept+=("$wheels/$name")
    done <"$keep"
  done
done

to_install=("$stage"/*.whl)
if [ ${#to_install[@]} -gt 0 ]; then
  mkdir -p "$target"
  # pip --upgrade --target replaces each top-level folder it installs into. Parts never share one, except
  # bin/ (every wheel with scripts writes there): the scripts of earlier calls are put back afterwards
  # (where a name clashes, this call's script wins).
  if [ -d "$target/bin" ]; then cp -a "$target/bin" "$stage/bin.before"; fi
  status=0
  PIP_ROOT_USER_ACTION=ignore "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --disable-pip-version-check --target "$target" "${to_install[@]}" || status=$?
  if [ -d "$stage/bin.before" ]; then
    mkdir -p "$target/bin"
    cp -a -n "$stage/bin.before/." "$target/bin/"
  fi
  [ "$status" -eq 0 ] || exit "$status"
fi
echo "installed ${#to_install[@]} wheels into $target"
for k in ${kept[@]+"${kept[@]}"}; do
  echo "kept (not installed): $k"
done
