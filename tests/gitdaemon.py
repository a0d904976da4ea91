"""A real `git daemon` on 127.0.0.1 for tests: its own base path, stopped by its PID."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import free_port

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_AUTHOR_DATE": "2025-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2025-01-01T00:00:00Z"}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env={**os.environ, **GIT_ENV})
    return done.stdout.strip()


@dataclass(frozen=True)
class Daemon:
    base: Path  # served as git://127.0.0.1:<port>/<path below base>
    port: int
    process: subprocess.Popen[bytes]

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}"

    def publish(self, name: str, files: Path | dict[str, str], branch: str = "main",
                tags: tuple[str, ...] = ()) -> str:
        """A bare repository base/name with one commit of files (a folder or a mapping) on
        branch, tagged with tags; returns the commit."""
        work = self.base.parent / "work" / name
        if isinstance(files, Path):
            shutil.copytree(files, work)
        else:
            for path, text in files.items():
                (work / path).parent.mkdir(parents=True, exist_ok=True)
                (work / path).write_text(text)
        git(work, "init", "-q", "-b", branch)
        git(work, "add", "-A")
        git(work, "commit", "-qm", f"{name}: first")
        for tag in tags:
            git(work, "tag", "-a", tag, "-m", tag)
        git(work.parent, "clone", "-q", "--bare", str(work), str(self.base / name))
        return git(work, "rev-parse", "HEAD")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=10)


@contextlib.contextmanager
def git_daemon(root: Path) -> Iterator[Daemon]:
    """A git daemon serving root/base on a free port; stopped (by its PID) on exit."""
    base = root / "base"
    base.mkdir(parents=True)
    port = free_port()
    # git-daemon itself (not the `git daemon` wrapper), so that its PID is the server's
    program = Path(git(root, "--exec-path")) / "git-daemon"
    process = subprocess.Popen(
        [str(program), "--reuseaddr", "--export-all", f"--base-path={base}",
         "--listen=127.0.0.1", f"--port={port}", str(base)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    daemon = Daemon(base, port, process)
    try:
        _wait_for(port)
        yield daemon
    finally:
        daemon.stop()


def _wait_for(port: int) -> None:
    for _ in range(100):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"git daemon did not listen on 127.0.0.1:{port}")
