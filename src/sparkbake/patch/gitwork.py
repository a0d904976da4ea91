"""Git work trees for the patch stage: hermetic, deterministic, every command echoed.

The pristine tree of an upstream is committed once into `upstream.git` beside it (fixed
identity, fixed date: the same commit id on every machine); patched trees are local clones
of it, so the upstream's blobs are there for three-way merges and nothing is hashed twice.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from sparkbake.console.display import Console
from sparkbake.console.tools import run
from sparkbake.errors import EngineError, FatalError
from sparkbake.files import atomic_dir

__all__ = ["UPSTREAM_TAG", "Author", "Repo", "upstream_repo", "work_tree"]

UPSTREAM_TAG = "sparkbake-upstream"
EPOCH = "1970-01-01T00:00:00Z"
BRANCH = "main"
# No system or user git config: the same commands give the same bytes on every machine.
HERMETIC = {
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_COMMITTER_NAME": "sparkbake", "GIT_COMMITTER_EMAIL": "sparkbake@localhost",
    "GIT_COMMITTER_DATE": EPOCH, "GIT_AUTHOR_DATE": EPOCH,
    "GIT_AUTHOR_NAME": "sparkbake", "GIT_AUTHOR_EMAIL": "sparkbake@localhost",
    "LC_ALL": "C",
}
# In-tree .gitattributes must not rewrite files on their way in or out (eol, filters).
ATTRIBUTES = "* -text -eol -filter -ident -working-tree-encoding\n"


@dataclass(frozen=True)
class Author:
    name: str = "sparkbake"
    email: str = "sparkbake@localhost"


@dataclass(frozen=True)
class Repo:
    """A git repository with its work tree; git_dir may live outside the tree."""

    tree: Path
    git_dir: Path
    console: Console = field(compare=False)  # where its commands and their output go

    def git(self, *args: str | Path, check: bool = True,
            error: type[FatalError] = EngineError) -> subprocess.CompletedProcess[str]:
        return run(self.console, ["git", *self._where(), *args], error=error, what=f"git {args[0]}",
                   cwd=self.tree, capture=True, check=check, env=HERMETIC)

    def _where(self) -> list[str]:
        """Nothing for a usual `.git` (commands run in the tree), else the git dir."""
        if self.git_dir == self.tree / ".git":
            return []
        return [f"--git-dir={self.git_dir}", "--work-tree=."]

    def out(self, *args: str | Path) -> str:
        return self.git(*args).stdout.strip()

    def commit(self, message: str, author: Author = Author(), *options: str) -> None:
        """Commit the index as is, with message verbatim and a fixed date."""
        env = {**HERMETIC, "GIT_AUTHOR_NAME": author.name, "GIT_AUTHOR_EMAIL": author.email}
        cmd = ["git", *self._where(), *options, "commit", "-q", "--allow-empty", "--no-verify",
               "--cleanup=verbatim", "-F", "-"]
        self.console.detail("+ " + shlex.join(cmd) + " <<< " + shlex.quote(message.splitlines()[0]))
        done = subprocess.run(cmd, input=message, text=True, capture_output=True, env=env,
                              cwd=self.tree, check=False)
        if done.returncode != 0:
            raise EngineError(f"git commit failed: {done.stderr.strip()}",
                              self.console.output_hint())

    def mailinfo(self, patch: Path, scratch: Path) -> tuple[dict[str, str], str]:
        """`git mailinfo -b` of a patch file: its header fields and its message body."""
        cmd = ["git", "mailinfo", "-b", str(scratch / "msg"), str(scratch / "diff")]
        self.console.detail("+ " + shlex.join(cmd) + " < " + shlex.quote(str(patch)))
        with patch.open("rb") as handle:
            done = subprocess.run(cmd, stdin=handle, capture_output=True, env=HERMETIC,
                                  check=False)
        info = dict(line.split(": ", 1) for line in
                    done.stdout.decode(errors="replace").splitlines() if ": " in line)
        body = (scratch / "msg").read_text(errors="replace") if done.returncode == 0 else ""
        return info, body

    def attributes(self) -> None:
        info = self.git_dir / "info"
        info.mkdir(exist_ok=True)
        (info / "attributes").write_text(ATTRIBUTES)


def upstream_repo(pristine: Path, message: str, *, console: Console) -> Path:
    """`upstream.git` beside the pristine tree: the tree as one commit, tagged; made once."""
    final = pristine.parent / "upstream.git"
    if (final / "HEAD").is_file():
        return final
    with atomic_dir(final) as tmp:
        repo = Repo(pristine, tmp, console)
        run(console, ["git", "init", "-q", "--bare", f"--initial-branch={BRANCH}", tmp],
            error=EngineError, what="git init", env=HERMETIC, capture=True)
        repo.attributes()
        index = tmp / "index"
        repo.git("-c", "core.bare=false", "add", "-A", "-f", ".")  # ignored files too
        repo.commit(message, Author(), "-c", "core.bare=false")
        repo.git("tag", UPSTREAM_TAG)
        index.unlink()
    return final


def work_tree(upstream: Path, files: Path, dest: Path, sparse: list[str] | None = None, *,
              console: Console) -> Repo:
    """A clone of upstream (hardlinked objects) at dest, its files copied from `files`.

    With `sparse`, only those paths are written (git sparse-checkout): enough to try a
    series of patches without copying the whole tree.
    """
    run(console, ["git", "clone", "-q", "--no-checkout", upstream, dest],
        error=EngineError, what="git clone", env=HERMETIC, capture=True)
    repo = Repo(dest, dest / ".git", console)
    repo.git("remote", "remove", "origin")
    repo.attributes()
    if sparse is not None:
        repo.git("sparse-checkout", "set", "--no-cone", "--", *[_pattern(p) for p in sparse])
        repo.git("checkout", "-q", BRANCH)
        return repo
    run(console, ["cp", "-a", f"{files}/.", dest], error=EngineError, what="copying the tree")
    repo.git("reset", "-q")  # index from HEAD, stat data from the copied files
    return repo


def _pattern(path: str) -> str:
    """A sparse-checkout pattern matching exactly this path."""
    escaped = "".join("\\" + c if c in "*?[]!#\\ " else c for c in path)
    return "/" + escaped
