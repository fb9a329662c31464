"""The real `mcp` Python SDK's stdio client against `python-sandbox mcp`.

Usage: mcp_client.py BINARY WORKSPACE HOME. Lists the tools, runs a script, hits the approval
result and drives a session (start, exec, write/read/list files, stop). Prints `SKIPPED: ...`
and exits 0 when no engine can hold a session; any failed check is an AssertionError (exit 1).
"""

import asyncio
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def structured(result):
    value = getattr(result, "structured_content", None)
    if value is None:
        value = getattr(result, "structuredContent", None)
    is_error = getattr(result, "is_error", None)
    if is_error is None:
        is_error = getattr(result, "isError", False)
    return value, bool(is_error)


async def start_session(session, arguments, what):
    """A session's id, or None (after the `SKIPPED:` line) when no engine can hold one."""
    v, err = structured(await session.call_tool("session_start", arguments))
    if err and v.get("error", "").startswith("no engine that can hold a session"):
        print(f"SKIPPED: {what}: no session engine here")
        return None
    assert not err, v
    return v["id"]


async def main(binary, workspace, home):
    env = dict(os.environ, HOME=home, NO_COLOR="1")
    params = StdioServerParameters(command=binary, args=["mcp"], env=env, cwd=workspace)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name for t in (await session.list_tools()).tools}
            want = {"run_script", "check_script", "session_start", "session_exec", "session_run",
                    "read_file", "write_file", "list_files", "start_service", "session_stop",
                    "detect"}
            assert tools == want, tools

            ssh = os.path.join(home, ".ssh")
            v, err = structured(await session.call_tool(
                "run_script", {"code": "print(1)", "mounts": [ssh + ":ro"]}))
            assert not err and v["status"] == "needs_approval", v
            assert v["crossings"][0]["path"] == ssh, v

            v, err = structured(await session.call_tool("run_script", {"code": "print(6 * 7)"}))
            if err and v.get("error", "").startswith("no isolation engine"):
                print("SKIPPED: mcp sdk client: no engine here")
                return
            assert not err and v["exit_code"] == 0 and v["stdout"] == "42\n", v

            sid = await start_session(session, {"ttl": "5m"}, "mcp sdk client sessions")
            if sid is None:
                return
            try:
                v, err = structured(await session.call_tool(
                    "session_exec", {"id": sid, "command": ["sh", "-c", "echo hi from exec"]}))
                assert not err and v["exit_code"] == 0 and v["stdout"] == "hi from exec\n", v
                v, err = structured(await session.call_tool(
                    "write_file", {"id": sid, "path": "note.txt", "content": "hello file"}))
                assert not err, v
                v, err = structured(await session.call_tool("read_file", {"id": sid, "path": "note.txt"}))
                assert not err and v["content"] == "hello file", v
                v, err = structured(await session.call_tool("list_files", {"id": sid}))
                assert not err and "note.txt" in [e["name"] for e in v["entries"]], v
                v, err = structured(await session.call_tool(
                    "session_run", {"id": sid, "code": "print(open('note.txt').read().upper())"}))
                assert not err and v["stdout"] == "HELLO FILE\n", v
            finally:
                v, err = structured(await session.call_tool("session_stop", {"id": sid}))
            assert not err and v["stopped"] is True, v
            v, err = structured(await session.call_tool(
                "session_exec", {"id": sid, "command": ["true"]}))
            assert err, f"a stopped session still answers: {v}"
            print("ok: mcp sdk client")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
