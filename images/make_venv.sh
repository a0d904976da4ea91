# Runs in a network-less container of the runtime base: the venv /opt/venv made by the
# base's own Python (its interpreter links and pip), which the bake copies out; the wheels
# are installed into it on the host. SOURCE_DATE_EPOCH is set, so the .pyc files ensurepip
# writes are checked-hash based: no mtime in them.
set -eu
python3 -m venv /opt/venv
/opt/venv/bin/python -c 'import sys; print("sparkbake-python %d.%d" % sys.version_info[:2])'
