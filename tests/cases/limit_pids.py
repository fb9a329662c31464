"""`--pids-limit 16`: a fork bomb of 64 is stopped (fork fails with EAGAIN) and the script goes
on; the children wait for the parent, so they all count at once."""
import errno
import time

children = []
refused = None
for _ in range(64):
    try:
        pid = os.fork()
    except OSError as e:
        refused = e
        break
    if pid == 0:
        time.sleep(3)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
expect(
    "fork bomb of 64 under --pids-limit 16 stopped",
    refused is not None and refused.errno == errno.EAGAIN and len(children) < 16,
    f"{len(children)} children, last error {refused!r}",
)
done()
