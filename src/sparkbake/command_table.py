"""Every command, declared once: its options, its one-sentence help, its handler (imported
only when the command runs) and how it takes a tag. The CLI's parser (__main__), the nox
sessions (noxfile.py) and the command list of docs/reference/cli.md are made from it, so it
imports nothing that a bare Python lacks."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sparkbake.core.gpu_modes import GPU_MODES

__all__ = ["COMMANDS", "DEFAULT_CACHE_SIZE", "Command", "Option", "TagUse", "by_name",
           "seconds", "shm_size", "tcp_port"]

# How a command takes its tag: a positional TAG (argument), one it can go without
# (optional), `--tag TAG` (option), or none; a tag's suffix names it too.
TagUse = Literal["argument", "optional", "option", "none"]
TAG_HELP = "tag name or its suffix, e.g. 3.73-vision"
DEFAULT_CACHE_SIZE = "20G"  # gc --max-cache-size


def tcp_port(text: str) -> int:
    """A TCP port, 1 to 65535; else argparse's usage error (exit 2) with this message."""
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1 to 65535)")
    return int(text)


def server_count(text: str) -> int:
    """A count of compile farm servers, 1 to 64; else argparse's usage error (exit 2)."""
    if not text.isdigit() or not 0 < int(text) <= 64:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count of servers (1 to 64)")
    return int(text)


def seconds(text: str) -> float:
    """A time in seconds above 0; else argparse's usage error (exit 2) before anything runs."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a time in seconds above 0")
    return value


def shm_size(text: str) -> str:
    """A size as docker takes it: digits and b, k, m or g; else argparse's usage error."""
    if not re.fullmatch(r"[1-9][0-9]*[bkmg]?", text.lower()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 2g, 512m)")
    return text.lower()


@dataclass(frozen=True)
class Option:
    """One option or positional argument (a name without dashes), as argparse takes it."""

    name: str
    help: str
    type: Callable[[str], object] | None = None  # None: text, or a flag
    flag: bool = False  # present or not (store_true)
    dest: str | None = None
    nargs: int | Literal["?", "+"] | None = None
    choices: tuple[str, ...] | None = None
    default: object = None
    metavar: str | None = None
    required: bool = False

    @property
    def usage(self) -> str | None:
        """How a session's line shows it: positionals and required options; else None."""
        if not self.name.startswith("-"):
            shown = "|".join(self.choices) if self.choices else self.metavar or self.name.upper()
            if self.nargs in ("?", "+"):
                return f"[{shown}]" if self.nargs == "?" else f"{shown} ..."
            return " ".join([shown] * (self.nargs if isinstance(self.nargs, int) else 1))
        return f"{self.name} {self.metavar or self.name.lstrip('-').upper()}" \
            if self.required else None


@dataclass(frozen=True)
class Command:
    name: str
    help: str  # one sentence, no full stop
    handler: str  # "module:function": (args, run) or, with a tag, (args, run, tag)
    options: tuple[Option, ...] = ()
    tag: TagUse = "none"
    without_tag: tuple[str, str] | None = None  # an optional tag's absence: (handler, what)
    on_release: str | None = None  # a release's tags at once (else one after another)

    @property
    def usage(self) -> str:
        """The arguments it needs, as a nox session's description shows them."""
        tag = {"argument": ["TAG"], "optional": ["[TAG]"], "option": ["--tag TAG"],
               "none": []}[self.tag]
        shown = [usage for option in self.options if (usage := option.usage)]
        return " ".join(shown[:1] + tag + shown[1:]) if self.tag == "option" \
            else " ".join(tag + shown)


def _handler(name: str) -> str:
    """A handler of pipeline/handlers.py by its function's name."""
    return f"sparkbake.pipeline.handlers:{name}"


def _cluster(name: str) -> str:
    return f"sparkbake.nodes.cluster_commands:{name}"


JSON = Option("--json", "print the result and each stage's state as JSON on stdout", flag=True)
LOCKED = Option("--locked", "refuse a missing lock instead of making it (as CI does)", flag=True)
SKIP_APPLIED = Option("--skip-applied", "skip patches already in upstream (recorded) instead "
                      "of stopping", flag=True)
DRY_RUN = Option("--dry-run", "print what would be removed and its size; remove nothing",
                 flag=True)
