"""A failed `compile-farm up` leaves no process: one started before the part that failed had
recorded it (a server list cut short) is killed too. Real processes (sleep) stand in for the
farm's; farm_local's own start and end run."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkbake.wheels import farm_local, farm_plan
from sparkbake.wheels.farm_state import FarmProcess, Layout
from tests.conftest import plain_console


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_server_started_before_the_list_failed_is_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = Layout(tmp_path / "compile-farm")
    console = plain_console()
    spawned: list[int] = []

    def sleeper(name: str, children: farm_local.Children) -> int:
        pid = farm_local._spawn(["sleep", "60", str(layout.home)], layout.logs / f"{name}.log",
                                console, children)
        spawned.append(pid)
        return pid

    def scheduler(*args: object) -> FarmProcess:
        children = args[-1]
        assert isinstance(children, dict)
        return FarmProcess("scheduler", "scheduler", sleeper("scheduler", children), 1)

    def servers(tokens: farm_plan.FarmTokens,
                children: farm_local.Children) -> list[FarmProcess]:
        sleeper("local-1", children)
        raise RuntimeError("local-2 could not start")

    monkeypatch.setattr(farm_local, "_scheduler", scheduler)
    with pytest.raises(RuntimeError, match="local-2"):
        farm_local._start(layout, Path("/bin/true"), [1, 2, 3], servers, console)
    assert len(spawned) == 2
    assert not [pid for pid in spawned if running(pid)], "a process of the failed up is left"
    assert not layout.secrets.exists() and not layout.record.exists()
