"""The embedded local registry: Debian's `docker-registry` on 127.0.0.1.

The default repository `localhost:5000/...` points at it. Its config, data, log and pid
file live under build/registry/.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from sparkbake import resources
from sparkbake.config.settings import child_environment
from sparkbake.config.versions import Config
from sparkbake.console.display import Console
from sparkbake.console.tools import require_tool
from sparkbake.errors import EngineError
from sparkbake.files import atomic_write
from sparkbake.oci import ports

__all__ = ["running", "start", "status", "stop"]

START_TIMEOUT = 10.0


def start(config: Config, console: Console, port: int = 5000, *,
          readonly: bool = False) -> str:
    """Start docker-registry on 127.0.0.1:port; already running there is fine, a port that
    another process holds is exit 8 naming it (never a registry of someone else's)."""
    address = f"127.0.0.1:{port}"
    running = _running_pid(config)
    if running is not None:
        if _started_port(config) == port:
            return f"registry: already running at {address} (pid {running})"
        raise EngineError(f"sparkbake's registry already runs (pid {running}) on port "
                          f"{_started_port(config)}, not on {port}",
                          "stop it first: `sparkbake registry stop`")
    holder = ports.holder(port)
    if holder is not None:
        raise EngineError(f"port {port} of 127.0.0.1 is held by {holder}",
                          "pick a free port: `sparkbake registry start --port N` (and publish "
                          "with --registry 127.0.0.1:N)")
    program = require_tool("docker-registry", "docker-registry")
    home = _home(config)
    (home / "data").mkdir(parents=True, exist_ok=True)
    atomic_write(home / "config.yml", resources.render(
        "registry-config.yml.j2", data_dir=str(home / "data"), port=port, readonly=readonly))
    child = _spawn(console, [program, "serve", str(home / "config.yml")], home / "registry.log")
    atomic_write(home / "registry.pid", f"{child.pid}\n{port}\n")
    _wait_until_up(child, address, home)
    return f"registry: docker-registry (pid {child.pid}) answers at {address}, data in {home}"


def stop(config: Config, console: Console) -> bool:
    """End the registry that `start` started (only the pid in its pid file); False if none."""
    pid = _running_pid(config)
    if pid is None:
        return False
    for sig in (signal.SIGTERM, signal.SIGKILL):
        console.detail(f"+ kill -{sig.name} {pid}")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + 10
        while _is_ours(pid, config) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not _is_ours(pid, config):
            break
    (_home(config) / "registry.pid").unlink(missing_ok=True)
    return True


def status(config: Config) -> tuple[bool, str]:
    """Whether the registry `start` started answers, and a line saying where (port, pid)."""
    pid = _running_pid(config)
    if pid is None:
        return False, ("registry: none started from this project; start it with "
                       "`sparkbake registry start`")
    address = f"127.0.0.1:{_started_port(config)}"
    if _answers(f"http://{address}"):
        return True, (f"registry: running at {address} (pid {pid}, log "
                      f"{_home(config) / 'registry.log'})")
    return False, f"registry: pid {pid} runs but nothing answers at {address}"


def running(config: Config) -> int | None:
    """The pid of the registry `start` started, while it runs (clean leaves its data alone)."""
    return _running_pid(config)


def _started_port(config: Config) -> int | None:
    """The port the running registry was started on (the pid file's second line)."""
    try:
        return int((_home(config) / "registry.pid").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _home(config: Config) -> Path:
    return config.build_dir / "registry"


def _answers(base_url: str, verify: bool | str = True) -> bool:
    """Does base_url speak the registry API (/v2/ answers 200, or 401 asking for a login)?"""
    import requests  # here: it takes ~0.1 s to import and most commands ask no registry

    try:
        return requests.get(f"{base_url}/v2/", timeout=2, verify=verify).status_code in (200, 401)
    except requests.RequestException:
        return False


def _spawn(console: Console, args: list[str], log: Path) -> subprocess.Popen[bytes]:
    console.detail(f"+ {shlex.join(args)} >{shlex.quote(str(log))} 2>&1 &")
    with log.open("ab") as out:
        return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                env=child_environment(console.env, {}))


def _wait_until_up(child: subprocess.Popen[bytes], address: str, home: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline and child.poll() is None:
        if _answers(f"http://{address}"):
            return
        time.sleep(0.2)
    if child.poll() is None:
        child.terminate()
        child.wait(timeout=10)
    (home / "registry.pid").unlink(missing_ok=True)
    log = home / "registry.log"
    lines = log.read_text(errors="replace").strip().splitlines() or ["(empty log)"]
    raise EngineError(f"docker-registry did not answer at {address} within {START_TIMEOUT:.0f} s "
                      f"(log: {log})", f"last log line: {lines[-1][:240]}")


def _running_pid(config: Config) -> int | None:
    """The pid in the pid file if that process is still our docker-registry; else forget it."""
    pid_file = _home(config) / "registry.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if _is_ours(pid, config):
        return pid
    pid_file.unlink(missing_ok=True)
    return None


def _is_ours(pid: int, config: Config) -> bool:
    """Is pid alive and serving this build dir's config (guards against a reused pid)?"""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our own child and has ended
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(_home(config) / "config.yml").encode() in argv


