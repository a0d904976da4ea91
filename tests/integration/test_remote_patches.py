"""Remote patches on the fixture: a series line names a patch by URL and sha256, served by an
HTTP server on 127.0.0.1; fetched, verified, cached in build/ and applied in series order.

No Docker: the fixture's upstream is a local folder, and the patch stage needs only git.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sparkbake.bake import runtime_image
from sparkbake.bases import BaseImage
from sparkbake.fetch import remote_patches
from sparkbake.patch.apply import PatchedTree
from sparkbake.wheels.container_build import WheelSet
from sparkbake.wheels.report import WheelsReport
from tests.conftest import Project, free_port

SERIES = "tinykern"
REMOTE_PATCH = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: Upstream Dev <dev@upstream.example>
Date: Thu, 1 Jan 1970 00:00:00 +0000
Subject: [PATCH] tinykern: say which pull request this came from

An upstream pull request's commit, named in the series by URL and sha256.

diff --git a/tinykern/upstream_pr.py b/tinykern/upstream_pr.py
new file mode 100644
--- /dev/null
+++ b/tinykern/upstream_pr.py
@@ -0,0 +1 @@
+PULL_REQUEST = 4242
"""
# a change to a file the fixture does not have: it cannot apply
CONFLICTING_PATCH = (REMOTE_PATCH.replace("upstream_pr", "gone")
                     .replace("new file mode 100644\n--- /dev/null", "--- a/tinykern/gone.py")
                     .replace("@@ -0,0 +1 @@", "@@ -1 +1 @@\n-x"))


@dataclass
class PatchServer:
    """Files served on 127.0.0.1 by path; what a test puts in `files` is what a GET gets."""

    port: int
    files: dict[str, bytes] = field(default_factory=dict)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"


@pytest.fixture
def server() -> Iterator[PatchServer]:
    served = PatchServer(0)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = served.files.get(self.path.lstrip("/"))
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        httpd.shutdown()
        httpd.server_close()


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def add_remote_line(project: Project, url: str, pin: str, after: int = 1) -> None:
    """Put `url sha256=pin` after the series' first `after` patch lines."""
    listing = project.root / "patches" / SERIES / "series"
    lines = listing.read_text().splitlines()
    patch_lines = [i for i, line in enumerate(lines) if line and not line.startswith("#")]
    lines.insert(patch_lines[after - 1] + 1, f"{url} sha256={pin}  # an upstream PR's commit")
    listing.write_text("\n".join(lines) + "\n")


def patches_report(project: Project) -> dict[str, object]:
    entry = project.root / "build" / "patched" / project.plan().patch_key
    report: dict[str, object] = json.loads((entry / "patches.json").read_text())
    return report


def test_a_remote_patch_is_fetched_verified_cached_and_applied_in_order(
        project: Project, server: PatchServer) -> None:
    local = project.plan()
    patches_before = sorted(p.name for p in (project.root / "patches" / SERIES).iterdir())
    server.files["pr/4242.patch"] = REMOTE_PATCH.encode()
    url, pin = server.url("pr/4242.patch"), sha256(REMOTE_PATCH)
    add_remote_line(project, url, pin)
    assert project.plan().patch_key != local.patch_key  # its pin enters the patch key
    assert project.plan().kernel_key != local.kernel_key  # unknown content: may touch kernels

    assert project.sparkbake("patch", "fixture") == 0
    tree = project.root / "build" / "patched" / project.plan().patch_key / "tree"
    assert (tree / "tinykern" / "upstream_pr.py").read_text() == "PULL_REQUEST = 4242\n"
    listed = [p for s in patches_report(project)["series"] for p in s["patches"]]  # type: ignore
    assert [p.get("file") or p["url"] for p in listed] == [
        "0001-kernel-export-the-C-ABI-version.patch", url,
        "0002-python-expose-the-ABI-version-and-the-patch-marker.patch"]
    assert {"url": url, "sha256": pin}.items() <= listed[1].items()
    cached = project.root / "build" / remote_patches.CACHE / f"{pin}.patch"
    assert cached.read_text() == REMOTE_PATCH
    assert sorted(p.name for p in (project.root / "patches" / SERIES).iterdir()) == \
        patches_before  # nothing fetched goes into the repository
    assert project.plan().kernel_key == local.kernel_key  # fetched: it touches only Python

    server.files.clear()  # cached: no network needed again
    (project.root / "build" / "patched").rename(project.root / "build" / "patched.old")
    assert project.sparkbake("patch", "fixture") == 0


