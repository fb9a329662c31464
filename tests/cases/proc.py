"""/proc shows only the sandbox's processes (srt case 10): no host process, not even the runner."""
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
runner = CTX["runner_exe_reversed"][::-1]
for pid in pids:
    try:
        cmd = read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        continue
    print(f"info: pid {pid}: {cmd[:100]}")
    expect(f"pid {pid} is not the host runner", runner not in cmd, cmd[:200])
expect("only a handful of pids", len(pids) <= 12, f"{len(pids)} pids visible")
done()
