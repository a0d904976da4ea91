"""node-files: one .env per node of a deployment, written from its node list (--nodes-file,
node_list) or its addresses (--nodes A,B,...).

The first node is the head (rank 0), the others the workers in order. Each file is the
template (the tag's smoke suite's rank-0 sample, or --from FILE) with the settings that say
which node it is set in place: NODE_RANK, VLLM_HOST_IP, MASTER_ADDR (the head's address),
NNODES and TP_SIZE (one GPU a node), IMAGE (the tag's) and the site values the list gives:
FABRIC_IFACE, IB_HCA, IB_GID_INDEX, MODEL_HOST_PATH with MODEL (the snapshot, for a Hugging
Face cache folder), CACHE_HOST_PATH, FABRIC_TOPOLOGY and, for a ring of more than two nodes,
the NCCL settings it needs. Everything else stays the template's, comments included, so the
files differ only where the nodes do; they are then checked together (cluster_files), and
files that fail are taken back.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath

from sparkbake.config.versions import Tag
from sparkbake.errors import ConfigError, UsageError
from sparkbake.files import atomic_write
from sparkbake.nodes import cluster_files, envfile, preflight
from sparkbake.nodes.node_list import INTERFACE, Layout, SiteNode, canonical_address
from sparkbake.nodes.sample_envs import Sample
from sparkbake.nodes.serve_checks import MODEL_MOUNT

__all__ = ["file_name", "model_settings", "parse_addresses", "prepare", "render", "settings",
           "template_of", "write", "write_checked"]

# a ring of more than two nodes without a switch: NCCL's own algorithm choice timed out its
# queue pairs; these four made it run (the preflight's ring-without-nccl-settings)
RING_NCCL = {"NCCL_ALGO": "Ring", "NCCL_NET_PLUGIN": "none",
             "NCCL_IB_SUBNET_AWARE_ROUTING": "1", "NCCL_IB_MERGE_NICS": "0"}
# a shell word of the line, quoted parts whole; one that starts with # starts the comment
WORD = re.compile(r"""(?:"(?:[^"\\]|\\.)*"?|'[^']*'?|\\.?|[^\s'"\\])+""")


def settings(layout: Layout, rank: int, image: str) -> dict[str, str]:
    """What makes node `rank`'s file its own."""
    node, count = layout.nodes[rank], str(len(layout.nodes))
    values = {"IMAGE": image, "NNODES": count, "TP_SIZE": count, "NODE_RANK": str(rank),
              "MASTER_ADDR": layout.nodes[0].address, "VLLM_HOST_IP": node.address}
    site = {"FABRIC_IFACE": node.iface, "IB_HCA": node.ib_hca,
            "IB_GID_INDEX": node.ib_gid_index, "CACHE_HOST_PATH": node.cache_host_path,
            "FABRIC_TOPOLOGY": layout.topology}
    values |= {name: value for name, value in site.items() if value is not None}
    if node.model_host_path is not None:
        values |= model_settings(node)
    return values | (RING_NCCL if layout.topology == "ring" and len(layout.nodes) > 2 else {})


def model_settings(node: SiteNode) -> dict[str, str]:
    """MODEL_HOST_PATH and MODEL, the container's path to the model: the mount itself, or for
    a Hugging Face cache folder (models--ORG--NAME) the snapshot under it, which must be
    named (.../snapshots/REV) or be readable here."""
    host = PurePosixPath(str(node.model_host_path))
    if host.parent.name == "snapshots" and host.parent.parent.name.startswith("models--"):
        return {"MODEL_HOST_PATH": str(host.parent.parent),  # the blobs its links point to
                "MODEL": f"{MODEL_MOUNT}/snapshots/{host.name}"}
    snapshot = preflight.hf_snapshot(Path(host)) if Path(host).is_dir() else None
    if snapshot is not None:
        return {"MODEL_HOST_PATH": str(host), "MODEL": f"{MODEL_MOUNT}/snapshots/{snapshot.name}"}
    if host.name.startswith("models--"):
        raise ConfigError(f"{node.where}: model_host_path {host} is a Hugging Face cache folder "
                          "whose snapshot cannot be read here", f"name it: {host}/snapshots/REV "
                          "(MODEL becomes the snapshot's path in the container)")
    return {"MODEL_HOST_PATH": str(host), "MODEL": MODEL_MOUNT}


def parse_addresses(text: str, interface: str | None) -> Layout:
    """--nodes A,B,...: IP addresses, head first, each host once; UsageError (exit 2)."""
    given = [item.strip() for item in text.split(",") if item.strip()]
    if not given:
        raise UsageError("--nodes names no address", "e.g. --nodes 192.168.100.11,192.168.100.12")
    if interface is not None and not INTERFACE.fullmatch(interface):
        raise UsageError(f"--iface {interface!r} is not a network interface name",
                         "e.g. --iface enp1s0f0np0 (ip -br link lists them)")
    addresses: dict[str, str] = {}  # canonical -> as given
    for item in given:
        try:
            address = canonical_address(item)
        except ValueError as exc:
            raise UsageError(f"--nodes: {exc}", "give each node's fabric address, the head's "
                             "first") from None
        if address in addresses:
            same = "" if addresses[address] == item else f" (as {addresses[address]})"
            raise UsageError(f"--nodes names {item} more than once{same}",
                             "each node has its own fabric address")
        addresses[address] = item
    return Layout(tuple(SiteNode(address, interface) for address in addresses))


