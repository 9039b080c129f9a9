#!/usr/bin/env bash
# bilinear-numpy's autograder setup (docs/course.md, "On Gradescope"). Gradescope runs this
# once, as root, when it builds the autograder's image (Ubuntu), with the zip unpacked in
# /autograder/source (AUTOGRADER_ROOT names another root). It installs Python 3 and a venv
# with NumPy (pinned to the version the zip was made with, else the project's lower bound),
# bubblewrap where apt has it, and closes the course's private files to every other user.
set -eu
root="${AUTOGRADER_ROOT:-/autograder}"
source="$root/source"
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv python3-pip ca-certificates
apt-get install -y --no-install-recommends bubblewrap \
    || echo "setup.sh: no bubblewrap from apt: each child is isolated by a user of its own"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || { echo "setup.sh: Python 3.10 or newer needed: choose an Ubuntu 22.04 image or newer"; exit 1; }
python3 -m venv "$root/venv"
pip="$root/venv/bin/pip"
"$pip" install --no-cache-dir -r "$source/requirements-gradescope.txt" \
    || "$pip" install --no-cache-dir "numpy>=1.26"         # the pin has no wheel for this Python
if [ -f "$source/requirements-torch.txt" ]; then       # `gradescope --torch`: CPU wheels
    "$pip" install --no-cache-dir -r "$source/requirements-torch.txt" \
        --index-url https://download.pytorch.org/whl/cpu \
        || echo "setup.sh: no PyTorch: exercise 20 (optional) is skipped"
fi
chmod 700 "$source/private" "$source/exercises/solutions"
chmod 600 "$source/private/"*
chmod 755 "$source/run_autograder"
chmod -R a+rX "$root/venv"
cd "$source" && "$root/venv/bin/python" -c 'import numpy, bilinear_numpy, exercises.grading.gradescope; print("setup.sh: ready, NumPy", numpy.__version__)'