def test_the_image_manifest_lists_a_remote_patch_by_url_and_sha256(
        project: Project, server: PatchServer) -> None:
    server.files["x.patch"] = REMOTE_PATCH.encode()
    url, pin = server.url("x.patch"), sha256(REMOTE_PATCH)
    add_remote_line(project, url, pin, after=2)
    assert project.sparkbake("fetch", "fixture") == 0
    plan = project.plan()
    manifest = runtime_image.manifest(plan, BaseImage("debian", "debian", "sha256:" + "0" * 64),
                                  WheelSet(project.root, "k", WheelsReport("", "", "", ())),
                                  PatchedTree(project.root, plan.patch_key, "0" * 64), 0)
    assert manifest["series"][0]["patches"][2] == {"url": url, "sha256": pin}


def test_a_changed_remote_patch_is_exit_2_naming_url_and_both_hashes(
        project: Project, server: PatchServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.files["pr.patch"] = REMOTE_PATCH.replace("4242", "4243").encode()  # force-pushed
    url, pin = server.url("pr.patch"), sha256(REMOTE_PATCH)
    add_remote_line(project, url, pin)
    assert project.sparkbake("fetch", "fixture") == 2
    err = capsys.readouterr().err
    listing = project.root / "patches" / SERIES / "series"
    got = sha256(REMOTE_PATCH.replace("4242", "4243"))
    assert f"{listing}:3: {url} has sha256 {got}, the series pins {pin}; download deleted" in err
    assert f"-> if the changed patch is trusted, update sha256= in {listing}:3" in err
    assert not list((project.root / "build" / remote_patches.CACHE).glob("*.patch"))


def test_an_unreachable_patch_server_is_exit_8_naming_the_url(
        project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}/pr.patch"
    add_remote_line(project, url, sha256(REMOTE_PATCH))
    assert project.sparkbake("patch", "fixture") == 8
    err = capsys.readouterr().err
    assert f"remote patch: cannot reach {url}: ConnectionError" in err
    assert "-> check the network and the URL" in err


def test_a_remote_patch_that_does_not_apply_is_exit_3_naming_its_url(
        project: Project, server: PatchServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.files["bad.patch"] = CONFLICTING_PATCH.encode()
    url = server.url("bad.patch")
    add_remote_line(project, url, sha256(CONFLICTING_PATCH))
    assert project.sparkbake("patch", "fixture") == 3
    err = capsys.readouterr().err
    assert f"patch {SERIES}/{url} does not apply" in err
    assert f"  patch:    {url}" in project.log("fixture", "patch")  # the whole report
    assert "-> pin a version of " + url in err


def test_patch_lint_checks_a_remote_line_without_the_network_and_its_cached_copy(
        project: Project, server: PatchServer, capsys: pytest.CaptureFixture[str]) -> None:
    url = server.url("lint.patch")
    text = REMOTE_PATCH.replace("tinykern/upstream_pr.py", "../outside.py")
    add_remote_line(project, url, sha256(text))
    assert project.sparkbake("patch-lint") == 0  # not fetched: its line is fine
    assert f"{url} is not fetched" in capsys.readouterr().err
    server.files["lint.patch"] = text.encode()
    assert project.sparkbake("fetch", "fixture") == 0
    capsys.readouterr()
    assert project.sparkbake("patch-lint") == 2
    assert f"{url}:8: '../outside.py' is outside the tree (..)" in capsys.readouterr().err
