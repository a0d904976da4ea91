"""check-nodes' reach into a node: a container of an image the node has, unprivileged,
with the host's / mounted read-only at /node, copies what the checks read into one folder
laid out as a root (node_findings.py); that folder comes back as a tar file. --apply's
fix of the memory floor is the one privileged container: it writes /proc/sys and the
floor's sysctl.d file on the node."""

from __future__ import annotations

import shlex
import tarfile
from pathlib import Path
from typing import Any

from sparkbake.errors import EngineError
from sparkbake.oci import docker_engine
from sparkbake.oci.docker_engine import Client

__all__ = ["apply_floor", "probe", "runtimes"]

OUT = "/probe"
# sh, cat, stat, df and tr: any image the node runs has them. The .env's values arrive as
# the container's environment, never in the script's text.
SCRIPT = r"""
o=/probe; mkdir -p $o/proc/sys/vm $o/proc/sys/kernel $o/etc/sysctl.d $o/etc/default $o/model
for f in /proc/sys/vm/*; do cat "$f" > "$o/proc/sys/vm/${f##*/}" 2>/dev/null; done
cat /proc/meminfo > $o/proc/meminfo; cat /proc/cmdline > $o/proc/cmdline
cat /proc/sys/kernel/osrelease > $o/proc/sys/kernel/osrelease
cp /node/etc/sysctl.conf $o/etc/ 2>/dev/null
cp /node/etc/sysctl.d/*.conf $o/etc/sysctl.d/ 2>/dev/null
cp /node/etc/default/earlyoom $o/etc/default/ 2>/dev/null
for p in /node/proc/[0-9]*; do
  [ "$(cat $p/comm 2>/dev/null)" = earlyoom ] && { tr '\0' ' ' < $p/cmdline; echo; } >> $o/earlyoom
done
if [ -n "${MODEL_HOST_PATH:-}" ]; then
  m="/node$MODEL_HOST_PATH"
  if [ ! -e "$m/config.json" ] && [ -d "$m/snapshots" ]; then
    r=$(cat "$m/refs/main" 2>/dev/null)
    if [ -n "$r" ]; then m="$m/snapshots/$r"; else m=$(ls -d "$m"/snapshots/*/ | head -n 1); fi
  fi
  [ -d "$m" ] && echo "$m" > $o/model/folder
  cp "$m/model.safetensors.index.json" $o/model/ 2>/dev/null
  for f in "$m"/*.safetensors; do
    [ -e "$f" ] && echo "$(stat -L -c %s "$f") ${f##*/}" >> $o/model/sizes
  done
fi
[ -n "${CACHE_HOST_PATH:-}" ] && [ -d "/node$CACHE_HOST_PATH" ] && \
  df -Pk "/node$CACHE_HOST_PATH" | tail -n 1 | tr -s ' ' | cut -d ' ' -f 4 > $o/cache-free-kb
if [ -n "${IB_HCA:-}" ]; then
  for p in /node/sys/class/infiniband/$IB_HCA/ports/*; do
    [ -d "$p" ] || continue
    d=$o/sys/class/infiniband/$IB_HCA/ports/${p##*/}; mkdir -p $d/gids $d/gid_attrs/types
    case "${IB_GID_INDEX:-auto}" in *[!0-9]*) ;; *)
      cat $p/gids/$IB_GID_INDEX > $d/gids/$IB_GID_INDEX 2>/dev/null
      cat $p/gid_attrs/types/$IB_GID_INDEX > $d/gid_attrs/types/$IB_GID_INDEX 2>/dev/null;;
    esac
  done
fi
exit 0
"""
PROBED = ("MODEL_HOST_PATH", "CACHE_HOST_PATH", "IB_HCA", "IB_GID_INDEX")


def probe(client: Client, image: str, env: dict[str, str], into: Path) -> Path:
    """What the node has, as a root folder under into (its proc/, etc/, sys/ ...)."""
    tar = into / "probe.tar"
    result = docker_engine.run_container(
        client, image, ["sh", "-c", SCRIPT], network=False,
        environment={name: env[name] for name in PROBED if env.get(name)},
        volumes={"/": {"bind": "/node", "mode": "ro"}}, copy_out=(OUT, tar))
    if result.exit_code != 0:
        raise EngineError(f"the node's probe in {image} exited {result.exit_code}: "
                          f"{result.tail(1)}", "check that the image has sh, cat and df")
    with tarfile.open(tar) as archive:
        archive.extractall(into, filter="data")
    return into / Path(OUT).name


def runtimes(client: Client) -> list[str]:
    """The engine's container runtimes (docker info)."""
    info: dict[str, Any] = client.info()
    return sorted(info.get("Runtimes") or {})


def apply_floor(client: Client, image: str, commands: list[str], conf: str,
                conf_path: str) -> str | None:
    """The floor written to the node's /proc/sys and conf_path, by a privileged container;
    None when done, else why not (the engine withholds privileges, the write failed)."""
    folder = str(Path(conf_path).parent)
    script = "; ".join(_as_writes(commands)) + \
        f"; printf %s {shlex.quote(conf)} > /host{conf_path}"
    try:
        done = docker_engine.run_container(client, image, ["sh", "-ec", script], network=False,
                                           privileged=True,
                                           volumes={folder: {"bind": f"/host{folder}",
                                                             "mode": "rw"}})
    except EngineError as exc:
        return exc.message
    return None if done.exit_code == 0 else done.tail(1) or f"exit {done.exit_code}"


def _as_writes(commands: list[str]) -> list[str]:
    """`sysctl -w vm.x=N` as `echo N > /proc/sys/vm/x` (an image need not have sysctl)."""
    writes = []
    for command in commands:
        name, _, value = command.removeprefix("sysctl -w ").partition("=")
        writes.append(f"echo {shlex.quote(value)} > /proc/sys/{name.replace('.', '/')}")
    return writes
