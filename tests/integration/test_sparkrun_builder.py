"""sparkrun's own plugin loading finds sparkbake's builder, and the builder hands sparkrun a
tag's image by its digest.

In a container of the CPU tag's Debian trixie base (Python 3.13: sparkrun needs 3.12 or
later), sparkrun 0.4.2 and sparkbake (the wheel of this checkout, and its dependencies',
downloaded on the host for that Python) are installed offline, as a user installs them side
by side. sparkrun's config enables `core.external_plugins` (sparkrun's own `setup features
enable`) and lists what that `sparkbake sparkrun-plugin-path` prints under `plugins.paths`.
The built fixture's project is mounted at its own path with the engine's socket, so the
builder runs the real sparkbake, whose `build-image fixture` finds the image built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkbake.config import versions
from sparkbake.core.folders import Folders
from sparkbake.oci import docker_engine
from sparkbake.sparkrun import validate
from tests import sparkrun_base
from tests.conftest import Project, plain_console
from tests.integration.test_publish import client, local
from tests.integration.test_relay_identity import Signed, signed

pytestmark = pytest.mark.docker

__all__ = ["client", "local", "signed"]  # the fixtures this module shares

REPO = Path(__file__).resolve().parents[2]
CHECK = Path(__file__).with_name("sparkrun_builder_check.py")
PREFIX = "sparkrun-builder: "
WHEELS = "/tmp/wheels"  # in the container: sparkrun's, then sparkbake's
RECIPES = "/tmp/recipes"
SPARKRUN_CONFIG = "$HOME/.config/sparkrun/config.yaml"
# sparkrun and sparkbake installed; the check run once with sparkrun as installed (external
# plugins off), then with the feature on and the plugin's folder in plugins.paths
SCRIPT = f"""set -e
python3 -m venv {validate.VENV}
{validate.VENV}/bin/pip install --quiet --no-index --find-links {WHEELS}/sparkrun \
  --find-links {WHEELS}/sparkbake {validate.SPARKRUN} sparkbake
