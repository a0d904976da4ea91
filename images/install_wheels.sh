# Runs in a network-less container of the runtime base: the tag's wheels (mounted at
# /wheels) into the venv /opt/venv, which the bake then copies out into a layer.
# The arguments are the distribution names to install. SOURCE_DATE_EPOCH is set, so every
# .pyc that pip (and ensurepip) writes is checked-hash based: no mtime in it.
set -eu
python3 -m venv /opt/venv
/opt/venv/bin/pip install --no-index --no-cache-dir --disable-pip-version-check \
    --find-links /wheels "$@"