UPSTREAM = Option("--upstream", "write the series' variant for this upstream, "
                  "patches/SERIES/UPSTREAM_KEY/", metavar="UPSTREAM_KEY")
SERIES = Option("series", "the series to write, patches/SERIES/")
# up's and check-nodes': every node's file, and where each one's engine is
NODES_AND_ENGINES = (
    Option("env_files", "every node's .env, the head's among them", type=Path, nargs="+",
           metavar="NODE.env"),
    Option("--hosts", "each file's Docker engine, in the files' order (default: all on the "
           "local engine)", metavar="URL,URL"),
    Option("--nodes-file", "instead of --hosts: each rank's engine from the node list "
           "node-files read", type=Path, metavar="NODES.yaml"),
)


def json_of(what: str) -> Option:
    return Option("--json", f"print {what} as JSON on stdout", flag=True)


BUILD = (  # plan, lock, and the commands that build
    Command("plan", "each stage's key and state, and what changed since the last build; "
            "exit 2 when a stage is blocked", _handler("plan"), tag="argument",
            options=(Option("--json", "print the plan as JSON", flag=True),)),
    Command("lock", "resolve the tag's builder and runtime locks (and its CMake sources) with "
            "hashes", _handler("lock"), tag="argument", options=(
                Option("--patch-tests", "lock the venv of patch-tests for this host instead",
                       flag=True),)),
    Command("fetch", "fetch the pinned upstream tree, remote patches and locked third-party "
            "sources", _handler("stages"), tag="argument", options=(JSON,)),
    Command("patch", "apply the tag's series to the pristine tree", _handler("stages"),
            tag="argument", options=(
                SKIP_APPLIED,
                Option("--keep", "on a conflict, keep the three-way conflict markers in the "
                       "tree", flag=True),
                Option("--checkout", "also write a git work tree: upstream commit + one per "
                       "patch", type=Path, metavar="DIR"),
                JSON)),
    Command("patch-tests", "run the tests the series add or change, on the CPU",
            _handler("patch_tests"), tag="argument"),
    Command("wheels", "build the wheels (or assemble them around cached kernels) and check "
            "their SASS", _handler("stages"), tag="argument",
            options=(SKIP_APPLIED, JSON, LOCKED)),
    Command("build-image", "fetch, patch, wheels and bake the tag's image", _handler("stages"),
            tag="optional", without_tag=(_handler("tags_to_build"), "the tags, and exit 2"),
            options=(SKIP_APPLIED, JSON,
                     Option("--metadata-file", "also write the result as JSON to FILE (as "
                            "buildx does)", type=Path, metavar="FILE"),
                     LOCKED)),
)

