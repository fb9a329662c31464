"""What an agent sees through the real `mcp` Python SDK: progress, pictures, the net-off note.

Usage: mcp_agent_view.py BINARY WORKSPACE HOME. HOME must be fresh (an empty environment
cache), so that the first run installs its dependency and reports it. Checks that:

- `run_script` and `session_run` send progress notifications for the steps of installing a
  dependency when the call carries a progress token, and none on a warm call;
- `run_script` with `return_images: true` returns the PNG the script wrote as an MCP image (the
  same bytes) and its SVG as text, with no `structuredContent` beside them;
- `read_file` returns a PNG as an image, an SVG and other text as text, other bytes as base64
  with their MIME type;
- a script that fails on a name lookup with the network off gets the note saying so, in
  `run_script` and in `session_run`.

Prints `SKIPPED: ...` and exits 0 when no engine can run a script; any failed check is an
AssertionError (exit 1).
"""

import asyncio
import base64
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from mcp_client import start_session, structured

# A 1x1 PNG written with the standard library only, so the check needs no package.
MAKE_PICTURES = r'''
import struct, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b""))
import os
os.makedirs("plots", exist_ok=True)
open("plots/dot.png", "wb").write(png)
open("plots/line.svg", "w").write('<svg xmlns="http://www.w3.org/2000/svg"><line x2="9"/></svg>')
open("data.csv", "w").write("a,b\n1,2\n")
open("blob.bin", "wb").write(bytes(range(256)))
print(png.hex())
'''

WITH_DEPENDENCY = '# /// script\n# dependencies = ["six"]\n# ///\nimport six\nprint(six.PY3)\n'

OFFLINE = 'import socket\nsocket.getaddrinfo("pypi.org", 443)\n'


def mime(block):
    return getattr(block, "mime_type", None) or getattr(block, "mimeType", None)


def answer(result):
    """The JSON answer: structured, or (beside images) the first text block."""
    value, err = structured(result)
    if value is None:
        value = json.loads(result.content[0].text)
    return value, err


class Progress:
    def __init__(self):
        self.messages = []

    async def __call__(self, progress, total, message):
        self.messages.append((progress, message))


async def main(binary, workspace, home):
    env = dict(os.environ, HOME=home, NO_COLOR="1")
    params = StdioServerParameters(command=binary, args=["mcp"], env=env, cwd=workspace)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()

            # Progress of a cold run: one notification per step, counting up, messages set.
            cold = Progress()
            result = await session.call_tool(
                "run_script", {"code": WITH_DEPENDENCY}, progress_callback=cold)
            v, err = structured(result)
            if err and v.get("error", "").startswith("no isolation engine"):
                print("SKIPPED: mcp agent view: no engine here")
                return
            assert not err and v["exit_code"] == 0 and v["stdout"] == "True\n", v
            assert cold.messages, "a cold run sent no progress"
            counts = [p for p, _ in cold.messages]
            assert counts == sorted(set(counts)), cold.messages
            assert all(m for _, m in cold.messages), cold.messages
            assert any("dependenc" in m for _, m in cold.messages), cold.messages
            warm = Progress()
            result = await session.call_tool(
                "run_script", {"code": WITH_DEPENDENCY}, progress_callback=warm)
            v, err = structured(result)
            assert not err and v["exit_code"] == 0, v
            assert warm.messages == [], f"a warm run reported steps: {warm.messages}"

            # Pictures a script wrote come back as pictures.
            result = await session.call_tool(
                "run_script", {"code": MAKE_PICTURES, "return_images": True})
            assert structured(result)[0] is None, result
            v, err = answer(result)
            assert not err and v["exit_code"] == 0, v
            png = bytes.fromhex(v["stdout"].strip())
            kinds = [c.type for c in result.content]
            assert kinds == ["text", "image", "text"], kinds
            image = result.content[1]
            assert mime(image) == "image/png", mime(image)
            assert base64.b64decode(image.data) == png
            assert result.content[2].text.startswith("<svg"), result.content[2].text
            shown = [(i["path"], i["mime_type"]) for i in v["images"]]
            assert shown == [("plots/dot.png", "image/png"),
                             ("plots/line.svg", "image/svg+xml")], v["images"]
            assert v["images_skipped"] == [], v
            # Without asking, the answer is as before: structured, no images.
            result = await session.call_tool("run_script", {"code": "print(1)"})
            v, err = structured(result)
            assert v is not None and "images" not in v, v
            assert [c.type for c in result.content] == ["text"], result.content

            # The network off: the failure is explained.
            v, err = structured(await session.call_tool(
                "run_script", {"code": OFFLINE, "net": "off"}))
            assert not err and v["exit_code"] == 1, v
            assert any("network is off" in n and 'net: "on"' in n for n in v["notes"]), v["notes"]
            v, err = structured(await session.call_tool("run_script", {"code": OFFLINE + "1/0\n"}))
            assert not any("network is off" in n for n in v["notes"]), v["notes"]

            sid = await start_session(session, {"ttl": "5m"}, "mcp agent view sessions")
            if sid is None:
                return
            try:
                # read_file: each kind as it should reach a model.
                result = await session.call_tool("read_file", {"id": sid, "path": "plots/dot.png"})
                assert [c.type for c in result.content] == ["text", "image"], result.content
                assert mime(result.content[1]) == "image/png"
                assert base64.b64decode(result.content[1].data) == png
                v, err = answer(result)
                assert not err and v["mime_type"] == "image/png" and v["size"] == len(png), v
                v, err = structured(await session.call_tool(
                    "read_file", {"id": sid, "path": "plots/line.svg"}))
                assert not err and v["mime_type"] == "image/svg+xml", v
                assert v["content"].startswith("<svg"), v
                v, err = structured(await session.call_tool(
                    "read_file", {"id": sid, "path": "data.csv"}))
                assert not err and v["content"] == "a,b\n1,2\n" and v["mime_type"] == "text/plain", v
                v, err = structured(await session.call_tool(
                    "read_file", {"id": sid, "path": "blob.bin"}))
                assert not err and v["encoding"] == "base64", v
                assert v["mime_type"] == "application/octet-stream", v
                assert base64.b64decode(v["content"]) == bytes(range(256)), v

                # session_run installs the dependency in the session, reported as progress.
                steps = Progress()
                result = await session.call_tool(
                    "session_run", {"id": sid, "code": WITH_DEPENDENCY}, progress_callback=steps)
                v, err = structured(result)
                assert not err and v["stdout"] == "True\n", v
                assert [m for _, m in steps.messages] == [
                    "installing 1 dependency in the session"], steps.messages
                again = Progress()
                await session.call_tool(
                    "session_run", {"id": sid, "code": WITH_DEPENDENCY}, progress_callback=again)
                assert again.messages == [], again.messages
            finally:
                await session.call_tool("session_stop", {"id": sid})

            sid = await start_session(session, {"ttl": "5m", "net": "off"}, "mcp agent view")
            try:
                v, err = structured(await session.call_tool(
                    "session_run", {"id": sid, "code": OFFLINE}))
                assert not err and v["exit_code"] == 1, v
                assert any("network is off" in n and "session_start" in n
                           for n in v["notes"]), v
            finally:
                await session.call_tool("session_stop", {"id": sid})
            print("ok: mcp agent view")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
