"""The one tree of fatal errors. Each class owns its exit code; each message names a remedy."""

from __future__ import annotations

import errno

__all__ = [
    "BakeError",
    "BuildError",
    "ConfigError",
    "DamagedRecord",
    "EngineError",
    "FatalError",
    "Interrupted",
    "PatchError",
    "PatchTestError",
    "PublishError",
    "ReproducibilityError",
    "SmokeError",
    "UsageError",
    "VerificationError",
    "damaged_record",
    "machine_error",
]


class FatalError(Exception):
    """An error that ends the command: printed in one or two lines, never as a traceback."""

    exit_code = 1

    def __init__(self, message: str, remedy: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.remedy = remedy

    def __str__(self) -> str:
        return f"{self.message}\n  -> {self.remedy}" if self.remedy else self.message


class ConfigError(FatalError):
    """versions.yaml, a series folder or an env file is wrong."""

    exit_code = 2


class UsageError(FatalError):
    """The command line is wrong."""

    exit_code = 2


class PatchError(FatalError):
    """A patch does not apply."""

    exit_code = 3


class BuildError(FatalError):
    """A wheel or kernel build failed, or a kernel lacks code for the target arch."""

    exit_code = 4


class BakeError(FatalError):
    """The runtime image could not be made."""

    exit_code = 5


class SmokeError(FatalError):
    """A smoke check failed."""

    exit_code = 6


class PatchTestError(FatalError):
    """A series' own tests failed against the patched tree (patch-tests)."""

    exit_code = 6


class PublishError(FatalError):
    """Pushing or verifying an image in a registry failed."""

    exit_code = 7


class VerificationError(FatalError):
    """A published image fails its check: no signature or a bad one, a statement about
    another digest, provenance that is not the tag's."""

    exit_code = 7


class EngineError(FatalError):
    """The environment lacks something: no Docker engine, a missing tool."""

    exit_code = 8


class Interrupted(FatalError):
    """Ctrl-C stopped a command that leaves things running (up's containers): the message
    names them, the remedy what removes them. The status of a process ended by SIGINT."""

    exit_code = 130


class ReproducibilityError(FatalError):
    """A rebuild of a tag gave another image than the one it is compared with."""

    exit_code = 9


def machine_error(exc: OSError) -> EngineError | None:
    """The user's machine, not sparkbake, refused a file operation: a full or read-only disk,
    a file without permission. None for any other OSError."""
    where = f"{exc.filename}: " if exc.filename else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return EngineError(f"{where}no space left on its disk ({exc.strerror})",
                           "free space (`sparkbake gc`, `sparkbake clean TAG`) and rerun; "
                           "finished stages stay cached")
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return EngineError(f"{where}cannot be written ({exc.strerror})",
                           "make it writable for this user, or give --config a project whose "
                           "build/ and wheels/ you can write")
    return None


class DamagedRecord(EngineError, ValueError):
    """A record sparkbake wrote is not what it wrote (truncated by a full disk, a killed
    copy, an edit). A ValueError too: readers that treat an unreadable record as none go on."""


def damaged_record(path: object, exc: ValueError) -> DamagedRecord:
    return DamagedRecord(f"{path}: a damaged record, not valid JSON ({exc}); truncated by a "
                         "full disk or an interrupted copy?",
                         "remove it and rerun: what it records is made again")
