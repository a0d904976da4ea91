"""The compile farm's files, tokens, slots and remote commands, as data."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from sparkbake.errors import EngineError
from sparkbake.wheels import farm_binary, farm_client, farm_plan
from sparkbake.wheels.farm_state import FarmProcess, FarmRecord, Layout
from sparkbake.wheels.report import Jobs
from tests.conftest import plain_console

# `sccache-dist auth generate-jwt-hs256-key`, then `... generate-jwt-hs256-server-token
# --secret-key KEY --server 127.0.0.1:10501`, sccache 0.16.0
KEY = "nieEWljV5oYHP9d0knn1PVaa84y2JoyVoxw2JAHK-aE"
TOKEN = ("eyJ0eXAiOiJKV1QiLCJhbGciOiJIUzI1NiJ9.eyJleHAiOjAsInNlcnZlcl9pZCI6IjEyNy4wLjAuMToxMDUw"
         "MSJ9.dtMekQ7rmfAz2DzjusNRG056cCr8XeEcGBwoNynv0No")
SERVER = farm_plan.Server("local-1", 10501, (0, 1), 12.0)


def test_a_server_token_is_the_one_sccache_dist_signs() -> None:
    assert farm_plan.server_token(KEY, "127.0.0.1:10501") == TOKEN


def test_tokens_are_made_per_farm() -> None:
    one, two = farm_plan.make_tokens(), farm_plan.make_tokens()
    assert one.client != two.client and one.jwt_key != two.jwt_key
    assert len(one.client) >= 40


def test_configs_keep_every_address_on_loopback() -> None:
    tokens = farm_plan.FarmTokens(KEY, "client-secret")
    scheduler = tomllib.loads(farm_plan.scheduler_config(10600, tokens))
    server = tomllib.loads(farm_plan.server_config(SERVER, 10600, tokens, "/farm/local-1"))
    client = tomllib.loads(farm_plan.client_config(10600, tokens))
    assert scheduler == {"public_addr": "127.0.0.1:10600",
                         "client_auth": {"type": "token", "token": "client-secret"},
                         "server_auth": {"type": "jwt_hs256", "secret_key": KEY}}
    assert server["public_addr"] == "127.0.0.1:10501"
    assert server["scheduler_url"] == "http://127.0.0.1:10600"
    assert server["builder"]["type"] == "overlay"
    assert server["scheduler_auth"] == {"type": "jwt_token", "token": TOKEN}
    assert client == {"dist": {"scheduler_url": "http://127.0.0.1:10600", "toolchains": [],
                               "auth": {"type": "token", "token": "client-secret"}}}


@pytest.mark.parametrize(("cpus", "gib", "slots"), [(20, 128.0, 20), (20, 60.0, 10),
                                                    (2, 11.8, 1), (4, 2.0, 1)])
def test_slots_follow_memory(cpus: int, gib: float, slots: int) -> None:
    assert farm_plan.slots_for(cpus, gib, 6.0) == slots


def test_cores_are_shared_among_servers() -> None:
    assert farm_plan.split_cores((0, 1), 2) == [(0,), (1,)]
    assert farm_plan.split_cores((0, 1, 2, 3), 2) == [(0, 2), (1, 3)]
    assert farm_plan.split_cores((0,), 2) == [(0,), (0,)]


def test_the_unit_runs_the_server_as_root_bound_to_its_cpus_and_memory() -> None:
    unit = farm_plan.systemd_unit(SERVER)
    assert "User=root" in unit
    assert "CPUAffinity=0,1" in unit
    assert "MemoryMax=12288M" in unit
    assert "ExecStart=/usr/local/bin/sccache-dist server --config " \
           "/etc/sparkbake-farm/server.toml" in unit


def test_one_tunnel_per_node_and_no_secret_on_a_command_line() -> None:
    commands = farm_plan.remote_commands("spark-2", SERVER, 10600)
    assert commands[-1] == ["ssh", "-N", "-o", "ExitOnForwardFailure=yes",
                            "-L", "127.0.0.1:10501:127.0.0.1:10501",
                            "-R", "127.0.0.1:10600:127.0.0.1:10600", "spark-2"]
    assert "cat > /etc/sparkbake-farm/server.toml" in commands[0][2]
    assert not any(TOKEN in " ".join(command) for command in commands)


def test_the_aarch64_pin_without_its_sha256_is_refused() -> None:
    with pytest.raises(EngineError) as refused:
        farm_binary.pin_for("aarch64")
    assert str(refused.value).startswith("sccache-dist 0.16.0 for aarch64: its release "
                                         "archive's sha256 was never recorded")
    assert refused.value.exit_code == 8
    assert farm_binary.pin_for("x86_64").sha256 == (
        "0bc1d09991eec9f266f495920e669715906cf610a759d2685156e69f9fcde995")


STATS = {"stats": {"compilations": 5, "dist_compiles": {"127.0.0.1:1": 3, "127.0.0.1:2": 1},
                   "cache_misses": {"counts": {"CUDA": 1, "PTX": 1, "CUBIN": 1}}}}


def test_remote_units_are_counted_against_every_compile() -> None:
    assert farm_client.remote_count(STATS) == (4, 5)
    assert farm_client.remote_count(None) == (0, 0)


def test_the_builder_fallback_line_is_found() -> None:
    output = ("+ sccache --start-server\ncompile farm: the test compile failed through the "
              "farm: error: 401 Unauthorized; compiling here\nmore\n")
    assert farm_client.fallback_line(output) == (
        "compile farm: the test compile failed through the farm: error: 401 Unauthorized; "
        "compiling here")
    assert farm_client.fallback_line("compile farm: the test compile ran on the farm") is None


def test_max_jobs_counts_the_farm_slots(tmp_path: Path) -> None:
    record = FarmRecord(1, (FarmProcess("server", "local-1", 1, 2, (0, 1)),
                            FarmProcess("server", "local-2", 2, 3, (2,))))
    farm = farm_client.FarmUse(Layout(tmp_path), record)
    jobs = farm_client.with_farm_slots(Jobs(2, 1, "24 GiB / 6 GiB per job, 2 CPUs"), farm)
    assert jobs == Jobs(5, 1, "24 GiB / 6 GiB per job, 2 CPUs; + 3 compile farm slots")
    fixed = Jobs(7, 1, "SPARKBAKE_MAX_JOBS")
    assert farm_client.with_farm_slots(fixed, farm) == fixed
    assert farm_client.with_farm_slots(fixed, None) == fixed


def test_an_emulated_builder_compiles_here(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    layout = Layout(tmp_path / "compile-farm")
    layout.home.mkdir()
    layout.write(FarmRecord(1, (FarmProcess("server", "local-1", 1, 2, (0,)),)))
    other = "aarch64" if os.uname().machine != "aarch64" else "x86_64"
    assert farm_client.in_use(tmp_path, "local", other, console=plain_console()) is None
    assert capsys.readouterr().err == (f"compile farm: the builder is {other} under emulation, "
                                       f"the farm's servers {os.uname().machine}; compiling "
                                       "here\n")
    assert farm_client.in_use(tmp_path, "off", os.uname().machine,
                              console=plain_console()) is None
