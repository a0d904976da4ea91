"""bench-lock-change's own logic: how it moves one package of a runtime lock."""

from __future__ import annotations

from pathlib import Path

import bench_lock_change
import pytest

LOCK = """\
# runtime lock of base local-debian (python 3.11, linux/arm64) for upstream vllm-0.33.0.
idna==3.20 \\
    --hash=sha256:{a} \\
    --hash=sha256:{b}
    # via requests
idna-ssl==1.1.0 \\
    --hash=sha256:{c}
requests==2.32.5 \\
    --hash=sha256:{d}
""".format(a="a" * 64, b="b" * 64, c="c" * 64, d="d" * 64)


def test_the_moved_package_gets_its_new_pin_and_hash_and_nothing_else_changes(
        tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text(LOCK)
    assert bench_lock_change.moved_lock(lock, "idna", "3.19", "e" * 64) == "idna==3.20"
    expected = LOCK.replace(f"idna==3.20 \\\n    --hash=sha256:{'a' * 64} \\\n"
                            f"    --hash=sha256:{'b' * 64}\n",
                            f"idna==3.19 \\\n    --hash=sha256:{'e' * 64}\n")
    assert lock.read_text() == expected  # idna-ssl, a name that starts the same, is as it was


def test_a_package_the_lock_does_not_pin_stops_the_bench(tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text(LOCK)
    with pytest.raises(SystemExit, match=r"lock\.txt pins no urllib3"):
        bench_lock_change.moved_lock(lock, "urllib3", "2.0.0", "e" * 64)
    assert lock.read_text() == LOCK


def test_a_move_without_a_version_is_refused_before_any_build(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        bench_lock_change.main(["--move", "idna"])
    assert stopped.value.code == 2
    assert "--move 'idna': write NAME==VERSION" in capsys.readouterr().err
