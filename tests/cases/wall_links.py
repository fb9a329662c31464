"""Links in the workspace don't open the walls: ./h -> $HOME, ./e -> /etc, ./t -> host /tmp dir are
planted by the runner; ./l is made here; hard links to files outside fail."""
name = f"python-sandbox-conformance-{CTX['tag']}"
must_fail("read through ./h -> $HOME", lambda: read("h/.ssh/id_rsa"))
must_fail("read through ./t -> host /tmp", lambda: read("t/secret.txt"))
must_fail("write through ./e -> /etc", lambda: write(f"e/{name}"))
print("write through ./h:", attempt(lambda: write(f"h/{name}") and "written"))
print("write through ./t:", attempt(lambda: write(f"t/{name}") and "written"))
must_work("symlink ./l -> host /tmp dir", lambda: os.symlink(CTX["host_tmp"], "l"))
print("write through ./l:", attempt(lambda: write(f"l/{name}") and "written"))
must_fail("hard link /etc/passwd into cwd", lambda: os.link("/etc/passwd", "hl"))
must_fail("hard link a host /tmp secret into cwd", lambda: os.link(CTX["host_tmp_secret"], "hl2"))
done()
