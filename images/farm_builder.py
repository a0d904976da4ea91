"""The builder's entry when the compile farm is up: the bridge, one test compile, the build.

/farm (read-only) holds the client config (client.toml) and bin/ (this file, the bridge and
the `sccache` wrapper); /farm-sockets holds the host bridge's sockets. The builder keeps
`--network none`: the container side of the bridge gives sccache the farm's ports on its
own loopback. One test compile runs through the farm first; if it does not run there, the
build compiles here and says why in one line. Then build_wheels.py runs as it would
without the farm. Standard library only: mounted into the builder.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FARM = Path("/farm")
SOCKETS = Path("/farm-sockets")
BUILD = Path("/opt/sparkbake/build_wheels.py")
PROBE_PORT = "4227"  # the test compile's own sccache server (the build's: 4226)
NO_FARM = Path("/tmp/sparkbake-no-farm.toml")


def main() -> int:
    bridge = start_bridge()
    try:
        why = test_compile()
        if why:
            print(f"compile farm: {why}; compiling here", flush=True)
            NO_FARM.write_text("# sparkbake: sccache without the compile farm\n")
            os.environ.update({"SCCACHE_CONF": str(NO_FARM), "SPARKBAKE_FARM": "0"})
        else:
            print("compile farm: the test compile ran on the farm", flush=True)
            os.environ["SPARKBAKE_FARM"] = "1"
        os.environ["PATH"] = f"{FARM / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        return subprocess.run([sys.executable, str(BUILD)], check=False).returncode
    finally:
        bridge.terminate()
        bridge.wait(timeout=10)


def start_bridge() -> subprocess.Popen[bytes]:
    """The bridge's container side, listening before the first compile."""
    ready = Path(tempfile.mkdtemp()) / "ready"
    bridge = subprocess.Popen(
        [sys.executable, str(FARM / "bin" / "farm_bridge.py"), "container", str(SOCKETS)],
        env={**os.environ, "SPARKBAKE_FARM_BRIDGE_READY": str(ready)})
    deadline = time.monotonic() + 10
    while not ready.exists() and bridge.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return bridge


def test_compile() -> str:
    """Why one fresh C compile did not run on the farm; empty when it did."""
    work = Path(tempfile.mkdtemp(prefix="sparkbake-farm-test."))
    source = work / "farm_test.c"
    source.write_text(f"int sparkbake_farm_test(void) {{ return {secrets.randbelow(1 << 30)}; }}\n")
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("SCCACHE_REDIS")}
    env |= {"SCCACHE_SERVER_PORT": PROBE_PORT, "SCCACHE_DIR": str(work / "cache"),
            "SCCACHE_IDLE_TIMEOUT": "0"}

    def sccache(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sccache", *args], env=env, capture_output=True, text=True,
                              check=False, timeout=600)

    try:
        compiled = sccache("gcc", "-c", str(source), "-o", str(work / "farm_test.o"))
        stats = sccache("--show-stats", "--stats-format=json")
    finally:
        sccache("--stop-server")
    if compiled.returncode != 0:
        return f"the test compile failed through the farm: {last_line(compiled.stderr)}"
    remote = remote_compiles(stats.stdout)
    return "" if remote > 0 else "the test compile ran here, not on the farm " \
        f"({last_line(compiled.stderr) or 'no server took it'})"


def remote_compiles(stats_json: str) -> int:
    try:
        stats = json.loads(stats_json).get("stats", {})
    except ValueError:
        return 0
    return sum(int(count) for count in (stats.get("dist_compiles") or {}).values())


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:240] if lines else ""


if __name__ == "__main__":
    sys.exit(main())
