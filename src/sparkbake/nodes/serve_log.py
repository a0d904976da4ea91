"""What a serve container's log says went wrong: the last error line that vLLM, Python or
the image's preflight wrote before the container exited, so that a server that never
became healthy fails with its own reason instead of a pointer to the log."""

from __future__ import annotations

import re

__all__ = ["error_line"]

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# the process vLLM prefixes its lines with: `(APIServer pid=1) `, `(EngineCore_DP0 pid=211) `
PROCESS = re.compile(r"^\s*\([\w.-]+ pid=\d+\)\s?")
# pydantic's wording of a ValueError raised while a vLLM config is built (ModelConfig),
# without its echo of every argument
VALUE_ERROR = re.compile(r"^\s*(Value error, .*?)(?:\s+\[type=.*)?$")
# the last line of a traceback: `ValueError: ...`, `pkg.module.SomeError: ...`, `SystemExit`
EXCEPTION = re.compile(r"^\s*(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit)\b(?::.*)?$")
# vLLM's log format: `(APIServer pid=1) ERROR 12-05 09:40:01 [file.py:12] message`
LOGGED = re.compile(r"\b(?:ERROR|CRITICAL)\b(?:\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)?"
                    r"(?:\s+\[[^\]]*\])?\s+(.*)$")
# argparse's `vllm serve: error: ...` and the preflight's `sparkbake preflight: error: ...`
USAGE = re.compile(r"^[\w .-]+: error: ")
# a line that sends the reader further up (the API server after its engine core died)
NOT_THE_CAUSE = ("See root cause above", "Traceback (most recent call last)")
LONGEST = 400  # characters of the line kept: a config error may echo much more


def error_line(log: str) -> str | None:
    """The last error line of a serve log, cut to LONGEST characters; None when the log has
    none (the container was killed, or exited quietly)."""
    for line in reversed(ANSI.sub("", log).splitlines()):
        found = _error(line)
        if found and not any(phrase in found for phrase in NOT_THE_CAUSE):
            return found if len(found) <= LONGEST else found[:LONGEST - 3] + "..."
    return None


def _error(line: str) -> str | None:
    """The error a line states, without vLLM's log prefix; None when it states none."""
    line = PROCESS.sub("", line)
    logged = LOGGED.search(line)
    if logged and logged.group(1).strip():
        message = logged.group(1).strip()
        return _stated(message) or message
    return _stated(line)


def _stated(text: str) -> str | None:
    """The text when it is an error of Python, pydantic, argparse or the preflight."""
    value_error = VALUE_ERROR.match(text)
    if value_error:
        return value_error.group(1)
    return text.strip() if EXCEPTION.match(text) or USAGE.match(text) else None
