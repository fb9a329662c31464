"""Outside the workspace: the system is read-only, /tmp is private, /etc/shadow and the host's /tmp
are unreadable, and nothing written anywhere else shows up on the host."""
name = f"python-sandbox-conformance-{CTX['tag']}"
try:
    shadow = read("/etc/shadow")
except OSError as e:
    print(f"ok read /etc/shadow: {type(e).__name__} errno={e.errno}")
else:
    # A container image's own /etc/shadow may be readable; the runner checks it is not the host's
    # (by digest), and it must hold no password hashes.
    import hashlib
    print(f"shadow-sha256: {hashlib.sha256(shadow).hexdigest()}")
    fields = [line.split(b":") for line in shadow.splitlines()]
    hashed = [f[0].decode(errors="replace") for f in fields if len(f) > 1 and f[1].startswith(b"$")]
    expect("no password hashes in a readable /etc/shadow", not hashed, f"hashes for {hashed}")
must_fail("read a host /tmp secret", lambda: read(CTX["host_tmp_secret"]))
hidden("ls the host /tmp dir", CTX["host_tmp"])
for d in ("/etc", "/usr", "/var", "/"):
    must_fail(f"write {d}", lambda d=d: write(os.path.join(d, name)))
must_fail("write next to the workspace", lambda: write(os.path.join(CTX["case_root"], name)))
# /tmp is the sandbox's own: writing may work, the runner checks the host's /tmp stays clean.
print("write /tmp:", attempt(lambda: write(os.path.join("/tmp", name)) and "written"))
print("write host /tmp dir:", attempt(lambda: write(os.path.join(CTX["host_tmp"], name)) and "written"))
done()