export PATH={validate.VENV}/bin:$PATH
HOME=/tmp/stock python {RECIPES}/check.py "$1"
export HOME=/tmp/user
sparkrun setup features enable core.external_plugins >/dev/null
printf 'plugins:\\n  paths:\\n    - %s\\n' "$(sparkbake sparkrun-plugin-path)" >> {SPARKRUN_CONFIG}
python {RECIPES}/check.py "$@"
"""


@pytest.fixture(scope="module")
def python_base(docker_client: docker_engine.Client,
                tmp_path_factory: pytest.TempPathFactory) -> str:
    return sparkrun_base.python_base(docker_client, tmp_path_factory.mktemp("bases"))


@pytest.fixture(scope="module")
def wheelhouses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """sparkrun's wheels (downloaded once), and sparkbake's: this checkout's and its
    dependencies' for sparkrun's Python."""
    folders = Folders.of(versions.load(REPO / "versions.yaml"))
    sparkrun = validate.wheels(folders, console=plain_console())
    sparkbake = tmp_path_factory.mktemp("sparkbake-wheels")
    needs = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for args in (["wheel", "--no-deps", "--wheel-dir", str(sparkbake), str(REPO)],
                 ["download", f"--python-version={validate.PYTHON}", "--only-binary=:all:",
                  "--dest", str(sparkbake), *needs]):
        done = subprocess.run([sys.executable, "-m", "pip", "--quiet", *args], text=True,
                              capture_output=True, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
    return {"sparkrun": sparkrun, "sparkbake": sparkbake}


def engine_socket() -> str:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    assert host.startswith("unix://"), f"the engine must be this machine's socket: {host}"
    return host.removeprefix("unix://")


def sparkrun_report(client: docker_engine.Client, base: str, wheels: Mapping[str, Path],
                    folders: Sequence[Path], recipes: Mapping[str, dict[str, Any]],
                    records: Sequence[Path] = (), *, host_network: bool = False
                    ) -> list[dict[str, Any]]:
    """The check's report with external plugins off (the first recipe), then on (all, and
    the release records); folders mounted at their own paths; host_network: this host's
    network (its embedded registry on 127.0.0.1), else none."""
    network: dict[str, Any] = {"network_mode": "host"} if host_network else {}
    files = {f"{RECIPES}/{name}.yaml": yaml.safe_dump(recipe).encode()
             for name, recipe in recipes.items()}
    files[f"{RECIPES}/check.py"] = CHECK.read_bytes()
    mounts = {str(wheels["sparkrun"]): {"bind": f"{WHEELS}/sparkrun", "mode": "ro"},
              str(wheels["sparkbake"]): {"bind": f"{WHEELS}/sparkbake", "mode": "ro"},
              engine_socket(): {"bind": "/var/run/docker.sock", "mode": "rw"},
              **{str(folder): {"bind": str(folder), "mode": "rw"} for folder in folders}}
    paths = [*(f"{RECIPES}/{name}.yaml" for name in recipes), *map(str, records)]
    result = docker_engine.run_container(
        client, base, ["sh", "-c", SCRIPT, "check", *paths], volumes=mounts,
        network=host_network, copy_in=files, name=f"sbs2-sparkrun-{os.getpid()}", **network)
    reports = [json.loads(line[len(PREFIX):]) for line in result.output.splitlines()
               if line.startswith(PREFIX)]
    assert result.exit_code == 0 and len(reports) == 2, result.output[-3000:]
    return reports


def recipe(container: str, **builder_config: str) -> dict[str, Any]:
    return {"recipe_version": "2", "model": "org/tiny", "runtime": "vllm",
            "container": container, "command": "vllm serve {model}",
            "builder": "sparkbake", "builder_config": builder_config}


def test_sparkrun_loads_the_builder_which_hands_it_the_tags_image_by_digest(
        docker_client: docker_engine.Client, python_base: str,
        wheelhouses: dict[str, Path], built_fixture: Project) -> None:
    root = str(built_fixture.root)
    ref = built_fixture.config().tag("fixture").image_ref
    recipes = {
        "built": recipe(ref, tag="fixture", source="build", project=root),
        "misread": recipe(ref, tg="fixture", source="pull"),
        "unpinned": recipe(ref, tag="fixture"),
        "unknown-tag": recipe(ref, tag="nosuch", source="build", project=root),
    }
    stock, enabled = sparkrun_report(docker_client, python_base, wheelhouses,
                                     [built_fixture.root], recipes)
    # without the feature, sparkrun does not know the builder: the feature is what loads it
    assert "sparkbake" not in stock["builders"]
    assert [c for _, c, _ in next(iter(stock["recipes"].values()))["issues"]] == \
        ["builder-unknown"]
    assert "sparkbake" in enabled["builders"]
    found = {Path(path).stem: report for path, report in enabled["recipes"].items()}
    image_id = docker_client.images.get(ref).id
    assert found["built"] == {"issues": [], "image": image_id}, found["built"]
    assert image_id.startswith("sha256:")
    prefix = "[sparkbake] "
    assert found["misread"]["issues"] == [["error", "builder-field", prefix + line] for line in (
        "builder_config.tg is not a key of this builder (it reads tag, source, project, key)",
        "builder_config.tag is required: the sparkbake tag to build or verify",
        "builder_config.source is 'pull': set release or build")]
    assert found["unpinned"]["issues"] == [["error", "builder-field", prefix + line] for line in (
        "builder_config.key is required for source: release: the publisher's public key "
        "(PATH.pub of `sparkbake keys generate`)",
        f"container {ref!r} is not pinned by digest: write the recipe with `sparkbake recipe "
        "TAG`, or set builder_config.source: build")]
    assert found["unknown-tag"]["issues"] == []
    assert found["unknown-tag"]["error"].startswith(
        f"SparkbakeFailed: {prefix}sparkbake build-image nosuch failed (exit 2): "
        f"{root}/versions.yaml: no tag 'nosuch' (known tags: fixture, "), found["unknown-tag"]
    assert "\n" not in found["unknown-tag"]["error"]  # one line, as sparkrun shows it


def test_sparkrun_loads_a_release_record_as_the_recipe_sparkbake_writes_of_it(
        docker_client: docker_engine.Client, python_base: str,
        wheelhouses: dict[str, Path], tmp_path: Path) -> None:
    """The plugin's register(v) hook: a release record as publish writes it, in a project's
    build/releases, is claimed by the recipe format `sparkbake`, whose recipe is what
    `sparkbake recipe RELEASE` writes there; a record away from its project is refused."""
    release = "production-3.73-vision"  # its suite's node file names its model
    project = tmp_path / "project"
    (project / "build" / "releases").mkdir(parents=True)
    (project / "versions.yaml").write_text((REPO / "versions.yaml").read_text())
    record = json.loads((REPO / "tests" / "data" / "records" / "release.json").read_text())
    placed = project / "build" / "releases" / f"{release}.json"
    placed.write_text(json.dumps({**record, "tag": release}))
    alone = tmp_path / "alone" / "releases" / f"{release}.json"
    alone.parent.mkdir(parents=True)
    alone.write_text(placed.read_text())
    written = subprocess.run([sys.executable, "-m", "sparkbake", "recipe", release],
                             cwd=project, text=True, capture_output=True, check=False)
    assert written.returncode == 0, written.stderr
    expected = yaml.safe_load(written.stdout)
    stock, enabled = sparkrun_report(docker_client, python_base, wheelhouses,
                                     [project, alone.parent.parent], {}, [placed, alone])
    # without the plugin, sparkrun reads the record as a recipe of its own: an empty one
    assert stock["recipes"][str(placed)] == {"name": release, "container": "", "model": ""}
    assert enabled["recipes"][str(placed)] == {
        "name": release, "container": expected["container"], "model": expected["model"]}
    assert expected["container"] == record["pinned"]
    assert enabled["recipes"][str(alone)] == {"error": (
        f"RecipeError: Could not translate sparkbake manifest {alone}: [sparkbake] {alone}: a "
        "release record is made a recipe from its project's versions.yaml, two folders up "
        "(build/releases/RELEASE.json)")}


def test_the_builder_verifies_a_signed_release_and_hands_sparkrun_its_digest(
        docker_client: docker_engine.Client, python_base: str,
        wheelhouses: dict[str, Path], signed: Signed, tmp_path: Path) -> None:
    """source: release: verify-release of the recipe's pinned image in its registry (this
    host's, reached over the host's network) with the recipe's key; another key's is one
    line, sparkbake's exit 7 and its reason."""
    other = tmp_path / "other"
    other.mkdir()
    wrong = subprocess.run([sys.executable, "-m", "sparkbake", "keys", "generate",
                            str(other / "other.key")], text=True, capture_output=True,
                           check=False)
    assert wrong.returncode == 0, wrong.stderr
    recipes = {"release": recipe(signed.pinned, tag="production-1.0-pub", key=str(signed.pub)),
               "other-key": recipe(signed.pinned, tag="production-1.0-pub",
                                   key=str(other / "other.key.pub"))}
    _, enabled = sparkrun_report(docker_client, python_base, wheelhouses,
                                 [signed.pub.parent, other], recipes, host_network=True)
    found = {Path(path).stem: report for path, report in enabled["recipes"].items()}
    assert found["release"] == {"issues": [], "image": signed.pinned}, found["release"]
    refused = found["other-key"]["error"]
    assert refused.startswith(f"SparkbakeFailed: [sparkbake] sparkbake verify-release "
                              f"{signed.pinned} failed (exit 7): "), refused
    assert refused.endswith(f"is not signed by {other}/other.key.pub (check that this is the "
                            "publisher's public key)"), refused