IMAGE = (  # the commands on the tag's image
    Command("smoke", "check the tag's image in the engine: manifest, imports, kernels, "
            "entrypoint, GPU", _handler("smoke"), tag="optional",
            without_tag=(_handler("smoke_current"),
                         "every tag whose image in the engine is current"),
            options=(
                Option("--gpu", "GPU checks: run if a GPU is present (auto), fail without",
                       choices=GPU_MODES, default="auto"),
                Option("--model", "serve this model folder (mounted at /model) and probe the "
                       "server", type=Path, metavar="PATH"),
                Option("--serve-env", "the serve checks' node .env instead of the suite's "
                       "serve.env", type=Path, metavar="FILE"),
                Option("--serve-timeout", "how long the server may take to answer /health "
                       "(default 1800)", type=float, default=1800.0, metavar="SECONDS"),
                json_of("the smoke record"))),
    Command("device-bundle", "the image cut down to what its smoke checker uses, with runc: "
            "the smoke on a GPU machine without a container engine", _handler("device_bundle"),
            tag="argument", options=(
                Option("--out", "write the bundle here (default: build/smoke/TAG-device.tar.xz)",
                       type=Path, metavar="FILE"),)),
    Command("publish", "push the smoked image to its registry and record what went into the "
            "digest", _handler("publish"), tag="argument", on_release=_handler("publish_release"),
            options=(
                Option("--registry", "HOST:PORT to push to instead of the tag's",
                       metavar="HOST:PORT"),
                Option("--force", "overwrite a remote tag that points at another digest",
                       flag=True),
                Option("--skip-smoke", "publish without a passing smoke record (recorded)",
                       flag=True),
                Option("--sign-key", "sign the digest with this private key (`keys "
                       "generate`); default: SPARKBAKE_SIGNING_KEY, else unsigned", type=Path,
                       metavar="PATH"),
                json_of("the release record"))),
    Command("verify", "rebuild the tag from clean and compare it with the baked image",
            _handler("verify"), tag="argument", options=(
                Option("--against", "compare with this manifest digest instead of build/oci's",
                       metavar="DIGEST"),
                LOCKED)),
    Command("deploy", "pull the tag's release onto each node's engine and smoke it there",
            _handler("deploy"), tag="argument", on_release=_handler("deploy_release"), options=(
                Option("--hosts", "the nodes' Docker hosts: ssh://[USER@]HOST, tcp://HOST:PORT, "
                       "unix:///PATH (a bare HOST means ssh://HOST)", metavar="URL,URL",
                       required=True),
                Option("--stream", "send the image from the local engine instead of pulling "
                       "it", flag=True),
                Option("--gpu", "GPU checks of the smoke run on each node", choices=GPU_MODES,
                       default="auto"),
                Option("--require-signature", "refuse, before any node runs anything, a "
                       "release whose digest this public key did not sign", type=Path,
                       metavar="PUB"),
                json_of("the deploy report"))),
    Command("registry", "the embedded local registry", _handler("registry"), options=(
        Option("action", "start it, stop the one started, or say whether it answers",
               choices=("start", "stop", "status")),
        Option("--port", "the port of 127.0.0.1 to start it on (default: 5000)", type=tcp_port,
               default=5000))),
    Command("compile-farm", "the compile farm the builder sends its compiles to (sccache-dist "
            "on loopback)", "sparkbake.nodes.farm_hosts:compile_farm", options=(
        Option("action", "start it, say what runs and what the scheduler counts, or end it all",
               choices=("up", "status", "down")),
        Option("--local", "up: a scheduler and N servers on this machine", type=server_count,
               metavar="N"),
        Option("--hosts", "up: a server on each node, as a systemd service over ssh "
               "(comma-separated ssh hosts), each reached through one SSH tunnel",
               metavar="A,B"),
        Option("--nodes-file", "up: instead of --hosts, the nodes of a node list (their "
               "engines' ssh hosts, else their addresses)", type=Path,
               metavar="NODES.yaml"))),
    Command("check-env", "preflight a node's .env for a tag (several: the nodes of one "
            "deployment, also checked against each other)", _handler("check_env"),
            tag="option", options=(
                Option("env_files", "the node's .env file; several: every node's, the head's "
                       "among them", type=Path, nargs="+", metavar="NODE.env"),
                Option("--print", "also print the vllm serve command the image would run",
                       flag=True, dest="show"),
                Option("--host-root", "the root folder whose proc/ holds the host's sysctls, "
                       "kernel command line, meminfo and release (default: /)",
                       type=Path, default=Path("/"), metavar="DIR"),
                json_of("each file's findings and memory figures"),
                Option("--ask-image", "also ask vLLM's planner in the tag's image on the "
                       "engine (about a minute natively, much more under emulation)",
                       flag=True))),
)

