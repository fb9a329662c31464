"""A minimal /dev works; device nodes cannot be made, FIFOs can (srt cases 7, 29)."""
import errno
import stat

must_work("write /dev/null", lambda: write("/dev/null"))
require("read /dev/zero", must_work("open /dev/zero", lambda: open("/dev/zero", "rb").read(16)) == b"\0" * 16)
for dev in ("/dev/random", "/dev/urandom"):
    data = must_work(f"open {dev}", lambda dev=dev: open(dev, "rb").read(16))
    require(f"read {dev}", data is not None and len(data) == 16, repr(data))
try:
    write("/dev/full")
    print("BROKEN /dev/full: a write succeeded")
except OSError as e:
    require("/dev/full gives ENOSPC", e.errno == errno.ENOSPC, f"{type(e).__name__} errno={e.errno}")
must_fail("mknod a char device (1, 3) in cwd", lambda: os.mknod("d", 0o600 | stat.S_IFCHR, os.makedev(1, 3)))
must_work("mkfifo in cwd", lambda: os.mkfifo("p"))
done()
