"""The builder lock for real: resolved from the package index, enforced by pip's hash check."""

from __future__ import annotations

import re

import pytest

from sparkbake import resources
from tests.conftest import Project

pytestmark = pytest.mark.docker


def pins(text: str) -> set[str]:
    return set(re.findall(r"^([A-Za-z0-9._-]+==[^\s\\]+)", text, re.MULTILINE))


def test_lock_resolves_every_package_pinned_and_hashed(project: Project) -> None:
    lock = project.root / "locks" / "debian.amd64.txt"
    lock.unlink()
    assert project.sparkbake("lock", "fixture") == 0
    text = lock.read_text()
    wanted = pins(resources.path("builder-requirements.txt").read_text())
    assert wanted <= pins(text)  # the direct pins, plus what they need
    blocks = text.split("\n")
    packages = [line for line in blocks if "==" in line]
    assert packages and all(line.endswith("\\") for line in packages)
    assert text.count("--hash=sha256:") >= len(packages)
    assert str(project.root) not in text  # no machine paths in a committed file


def test_a_download_whose_hash_differs_from_the_lock_is_refused(
        project: Project, debian_base: str, capsys: pytest.CaptureFixture[str]) -> None:
    lock = project.root / "locks" / "debian.amd64.txt"
    # every hash of the first package: whichever of its files pip picks, it mismatches
    head, rest = re.split(r"\n(?=[A-Za-z])", lock.read_text().split("\n", 2)[2], maxsplit=1)
    tampered = re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "0" * 64, head)
    lock.write_text("# tampered\n" + tampered + "\n" + rest)
    assert project.sparkbake("wheels", "fixture") == 4
    err = capsys.readouterr().err
    assert "building sparkbake-builder/debian:" in err and " failed: " in err
    # pip's own refusal, in the wheels stage's log: the lock's hash is not the file's
    assert "DO NOT MATCH THE HASHES" in project.log("fixture", "wheels")
    assert "Expected sha256 " + "0" * 64 in project.log("fixture", "wheels")


def test_a_missing_lock_stops_before_building_with_locked(
        project: Project, debian_base: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)  # --locked alone refuses it
    (project.root / "locks" / "debian.amd64.txt").unlink()
    assert project.sparkbake("wheels", "fixture", "--locked") == 2
    assert f"create it: sparkbake --config {project.config_path} lock fixture" in \
        capsys.readouterr().err
    assert not (project.root / "locks" / "debian.amd64.txt").exists()


def test_a_missing_lock_is_made_on_a_developers_machine(
        project: Project, debian_base: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    committed = (project.root / "locks" / "debian.amd64.txt").read_text()
    (project.root / "locks" / "debian.amd64.txt").unlink()
    assert project.sparkbake("wheels", "fixture") == 0
    assert "lock: locks/debian.amd64.txt missing: making it now" in capsys.readouterr().err
    made = (project.root / "locks" / "debian.amd64.txt").read_text()
    pinned = [line for line in resources.path("builder-requirements.txt").read_text()
              .splitlines() if "==" in line]
    assert all(f"{pin} \\" in made for pin in pinned)  # its inputs, resolved with hashes
    assert committed.splitlines()[0] == made.splitlines()[0]  # the same header
