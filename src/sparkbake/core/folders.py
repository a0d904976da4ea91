"""Where every stage's output lives: the one map of a project's build/ and wheels/ folders.

Cache entries are named by their stage's key (planning.py); records by their tag.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkbake.config.model import Config
from sparkbake.core.stages import Stage

__all__ = ["Folders"]


@dataclass(frozen=True)
class Folders:
    build: Path  # build/: trees, images, records, logs (a verify run's is a scratch folder)
    wheels: Path  # wheels/: built wheels and the compiled kernels they reuse

    @classmethod
    def of(cls, config: Config) -> Folders:
        return cls(config.build_dir, config.wheels_dir)

    # cache entries, by key, and the folders that hold them
    def source(self, fetch_key: str) -> Path:
        """The fetch stage's entry: tree/ (the pristine upstream) and its source date."""
        return self.sources / fetch_key

    def patched(self, patch_key: str) -> Path:
        """The patch stage's entry: tree/ and patches.json (a failed one: <key>.failed)."""
        return self.patched_trees / patch_key

    def kernels(self, kernel_key: str) -> Path:
        """The compiled kernels a Python-only change reuses: a wheel and kernels.json."""
        return self.kernel_cache / kernel_key

    def wheel_set(self, wheels_key: str) -> Path:
        """The wheels stage's entry: the wheels and wheels.json."""
        return self.wheels / wheels_key

    @property
    def sources(self) -> Path:
        return self.build / "sources"

    @property
    def patched_trees(self) -> Path:
        return self.build / "patched"

    @property
    def kernel_cache(self) -> Path:
        return self.wheels / "kernels"

    @property
    def runtime_wheelhouses(self) -> Path:
        """The wheels of runtime locks, by the lock's hash."""
        return self.wheels / "runtime"

    def sparkrun_wheels(self, requirement: str) -> Path:
        """sparkrun's wheels and its dependencies', by requirement (sparkrun==0.4.2): what
        its checks of recipes install offline in a container."""
        return self.wheels / "sparkrun" / requirement.replace("==", "-")

    @property
    def device_packages(self) -> Path:
        """The Debian packages of the OCI runtime a device bundle carries (runc)."""
        return self.wheels / "device-smoke"

    @property
    def oci(self) -> Path:
        """The bake stage's OCI image layout: every tag's image, by tag name."""
        return self.build / "oci"

    @property
    def layers(self) -> Path:
        """The bake's venv layers, by their key (the base layers are per host: not here)."""
        return self.build / "layers"

    @property
    def thirdparty(self) -> Path:
        """CMake's third-party sources, by lock key."""
        return self.build / "thirdparty"

    @property
    def venvs(self) -> Path:
        """The patch-tests' virtual environments, by their lock's hash."""
        return self.build / "venvs"

    # records, by tag
    def smoke_record(self, tag: str) -> Path:
        """The smoke record (and beside it, .xml, its JUnit report)."""
        return self.build / "smoke" / f"{tag}.json"

    @property
    def releases(self) -> Path:
        """The release records and their index (history: clean --all keeps them)."""
        return self.build / "releases"

    def release_record(self, tag: str) -> Path:
        return self.releases / f"{tag}.json"

    @property
    def deploys(self) -> Path:
        return self.build / "deploys"

    @property
    def loaded_images(self) -> Path:
        """The IDs of the images this checkout's bakes loaded into the engine, one a line:
        what gc may remove once they are untagged (another project's are not ours)."""
        return self.build / "loaded-images.txt"

    def last_build(self, tag: str) -> Path:
        """The stage inputs of the tag's last build-image: what `plan` says changed since."""
        return self.build / "plans" / f"{tag}.json"

    def stage_log(self, tag: str, stage: Stage) -> Path:
        """A stage's full output, written anew each run."""
        return self.logs(tag) / f"{stage}.log"

    def logs(self, tag: str) -> Path:
        return self.build / "logs" / tag

    def patch_tests(self, tag: str) -> Path:
        """The series' tests' results: JUnit XML and a report."""
        return self.build / "patch-tests" / tag

    def verify_report(self, tag: str) -> Path:
        return self.build / "verify" / f"{tag}.json"

    def build_lock(self, tag: str) -> Path:
        """The lock that one build of the tag holds at a time (clean --all keeps *.lock)."""
        return self.build / f".build-{tag}.lock"

    def scratch(self, purpose: str) -> Path:
        """A folder of short-lived work folders (contexts, bases, verify, ...)."""
        return self.build / purpose
