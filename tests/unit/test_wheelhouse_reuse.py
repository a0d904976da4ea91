"""A runtime lock's wheelhouse takes the wheels it shares with another wheelhouse by their
content, and downloads only the others: real pip download from a package index of the
tests' own on 127.0.0.1, which counts what it serves."""

from __future__ import annotations

import hashlib
import http.server
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from sparkbake.config import versions
from sparkbake.config.versions import Tag
from sparkbake.core.folders import Folders
from sparkbake.lock import wheelhouse
from sparkbake.wheelfile import contents
from tests.conftest import DEBIAN_BASE, DEBIAN_BASE_WITH_PYTHON, plain_console, versions_yaml
from tests.localserver import serving

SOURCE_DATE = 1735689600


def wheel(project: str, version: str) -> bytes:
    """A wheel of one module, as pip checks a download (its name and version inside)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "w.whl"
        info = f"{project}-{version}.dist-info"
        contents.write(path, {
            f"{project}.py": contents.Entry(0o644, lambda: f"VERSION = {version!r}\n".encode()),
            f"{info}/METADATA": contents.Entry(0o644, lambda: (
                f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n").encode()),
            f"{info}/WHEEL": contents.Entry(0o644, lambda: (
                b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"))},
            SOURCE_DATE)
        return path.read_bytes()


WHEELS = {f"{p}-{v}-py3-none-any.whl": wheel(p, v)
          for p, v in (("alpha", "1.0"), ("beta", "1.0"), ("beta", "2.0"))}
ALPHA = "alpha-1.0-py3-none-any.whl"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def lock_of(pins: dict[str, str]) -> str:
    """A runtime lock as `uv pip compile --generate-hashes` writes it: project -> file."""
    return "".join(f"{project}=={file.split('-')[1]} \\\n"
                   f"    --hash=sha256:{sha(WHEELS[file])}\n" for project, file in pins.items())


class _Index(http.server.BaseHTTPRequestHandler):
    """A PEP 503 simple index of WHEELS; every wheel it sends is listed in `sent`."""

    sent: ClassVar[list[str]]

    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        if parts[:1] == ["simple"] and len(parts) == 2:
            self.sent.append(f"page {parts[1]}")
            links = "".join(f'<a href="/files/{f}#sha256={sha(WHEELS[f])}">{f}</a>\n'
                            for f in WHEELS if f.split("-")[0] == parts[1])
            self._send(f"<html><body>\n{links}</body></html>\n".encode(), "text/html")
        elif parts[:1] == ["files"] and parts[1] in WHEELS:
            self.sent.append(parts[1])
            self._send(WHEELS[parts[1]], "application/octet-stream")
        else:
            self.send_error(404)

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture()
def index(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The index, as the host's pip configuration names it; what it has sent."""
    class Index(_Index):
        sent: ClassVar[list[str]] = []  # a class of its own per test: its own list

    with serving(Index) as port:
        monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{port}/simple")
        monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")  # what it sends, not pip's cache
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # nor the host's other indexes
        yield Index.sent


@pytest.fixture()
def tag(tmp_path: Path) -> Tag:
    config = tmp_path / "versions.yaml"
    config.write_text(versions_yaml(tags="  t:\n    upstream: tree\n    series: []\n",
                                    bases=DEBIAN_BASE_WITH_PYTHON))
    return versions.load(config).tag("t")


def wheelhouse_of(tmp_path: Path, tag: Tag, name: str, pins: dict[str, str]) -> Path:
    lock = tmp_path / name
    lock.write_text(lock_of(pins))
    return wheelhouse.ensure(lock, tag, Folders(tmp_path / "build", tmp_path / "wheels"),
                             console=plain_console())


def test_a_moved_package_is_all_a_new_lock_downloads(
        tmp_path: Path, tag: Tag, index: list[str]) -> None:
    first = wheelhouse_of(tmp_path, tag, "one.txt", {"alpha": "alpha-1.0-py3-none-any.whl",
                                                     "beta": "beta-1.0-py3-none-any.whl"})
    assert sorted(index) == ["alpha-1.0-py3-none-any.whl", "beta-1.0-py3-none-any.whl",
                             "page alpha", "page beta"]
    index.clear()
    second = wheelhouse_of(tmp_path, tag, "two.txt", {"alpha": "alpha-1.0-py3-none-any.whl",
                                                      "beta": "beta-2.0-py3-none-any.whl"})
    # alpha 1.0 came from the first wheelhouse: pip did not even ask for its page
    assert index == ["page beta", "beta-2.0-py3-none-any.whl"]
    assert second != first
    assert sorted(p.name for p in second.glob("*.whl")) == [
        "alpha-1.0-py3-none-any.whl", "beta-2.0-py3-none-any.whl"]
    alpha = "alpha-1.0-py3-none-any.whl"
    assert os.path.samefile(first / alpha, second / alpha)  # a hard link, not a copy
    # what it took is checked already: reusing the wheelhouse reads no wheel again
    assert wheelhouse._intact(second, tmp_path / "two.txt", console=plain_console())


def test_a_damaged_wheel_of_another_wheelhouse_is_downloaded_instead(
        tmp_path: Path, tag: Tag, index: list[str]) -> None:
    first = wheelhouse_of(tmp_path, tag, "one.txt", {"alpha": "alpha-1.0-py3-none-any.whl"})
    damaged = first / ALPHA
    damaged.chmod(0o644)
    damaged.write_bytes(WHEELS[ALPHA][:-1] + b"!")
    index.clear()
    second = wheelhouse_of(tmp_path, tag, "two.txt", {"alpha": "alpha-1.0-py3-none-any.whl",
                                                      "beta": "beta-1.0-py3-none-any.whl"})
    assert sorted(index) == ["alpha-1.0-py3-none-any.whl", "beta-1.0-py3-none-any.whl",
                             "page alpha", "page beta"]
    assert (second / ALPHA).read_bytes() == WHEELS[ALPHA]


