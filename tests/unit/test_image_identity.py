"""Which identity makes an engine's image the signed release: its manifest digest, or the
config digest and DiffIDs the signed manifest names; each mismatch in one line, exit 7."""

from __future__ import annotations

import pytest

from sparkbake.attest.image_identity import HeldImage, SignedImage, identify, identity_line
from sparkbake.errors import VerificationError

MANIFEST, CONFIG, INDEX, REWRITTEN = (f"sha256:{c * 64}" for c in "mcir")
LAYERS = (f"sha256:{'1' * 64}", f"sha256:{'2' * 64}")
SIGNED = SignedImage(f"reg/app@{MANIFEST}", MANIFEST, CONFIG, LAYERS)
WHERE = "node ssh://spark-1: reg/app:1.0"


def test_pulled_by_the_signed_digest_is_the_manifest_identity() -> None:
    held = HeldImage(CONFIG, (MANIFEST,), LAYERS)
    assert identify(held, SIGNED, WHERE) == "manifest digest"
    assert identity_line("manifest digest", SIGNED, held) == \
        f"by its manifest digest {MANIFEST[:19]}"


def test_an_engine_keyed_by_manifest_holds_it_by_the_signed_digest() -> None:
    # the containerd image store: the image's ID is its manifest's digest
    assert identify(HeldImage(MANIFEST, (), LAYERS), SIGNED, WHERE) == "manifest digest"


def test_a_platform_of_a_signed_index_pulled_by_the_index_digest() -> None:
    platform = SignedImage(f"reg/app@{MANIFEST}", MANIFEST, CONFIG, LAYERS, INDEX)
    held = HeldImage(CONFIG, (INDEX,), LAYERS)
    assert identify(held, platform, WHERE) == "manifest digest"
    assert identity_line("manifest digest", platform, held) == \
        f"by its manifest digest {INDEX[:19]}"


def test_a_rewritten_manifest_is_the_config_identity_and_says_so() -> None:
    held = HeldImage(CONFIG, (REWRITTEN,), LAYERS)
    assert identify(held, SIGNED, WHERE) == "config digest and DiffIDs"
    assert identity_line("config digest and DiffIDs", SIGNED, held) == \
        f"by its config digest {CONFIG[:19]} and 2 layer DiffIDs (its manifest was " \
        f"rewritten: held as {REWRITTEN[:19]})"


def test_a_loaded_image_has_no_manifest_digest() -> None:
    held = HeldImage(CONFIG, (), LAYERS)
    assert identity_line(identify(held, SIGNED, WHERE), SIGNED, held).endswith(
        "(its manifest was rewritten: held as no manifest digest)")


def refused(held: HeldImage) -> str:
    with pytest.raises(VerificationError) as caught:
        identify(held, SIGNED, WHERE)
    assert caught.value.exit_code == 7
    assert caught.value.remedy == "do not run it: it is not the signed release; deploy the " \
        "release to the node again"
    return caught.value.message


def test_one_changed_layer_is_named() -> None:
    changed = (LAYERS[0], f"sha256:{'9' * 64}")
    assert refused(HeldImage(REWRITTEN, (REWRITTEN,), changed)) == \
        f"{WHERE}: layer 2 of 2 has DiffID sha256:999999999999 where the signed " \
        f"reg/app@{MANIFEST} has sha256:222222222222"


def test_a_layer_more_or_less_is_counted() -> None:
    assert refused(HeldImage(REWRITTEN, (), (*LAYERS, LAYERS[0]))) == \
        f"{WHERE}: 3 layers where the signed reg/app@{MANIFEST} has 2"


def test_the_signed_digest_with_other_layers_is_refused() -> None:
    # an engine can hold no such image; the DiffIDs are checked whatever the digest says
    refused(HeldImage(CONFIG, (MANIFEST,), LAYERS[:1]))


def test_the_same_layers_under_another_config_are_refused() -> None:
    assert refused(HeldImage(REWRITTEN, (REWRITTEN,), LAYERS)) == \
        f"{WHERE}: its config {REWRITTEN[:19]} is not {CONFIG[:19]}, the one " \
        f"reg/app@{MANIFEST} names (the same layers, another config: env, entrypoint or " \
        "labels)"


def test_held_image_from_the_engine_attributes() -> None:
    attrs = {"Id": CONFIG, "RepoDigests": [f"relay/app@{REWRITTEN}", "odd"],
             "RootFS": {"Type": "layers", "Layers": list(LAYERS)}}
    assert HeldImage.of_attrs(attrs) == HeldImage(CONFIG, (REWRITTEN,), LAYERS)
    assert HeldImage.of_attrs({"Id": CONFIG}) == HeldImage(CONFIG, (), ())