CLUSTER = (  # the commands of a deployment's nodes
    Command("node-files", "write one .env per node from the node list (or the nodes' "
            "addresses), and check them together", _cluster("write_node_files"),
            tag="argument", options=(
                Option("--nodes-file", "the node list: each node's address, interface, RDMA "
                       "device, model and cache folders and engine, the head first; the "
                       "topology", type=Path, metavar="NODES.yaml"),
                Option("--nodes", "instead of a node list: each node's fabric address, the "
                       "head's (rank 0) first", metavar="ADDR,ADDR"),
                Option("--iface", "with --nodes: the fabric's network interface",
                       metavar="NAME"),
                Option("--from", "the .env to start from (default: the tag's smoke suite's "
                       "head)", type=Path, dest="template", metavar="FILE"),
                Option("--out", "where to write head.env, worker-1.env, ...", type=Path,
                       metavar="DIR", required=True),
                Option("--force", "write over files already there", flag=True))),
    Command("check-nodes", "check each node through its engine: the memory floor and its "
            "sysctl.d file, earlyoom, the kernel's KHO, the GPU runtime, the model's shards, "
            "the JIT cache's disk, the RDMA device and GID",
            "sparkbake.nodes.node_check:check_nodes", tag="argument", options=(
                *NODES_AND_ENGINES,
                Option("--image", "probe with this image (default: the tag's, which the nodes "
                       "run)", metavar="REF"),
                Option("--apply", "write the memory floor on a node that lacks it (a "
                       "privileged container); else print what to run there", flag=True))),
    Command("up", "bring the tag up on the nodes of its .env files: workers, then the head; "
            "serve checks and the KV-cache and acceptance readout", _cluster("up"),
            tag="argument", options=(
                *NODES_AND_ENGINES,
                Option("--image", "run this image (a release by digest) instead of the tag's",
                       metavar="REF"),
                Option("--timeout", "seconds for the head to answer /health (default: 1800)",
                       type=seconds, default=1800, metavar="S"),
                Option("--print", "print the commands that bring the nodes up by hand; start "
                       "nothing", flag=True, dest="show"),
                Option("--shm-size", "for nodes that share a host: each container's own "
                       "/dev/shm of this size (e.g. 2g) instead of the host's IPC",
                       type=shm_size, metavar="SIZE"),
                Option("--bench", "then the decode bench against the head (as `bench TAG` "
                       "with its defaults)", flag=True),
                Option("--require-signature", "refuse, before anything runs on a node, an "
                       "image that is not the tag's release signed by this public key (by its "
                       "manifest digest, or its config digest and layer DiffIDs)", type=Path,
                       metavar="PUB"))),
    Command("bench", "a short decode bench against the head of the tag's cluster with vLLM's "
            "own `vllm bench serve`: decode tokens per second, TTFT, the acceptance length",
            "sparkbake.nodes.bench_run:bench_command", tag="argument", options=(
                Option("--prompts", "requests of random tokens (default: 8)", type=int,
                       default=8, metavar="N"),
                Option("--input-len", "tokens of each prompt (default: 512)", type=int,
                       default=512, metavar="N"),
                Option("--output-len", "tokens each request generates, EOS ignored (default: "
                       "128)", type=int, default=128, metavar="N"),
                Option("--concurrency", "requests at a time (default: 1: one stream's decode "
                       "speed)", type=int, default=1, metavar="N"))),
    Command("down", "remove the containers up started, on every node", _cluster("down"),
            tag="argument", options=(
                Option("--node", "only this rank's container; the record stays for the others",
                       type=int, metavar="RANK"),
                Option("--hosts", "also look on these Docker engines for the tag's containers "
                       "(by label; without up's record: default the local engine)",
                       metavar="URL,URL"))),
    Command("status", "each node's container and the head's /health", _cluster("status"),
            tag="argument"),
    Command("logs", "the last lines of each node's engine log", _cluster("logs"),
            tag="argument", options=(
                Option("--rank", "only this node's log", type=int),
                Option("--tail", "lines of each log (default: 50)", type=int, default=50,
                       metavar="N"))),
)

HOUSEKEEPING = (
    Command("clean", "remove a tag's build trees, wheels and records (or, with --all, build/ "
            "and wheels/)", "sparkbake.housekeeping.tidy:clean_command", options=(
                Option("tag", "tag name or its suffix; keys other tags use stay", nargs="?"),
                Option("--all", "everything in build/ and wheels/ but release records and "
                       "locks", flag=True, dest="everything"),
                DRY_RUN)),
    Command("gc", "remove what no tag uses now: stale cache entries, leftovers, stale "
            "sparkbake images, old compile cache", "sparkbake.housekeeping.tidy:gc_command",
            options=(
                Option("--max-cache-size", "trim the compile cache and the bytecode cache to "
                       "SIZE each, oldest files first (default: "
                       f"{DEFAULT_CACHE_SIZE}; K, M, G, T: powers of 1000)",
                       default=DEFAULT_CACHE_SIZE, metavar="SIZE"),
                Option("--check", "also hash every cache entry (layer blobs, base layers, "
                       "wheels, records) and remove those that are not their digest's bytes",
                       flag=True),
                DRY_RUN)),
)

