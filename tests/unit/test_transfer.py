"""The byte accounting of publish and deploy: sizes, the lines printed, what is recorded,
and a pull's layers read from its progress messages."""

from __future__ import annotations

from typing import Any

import pytest

from sparkbake.oci import image_layout, transfer

CONFIG = image_layout.Descriptor(image_layout.CONFIG_TYPE, "sha256:" + "c" * 64, 1_234)
BASE = image_layout.Descriptor("layer", "sha256:" + "b" * 64, 4_200_000_000)
CODE = image_layout.Descriptor("layer", "sha256:" + "a" * 64, 48_100_000)
DIGEST = "sha256:" + "d" * 64


@pytest.mark.parametrize(("count", "text"), [
    (0, "0 B"), (999, "999 B"), (1_000, "1.0 kB"), (48_100_000, "48.1 MB"),
    (4_200_000_000, "4.2 GB"), (12 * 10**15, "12000.0 TB"),
])
def test_sizes_are_decimal_units_as_docker_prints_them(count: int, text: str) -> None:
    assert transfer.human_bytes(count) == text


def test_a_publish_counts_what_it_sent_and_what_the_registry_had() -> None:
    sent = transfer.Sent(sent=(CONFIG, CODE), present=(BASE,))
    assert sent.sent_bytes == 48_101_234 and sent.present_bytes == 4_200_000_000
    assert sent.line(DIGEST) == ("publish: 2 of 3 blobs sent (48.1 MB), 1 already in the "
                                 "registry (4.2 GB)")
    record = sent.record()
    assert record["sent"] == {"blobs": 2, "bytes": 48_101_234}
    assert record["present"] == {"blobs": 1, "bytes": 4_200_000_000}
    assert [(b["digest"][7], b["sent"]) for b in record["blobs"]] == [
        ("a", True), ("b", False), ("c", True)]


def test_a_publish_that_sent_nothing_says_so() -> None:
    sent = transfer.Sent(sent=(), present=(CONFIG, BASE))
    assert sent.line(DIGEST) == (f"publish: nothing to send: the registry has every blob of "
                                 f"{DIGEST} (2 blobs, 4.2 GB)")
    assert sent.record()["sent"] == {"blobs": 0, "bytes": 0}


def test_a_pull_counts_the_layers_fetched_and_those_already_there() -> None:
    sizes = transfer.progress_ids([{"digest": BASE.digest, "size": BASE.size},
                                   {"digest": CODE.digest, "size": CODE.size}])
    assert sizes == {"b" * 12: BASE.size, "a" * 12: CODE.size}
    progress: list[dict[str, Any]] = [
        {"status": "Pulling from repo", "id": "sha256:" + "d" * 12},
        {"status": "Already exists", "id": "b" * 12, "progressDetail": {}},
        {"status": "Pulling fs layer", "id": "a" * 12, "progressDetail": {}},
        {"status": "Downloading", "id": "a" * 12,
         "progressDetail": {"current": 10, "total": 999}},  # the release's size wins
        {"status": "Pull complete", "id": "a" * 12, "progressDetail": {}},
        {"status": "Pulling fs layer", "id": "e" * 12, "progressDetail": {}},
        {"status": "Downloading", "id": "e" * 12, "progressDetail": {"current": 5, "total": 7}},
        {"status": "Pull complete", "id": "e" * 12, "progressDetail": {}},
        {"status": "Digest: " + DIGEST}, {"status": "Status: Downloaded newer image"},
    ]
    pulled = transfer.pulled_from_progress(progress, sizes)
    assert pulled.fetched == (("a" * 12, CODE.size), ("e" * 12, 7))
    assert pulled.present == (("b" * 12, BASE.size),)
    assert pulled.record() == {"pulled": {"layers": 2, "bytes": CODE.size + 7},
                               "present": {"layers": 1, "bytes": BASE.size}}
    assert pulled.line("ssh://spark-1") == ("deploy: ssh://spark-1: pulled 2 of 3 layers "
                                            "(48.1 MB), 1 already present (4.2 GB)")


def test_a_pull_of_layers_the_node_had_pulled_nothing() -> None:
    progress = [{"status": "Already exists", "id": "b" * 12},
                {"status": "Status: Downloaded newer image for repo@" + DIGEST}]
    pulled = transfer.pulled_from_progress(progress, {"b" * 12: BASE.size})
    assert pulled.fetched_bytes == 0
    assert pulled.line("tcp://n:2375") == ("deploy: tcp://n:2375: every layer was already "
                                           "present (1 layer, 4.2 GB); nothing pulled")


def test_a_node_that_had_the_image_pulled_nothing_and_says_which() -> None:
    had = transfer.Pulled((), (("b" * 12, BASE.size), ("a" * 12, CODE.size)))
    assert had.line("ssh://spark-2", image=DIGEST) == (
        "deploy: ssh://spark-2: sha256:dddddddddddd already present (2 layers, 4.2 GB); "
        "nothing pulled")
    assert had.record()["pulled"] == {"layers": 0, "bytes": 0}
