"""`--tmpfs-size 16m` caps /tmp: 8 MiB fit, 32 MiB end with ENOSPC (not a filled host disk or
memory)."""
import errno

chunk = b"\0" * (1 << 20)


def fill(path, mib):
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(chunk)
            f.flush()
    return f"{mib} MiB written"


must_work("write 8 MiB to /tmp", lambda: fill("/tmp/small", 8))
os.remove("/tmp/small")
try:
    fill("/tmp/big", 32)
except OSError as e:
    expect("32 MiB to /tmp fails with ENOSPC", e.errno == errno.ENOSPC, f"errno {e.errno}")
else:
    print("LEAK 32 MiB to /tmp: written despite --tmpfs-size 16m")
done()