SERIES_TOOLS = (
    Command("patch-lint", "check every series folder and patch", _handler("patch_lint")),
    Command("export-series", "commits of a checkout -> a series", _handler("export_series"),
            options=(
                Option("work", "a `patch --checkout` tree", type=Path, metavar="DIR"),
                SERIES,
                Option("--range", "export these commits instead of the series' own",
                       dest="commits", metavar="A..B"),
                Option("--drop", "write the series without the patches the checkout has no "
                       "commit of (refused otherwise)", flag=True),
                UPSTREAM)),
    Command("import-series", "a commit range of a fork -> a series", _handler("import_series"),
            options=(
                Option("--from", "the fork to take the commits from: a git URL or a checkout",
                       dest="source", metavar="GIT_URL_OR_DIR", required=True),
                Option("--range", "the commits to import, oldest first, as git log takes them",
                       dest="commits", metavar="A..B", required=True),
                SERIES, UPSTREAM)),
    Command("rebase-check", "would the series apply to UPSTREAM?", _handler("rebase_check"),
            tag="argument", options=(
                Option("--to", "an upstream of versions.yaml", metavar="UPSTREAM_KEY",
                       required=True),)),
)

RELEASES = (
    Command("releases", "the published releases (build/releases)", _handler("releases"),
            options=(Option("--json", "print the index as JSON", flag=True),)),
    Command("diff", "what changed between two releases", _handler("diff"), options=(
        Option("tags", "two released tags (or suffixes)", nargs=2, metavar="TAG"),
        Option("--json", "print the differences as JSON", flag=True))),
    Command("recipe", "a sparkrun recipe of the tag's release: its image by digest, started "
            "through the image's entrypoint with a node's values", "sparkbake.sparkrun."
            "commands:recipe", tag="argument",
            on_release="sparkbake.sparkrun.commands:recipe_release", options=(
                Option("--out", "write it to FILE (default: stdout)", type=Path,
                       metavar="FILE"),
                Option("--model", "the model: a Hugging Face repository, or its folder on "
                       "every node (default: the node file's MODEL_HOST_PATH)",
                       metavar="MODEL"),
                Option("--env-file", "the node .env to serve with (default: the tag's smoke "
                       "suite's accept/head.env, else its serve.env)", type=Path,
                       metavar="NODE.env"),
                Option("--local", "the engine's image of the tag, not yet published (marked "
                       "so in the recipe's metadata)", flag=True))),
    # keys and verify-release read no versions.yaml: anyone can check a release
    Command("keys", "the key pair publish signs with", _handler("keys"), options=(
        Option("action", "write PATH and PATH.pub", choices=("generate",)),
        Option("path", "the private key's file", type=Path, metavar="PATH"))),
    Command("verify-release", "check a published image's signature, statements and SBOM in its "
            "registry; print what it is made of", _handler("verify_release"), options=(
                Option("reference", "HOST/PATH:TAG or HOST/PATH@sha256:<hex>"),
                Option("--key", "the publisher's public key (PATH.pub of `keys generate`)",
                       type=Path, metavar="PUB", required=True),
                Option("--against", "also check the provenance against this versions.yaml's "
                       "pins and locks for the image's tag", type=Path,
                       metavar="VERSIONS_YAML"),
                Option("--rebuild", "then build that tag from clean (each platform's image of "
                       "a release) and require the registry's digest, bit for bit; needs "
                       "--against", flag=True),
                Option("--hosts", "then check the image each of these Docker engines holds: by "
                       "the signed manifest digest, or, where a relay rewrote the manifest, by "
                       "the config digest and layer DiffIDs it names", metavar="URL,URL"),
                Option("--image", "with --hosts: the name the nodes hold the image under "
                       "(default: the signed digest, else its config digest)", metavar="REF"),
                json_of("the statements (with --hosts, each node's check and its identity)"))),
)

SPARKRUN = (  # sparkbake's builder for sparkrun (src/sparkbake/sparkrun_plugin)
    Command("sparkrun-plugin-path", "the folder of sparkbake's builder plugin, to list under "
            "sparkrun's plugins.paths", "sparkbake.sparkrun_plugin:plugin_path"),
)

# in this order, the order of --help and of `nox -l`
COMMANDS: tuple[Command, ...] = (
    Command("tags", "every tag: platform, series, built, smoked, published", _handler("tags"),
            options=(Option("--json", "print the list as JSON", flag=True),)),
    *BUILD, *IMAGE, *CLUSTER, *HOUSEKEEPING, *SERIES_TOOLS, *RELEASES, *SPARKRUN,
)


def by_name(name: str) -> Command:
    [command] = [command for command in COMMANDS if command.name == name]
    return command
