"""What a published image says about itself: its SBOM, its provenance and smoke statements,
attached to its digest in the registry, signed, and checked by anyone with the public key."""