def file_name(rank: int) -> str:
    return "head.env" if rank == 0 else f"worker-{rank}.env"


def template_of(tag: Tag, samples: Sequence[Sample]) -> Path:
    """The suite's accept sample of rank 0 (the head's), the one the files are made from."""
    for sample in samples:
        if cluster_files.rank(sample.env) == "0" and sample.env.get("MODEL"):
            return sample.path
    raise ConfigError(f"tag {tag.name}: its smoke suite {tag.smoke!r} has no head's sample "
                      ".env to start from", "give one with --from FILE")


def render(template: str, settings: dict[str, str], header: str) -> str:
    """The template with each setting's value put in place (its last assignment, as the
    shell reads it), the ones it lacks added at the end, under header."""
    lines = template.splitlines()
    missing = dict(settings)
    for index in reversed(range(len(lines))):
        for name in list(missing):
            replaced = _assign(lines[index], name, missing[name])
            if replaced is not None:
                lines[index] = replaced
                del missing[name]
    added = [f"{name}={shlex.quote(value)}" for name, value in missing.items()]
    return "\n".join([header, *lines, *added]) + "\n"


def _assign(line: str, name: str, value: str) -> str | None:
    """line with name's (last) assignment given value, or None when line assigns no name: a
    word of its comment (`# was NAME=X`) or inside quotes assigns nothing."""
    assigning = [word for word in _code_words(line) if word.group().startswith(f"{name}=")]
    if not assigning:
        return None
    last = assigning[-1]
    return line[:last.start() + len(name) + 1] + shlex.quote(value) + line[last.end():]


def _code_words(line: str) -> list[re.Match[str]]:
    """The shell words of the line before its comment (the first word that starts with #),
    quoted parts taken whole."""
    words = []
    for word in WORD.finditer(line):
        if word.group().startswith("#"):
            break
        words.append(word)
    return words


def prepare(tag: Tag, layout: Layout, template: Path, out: Path, force: bool
            ) -> dict[Path, str]:
    """Each node's file and its text; nothing is written. ConfigError (exit 2) when one is
    there already (unless force), the template cannot be read, or a site value is wrong."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a folder",
                         "name the folder to write head.env, worker-1.env, ... in")
    paths = [out / file_name(rank) for rank in range(len(layout.nodes))]
    there = [str(p) for p in paths if p.exists()]
    if there and not force:
        raise ConfigError(f"{', '.join(there)} already exist(s)",
                          "choose another --out, or pass --force to write over them")
    text = _template_text(template)
    envfile.parse(text, template)  # its errors name the template's line
    return {path: render(text, settings(layout, rank, tag.image_ref),
                         f"# Node {rank} of {len(paths)} ({'head' if rank == 0 else 'worker'}) "
                         f"of {tag.name}: `sparkbake node-files` from {template.name}.")
            for rank, path in enumerate(paths)}


def _template_text(template: Path) -> str:
    try:
        return template.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {template}: {exc.strerror or exc}",
                          "give a node's .env with --from") from None
    except UnicodeDecodeError as exc:
        line = exc.object[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{template}:{line}: not UTF-8 text (byte {exc.object[exc.start]:#04x})",
                          "save the template as UTF-8 (iconv -f latin1 -t utf-8)") from None


def write(tag: Tag, layout: Layout, template: Path, out: Path, force: bool) -> list[Path]:
    """One file per node in out; an existing file is kept unless force (ConfigError)."""
    return _put(prepare(tag, layout, template, out, force))


def _put(contents: dict[Path, str]) -> list[Path]:
    for path, text in contents.items():
        try:
            atomic_write(path, text)
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror or exc}",
                              "choose an --out folder you can write to") from None
    return list(contents)


def write_checked(tag: Tag, layout: Layout, template: Path, out: Path, force: bool,
                  check: Callable[[list[Path]], int]) -> int:
    """write, then check the files; when the check (or a write) fails, the files are taken
    back, the ones written over put back as they were, and the error says so."""
    contents = prepare(tag, layout, template, out, force)
    before = {path: path.read_bytes() for path in contents if path.is_file()}
    fresh = not out.exists()
    try:
        return check(_put(contents))
    except ConfigError as exc:
        for path in contents:
            _restore(path, before.get(path))
        if fresh and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        kept = " (the ones written over are as they were)" if before else ""
        raise ConfigError(f"{exc.message}; node-files took back the {len(contents)} file(s) "
                          f"it wrote in {out}{kept}", "fix the node list or the template (--from) "
                          "as the lines above say, and run node-files again") from None


def _restore(path: Path, data: bytes | None) -> None:
    if data is not None:
        atomic_write(path, data)
    elif path.is_file():  # False too where a write never made it
        path.unlink()
