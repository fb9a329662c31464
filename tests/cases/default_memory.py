"""No `--memory`: the default (2 GiB) stops a memory hog. It takes 256 MiB at a time, every page
written, up to 3 GiB at most (so that a run without the default cannot hurt the host): under
an rlimit the allocation fails (MemoryError) and the script goes on; under a cgroup the kernel
kills it (137). A run that got all 3 GiB says `unbounded`."""
chunks = []
try:
    for _ in range(12):
        chunks.append(b"\x01" * (256 << 20))
except MemoryError:
    print(f"ok memory hog stopped by the default after {len(chunks) * 256} MiB: MemoryError")
else:
    print(f"unbounded: the memory hog got {len(chunks) * 256} MiB")
del chunks
done()