def test_each_wheel_is_hashed_once_while_it_keeps_its_stamp(tmp_path: Path) -> None:
    house = tmp_path / "house"
    house.mkdir()
    (house / "alpha-1.0-py3-none-any.whl").write_bytes(b"alpha 1.0")
    hashed = wheelhouse._hashes(house, console=plain_console())
    assert hashed == {"alpha-1.0-py3-none-any.whl": sha(b"alpha 1.0")}
    record = (house / wheelhouse.HASHES).read_text()
    # a record that says otherwise is believed while the stamp holds: it is not hashed again
    (house / wheelhouse.HASHES).write_text(record.replace(sha(b"alpha 1.0"), "f" * 64))
    assert wheelhouse._hashes(house,
                              console=plain_console()) == {"alpha-1.0-py3-none-any.whl": "f" * 64}
    # a wheel written again has another stamp: hashed again, the record made right
    (house / "alpha-1.0-py3-none-any.whl").write_bytes(b"alpha 1.0 again")
    hashed = wheelhouse._hashes(house, console=plain_console())
    assert hashed == {"alpha-1.0-py3-none-any.whl": sha(b"alpha 1.0 again")}
    (house / wheelhouse.HASHES).write_text("{not json")  # damaged: dropped, hashed again
    hashed = wheelhouse._hashes(house, console=plain_console())
    assert hashed == {"alpha-1.0-py3-none-any.whl": sha(b"alpha 1.0 again")}


def tag_for(folder: Path, python: str, platform: str) -> Tag:
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "versions.yaml"
    config.write_text(versions_yaml(tags="  t:\n    upstream: tree\n    series: []\n",
                                    bases=DEBIAN_BASE + f'    python: "{python}"\n',
                                    platform=platform))
    return versions.load(config).tag("t")


@pytest.mark.parametrize(("python", "platform", "older"), [
    ("3.12", "linux/amd64", False),  # another Python's: pip may have chosen other files
    ("3.11", "linux/arm64", False),  # another platform's
    ("3.11", "linux/amd64", True),  # the same, but made before the target was written down
])
def test_a_wheelhouse_made_for_another_target_is_not_taken_from(
        tmp_path: Path, tag: Tag, index: list[str], python: str, platform: str,
        older: bool) -> None:
    """Only a wheelhouse pip filled for the same Python and platform holds the files pip
    would choose now: anything else could make the image depend on what was cached."""
    first = wheelhouse_of(tmp_path, tag_for(tmp_path / "other", python, platform), "one.txt",
                          {"alpha": ALPHA})
    if older:
        (first / wheelhouse.DONE).write_text("one.txt\n")
    index.clear()
    wheelhouse_of(tmp_path, tag, "two.txt", {"alpha": ALPHA,
                                             "beta": "beta-1.0-py3-none-any.whl"})
    assert sorted(index) == [ALPHA, "beta-1.0-py3-none-any.whl", "page alpha", "page beta"]


def test_what_pip_must_still_download_is_the_lock_but_the_projects_taken(
        tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text("# header\n"
                    f"alpha==1.0 \\\n    --hash=sha256:{'a' * 64}\n"
                    f"beta==2.0 \\\n    --hash=sha256:{'b' * 64}\n"
                    f"gamma==1.0 ; python_version < '3.12' \\\n    --hash=sha256:{'c' * 64}\n"
                    f"gamma==2.0 ; python_version >= '3.12' \\\n    --hash=sha256:{'d' * 64}\n")
    taken = {"alpha-1.0-py3-none-any.whl", "beta-1.0-py3-none-any.whl",  # not the pinned 2.0
             "gamma-1.0-py3-none-any.whl"}  # gamma has two lines: pip chooses
    assert wheelhouse._still_wanted(lock, taken) == (
        "# header\n"
        f"beta==2.0      --hash=sha256:{'b' * 64}\n"
        f"gamma==1.0 ; python_version < '3.12'      --hash=sha256:{'c' * 64}\n"
        f"gamma==2.0 ; python_version >= '3.12'      --hash=sha256:{'d' * 64}\n")


def test_a_lock_whose_every_wheel_is_taken_downloads_nothing(
        tmp_path: Path, tag: Tag, index: list[str]) -> None:
    """A package dropped from the lock: the rest is all in the first wheelhouse."""
    wheelhouse_of(tmp_path, tag, "one.txt", {"alpha": ALPHA,
                                             "beta": "beta-1.0-py3-none-any.whl"})
    index.clear()
    second = wheelhouse_of(tmp_path, tag, "two.txt", {"alpha": ALPHA})
    assert index == []
    assert [p.name for p in second.glob("*.whl")] == [ALPHA]
    assert (second / wheelhouse.DONE).is_file() and not (second / wheelhouse.STILL_WANTED).exists()


def test_a_wheelhouse_from_before_targets_gets_its_own_when_its_lock_is_used(
        tmp_path: Path, tag: Tag, index: list[str]) -> None:
    first = wheelhouse_of(tmp_path, tag, "one.txt", {"alpha": ALPHA})
    (first / wheelhouse.DONE).write_text("one.txt\n")  # as one made before
    assert wheelhouse_of(tmp_path, tag, "one.txt", {"alpha": ALPHA}) == first  # cached
    assert wheelhouse._made_for(first) == "python 3.11 linux/amd64"
    index.clear()
    wheelhouse_of(tmp_path, tag, "two.txt", {"alpha": ALPHA,
                                             "beta": "beta-1.0-py3-none-any.whl"})
    assert sorted(index) == ["beta-1.0-py3-none-any.whl", "page beta"]
