"""The pure logic behind the fault handling: the build lock, which runs are over, what a
stalled registry and a damaged record say, which file a full disk names."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from sparkbake import filelock
from sparkbake.errors import DamagedRecord, PublishError, machine_error
from sparkbake.files import atomic_write, naming, read_json
from sparkbake.housekeeping.containergc import run_is_over
from sparkbake.oci.distribution import Remote, unreachable
from tests.conftest import settings_of

REMOTE = Remote(host="127.0.0.1:5999", path="demo", base_url="http://127.0.0.1:5999",
                verify=True)


def test_a_second_holder_waits_and_is_told_who_holds_the_lock(tmp_path: Path) -> None:
    lock = tmp_path / "build" / ".build-demo.lock"
    told: list[str] = []
    order: list[str] = []
    with filelock.exclusive(lock, 5, told.append):
        def second() -> None:
            with filelock.exclusive(lock, 5, told.append):
                order.append("second")
        waiter = threading.Thread(target=second)
        waiter.start()
        time.sleep(0.5)
        order.append("first done")
    waiter.join(5)
    assert order == ["first done", "second"]
    assert told == [f"pid {os.getpid()} on {socket.gethostname()}"]


def test_a_lock_held_past_the_wait_is_busy_naming_the_holder(tmp_path: Path) -> None:
    lock = tmp_path / ".build-demo.lock"
    with filelock.exclusive(lock, 1, print), pytest.raises(filelock.Busy) as busy, \
            filelock.exclusive(lock, 0.3, lambda who: None):
        pass
    assert str(busy.value) == f"pid {os.getpid()} on {socket.gethostname()}"


def test_a_killed_holder_holds_no_lock(tmp_path: Path) -> None:
    lock = tmp_path / ".build-demo.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time, pathlib; from sparkbake import filelock\n"
        "with filelock.exclusive(pathlib.Path(sys.argv[1]), 1, print):\n"
        "    print('held', flush=True); time.sleep(60)"), str(lock)], stdout=subprocess.PIPE,
        text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    holder.kill()
    holder.wait()
    with filelock.exclusive(lock, 0.5, lambda who: pytest.fail(f"waited for {who}")):
        pass


def test_a_run_is_over_when_its_process_is_gone_and_unknown_on_another_host() -> None:
    host = socket.gethostname()
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    assert run_is_over(f"{host}:{os.getpid()}") is False
    assert run_is_over(f"{host}:{ended.pid}") is True
    assert run_is_over(f"elsewhere-{host}:{os.getpid()}") is None
    assert run_is_over("") is None


@pytest.mark.parametrize("exc", [
    requests.exceptions.ReadTimeout("HTTPConnectionPool(...): Read timed out. (read timeout=10)"),
    requests.exceptions.ConnectionError("('Connection aborted.', TimeoutError('timed out'))"),
])
def test_a_registry_that_stops_answering_is_one_line_saying_so(exc: Exception) -> None:
    error = unreachable(REMOTE, exc, settings=settings_of())
    assert isinstance(error, PublishError)
    assert error.message.startswith("registry 127.0.0.1:5999 stopped answering: nothing came "
                                    "back ")
    assert "\n" not in error.message and "run the command again" in error.remedy


def test_a_registry_that_refuses_the_connection_is_not_stalled() -> None:
    exc = requests.exceptions.ConnectionError("[Errno 111] Connection refused")
    assert "does not answer ([Errno 111] Connection refused)" in unreachable(REMOTE, exc,
                                                                             settings=settings_of()).message


def test_a_full_disk_write_names_the_file_it_wrote(tmp_path: Path) -> None:
    target = tmp_path / "venv-skeleton.tar"
    with pytest.raises(OSError) as caught, naming(target):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    error = machine_error(caught.value)
    assert error is not None and error.exit_code == 8
    assert error.message.startswith(f"{target}: no space left on its disk")


def test_a_truncated_record_is_damaged_naming_its_file(tmp_path: Path) -> None:
    record = tmp_path / "wheels.json"
    record.write_text('{"wheels": [{"name": "tin')
    with pytest.raises(DamagedRecord) as caught:
        read_json(record)
    assert caught.value.exit_code == 8 and isinstance(caught.value, ValueError)
    assert caught.value.message.startswith(f"{record}: a damaged record, not valid JSON")


def test_a_write_that_fails_leaves_neither_the_file_nor_its_temporary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(source: str, dest: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError):
        atomic_write(tmp_path / "record.json", "{}")
    assert list(tmp_path.iterdir()) == []
