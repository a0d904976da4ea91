"""--gpu of smoke and deploy: the GPU checks where the engine has a GPU runtime (auto),
always, failing without one (require), or never (skip). Apart from the smoke record, whose
module every command's parser would otherwise import."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["GPU_MODES", "GpuMode"]

GpuMode = Literal["auto", "require", "skip"]
GPU_MODES: tuple[GpuMode, ...] = get_args(GpuMode)
