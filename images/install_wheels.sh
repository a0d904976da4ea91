# Runs in a network-less container of the runtime base: the tag's wheels (mounted at
# /wheels) into the venv /opt/venv, which the bake then copies out into a layer, with their
# dependencies from the runtime wheelhouse (/runtime-wheels) where the tag has a runtime lock.
# The arguments are the distribution names to install. SOURCE_DATE_EPOCH is set, so every
# .pyc that pip (and ensurepip) writes is checked-hash based: no mtime in it.
set -eu
python3 -m venv /opt/venv
if [ -d /runtime-wheels ]; then set -- --find-links /runtime-wheels "$@"; fi
/opt/venv/bin/pip install --no-index --no-cache-dir --disable-pip-version-check \
    --find-links /wheels "$@"
