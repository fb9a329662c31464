"""Extra mounts, given as `ro:PATH` / `rw:PATH` arguments: ro is readable, not writable; rw is writable."""
for spec in sys.argv[1:]:
    mode, _, path = spec.partition(":")
    if mode == "ro":
        data = must_work(f"read the :ro mount {path}", lambda path=path: read(os.path.join(path, "data.txt")))
        require(f":ro data intact in {path}", data == b"read-only data\n", repr(data))
        must_fail(f"write into the :ro mount {path}", lambda path=path: write(os.path.join(path, "written.txt")))
        must_fail(f"delete from the :ro mount {path}", lambda path=path: os.remove(os.path.join(path, "data.txt")))
    else:
        must_work(f"write into the :rw mount {path}",
                  lambda path=path: write(os.path.join(path, "written.txt"), b"from the sandbox\n"))
done()
