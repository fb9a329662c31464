"""`--memory 256m`: a 1 GiB allocation (every page touched) must not succeed. Under an rlimit
(`RLIMIT_DATA`) Python gets MemoryError and goes on; under a cgroup the kernel kills it (137)."""
try:
    block = bytearray(1 << 30)
except MemoryError:
    print("ok 1 GiB under --memory 256m: MemoryError")
else:
    print(f"LEAK 1 GiB under --memory 256m: allocated {len(block)} bytes")
done()
