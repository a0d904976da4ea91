"""The compile farm's Unix-socket bridge: how a builder with `--network none` reaches the farm.

A folder of sockets is mounted into the builder, one socket per farm port, named PORT.sock.
`host FOLDER PORT...` (run on the host by `compile-farm up`) listens on FOLDER/PORT.sock and
dials 127.0.0.1:PORT, the scheduler or a server. `container FOLDER` (run in the builder)
listens on 127.0.0.1:PORT for each socket it finds and dials the socket: sccache's client
dials its own loopback, for the scheduler and for each server (they advertise loopback).
Standard library only: it runs on the host and is mounted into the builder.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path

CHUNK = 1 << 16


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end of stream, then end the other side's writing."""
    with contextlib.suppress(OSError):
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    await asyncio.sleep(0)


async def join(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
               peer: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
    far_reader, far_writer = peer
    await asyncio.gather(pipe(reader, far_writer), pipe(far_reader, writer))
    for side in (writer, far_writer):
        side.close()


async def host_side(folder: Path, ports: list[int]) -> None:
    """FOLDER/PORT.sock -> 127.0.0.1:PORT, for each port."""
    os.chdir(folder)
    servers = []
    for port in ports:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         port: int = port) -> None:
            try:
                peer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                writer.close()
                return
            await join(reader, writer, peer)

        path = folder / f"{port}.sock"
        path.unlink(missing_ok=True)
        # named from inside the folder: a socket's path has at most 107 bytes
        servers.append(await asyncio.start_unix_server(handle, path.name))
    print(f"farm bridge: {folder}/PORT.sock -> 127.0.0.1:PORT for {ports}", flush=True)
    await asyncio.gather(*(server.serve_forever() for server in servers))


async def container_side(folder: Path) -> None:
    """127.0.0.1:PORT -> FOLDER/PORT.sock, for each socket in the folder."""
    servers = []
    ports = sorted(int(sock.stem) for sock in folder.glob("*.sock") if sock.stem.isdigit())
    for port in ports:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         port: int = port) -> None:
            try:
                peer = await asyncio.open_unix_connection(str(folder / f"{port}.sock"))
            except OSError:
                writer.close()
                return
            await join(reader, writer, peer)

        servers.append(await asyncio.start_server(handle, "127.0.0.1", port))
    print(f"farm bridge: 127.0.0.1:PORT -> {folder}/PORT.sock for {ports}", flush=True)
    ready = os.environ.get("SPARKBAKE_FARM_BRIDGE_READY")
    if ready:
        Path(ready).write_text(" ".join(map(str, ports)) + "\n")
    await asyncio.gather(*(server.serve_forever() for server in servers))


def main(args: list[str]) -> int:
    if len(args) >= 2 and args[0] == "host":
        asyncio.run(host_side(Path(args[1]), [int(port) for port in args[2:]]))
    elif len(args) == 2 and args[0] == "container":
        asyncio.run(container_side(Path(args[1])))
    else:
        print("usage: farm_bridge.py host FOLDER PORT... | container FOLDER", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
