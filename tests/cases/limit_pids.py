"""A fork bomb of at most N children (argv: N, the limit it runs under, the most children that
limit leaves): it must be stopped (fork fails with EAGAIN) before that many, and the script goes
on. The children wait for the parent, so they all count at once; N bounds a run that has no
such limit, which says `unbounded`."""
import errno
import time

count, under, most = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
children = []
refused = None
for _ in range(count):
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
if refused is None:
    print(f"unbounded: the fork bomb got {len(children)} children under {under}")
else:
    expect(
        f"fork bomb of {count} under {under} stopped",
        refused.errno == errno.EAGAIN and len(children) < most,
        f"{len(children)} children, last error {refused!r}",
    )
done()
