#!/usr/bin/env bash
# `pip install ingest/python` as a fleet machine does it: a fresh venv (no
# system site-packages, so no torch), the package installed from a copy of
# ingest/python (pip builds in the source tree; the checkout stays clean),
# then, from outside the source tree, the installed package is imported and
# checked: its version is the project's, importing it does not import torch,
# and profile() without torch raises the one clear TorchNotInstalledError.
# Needs python3's venv module (Debian: python3-venv, which ops/build
# installs) and PyPI (or the index pip is configured with) for setuptools,
# which pip's isolated build fetches.
#
# usage: pip_install_test.sh PYTHON SOURCE_DIR PROJECT_VERSION
set -euo pipefail
python="$1" src="$2" version="$3"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/bubblewatch-pip.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
if ! "$python" -m venv "$tmp/venv"; then
  echo "pip_install_test: '$python -m venv' failed: install python3-venv" >&2
  exit 1
fi
cp -r "$src" "$tmp/src"
rm -rf "$tmp/src/build" "$tmp/src"/*.egg-info
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
unset PYTHONPATH
"$tmp/venv/bin/python" -m pip install --quiet "$tmp/src"

cd "$tmp"
"$tmp/venv/bin/python" - "$version" "$tmp/venv" <<'PY'
import importlib.metadata
import os
import sys

expected_version, venv = sys.argv[1], os.path.realpath(sys.argv[2])
try:
    import torch  # noqa: F401
    sys.exit("a fresh venv imports torch: the no-torch check cannot run")
except ModuleNotFoundError:
    pass

import bubblewatch_torch as bt

where = os.path.realpath(bt.__file__)
assert where.startswith(venv + os.sep), "imported %s, not the venv's" % where
assert "torch" not in sys.modules, "importing bubblewatch_torch imported torch"
installed = importlib.metadata.version("bubblewatch-torch")
assert installed == expected_version == bt.__version__, (
    "versions: installed %s, package %s, CMakeLists.txt %s"
    % (installed, bt.__version__, expected_version))
# The pure-Python parts work without torch.
assert bt.trace_file_name("job", 0, when_ms=1).startswith("job.rank0.")

try:
    bt.profile(os.path.join(os.getcwd(), "traces"), job="j")
    sys.exit("profile() without torch did not raise")
except bt.TorchNotInstalledError as e:
    assert not isinstance(e, ModuleNotFoundError)
    assert e.__suppress_context__ and e.__cause__ is None, "chained error"
    message = str(e)
    assert "needs PyTorch" in message and "pip install torch" in message, message
    print("profile() without torch: %s: %s" % (type(e).__name__, message))
print("bubblewatch-torch %s installed and imported from %s" % (installed, where))
PY
