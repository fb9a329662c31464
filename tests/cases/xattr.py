"""The seccomp wall: extended attributes cannot be set (`security.capability` would be a file
capability leaving through the workspace; seccomp cannot read the name, so none at all), and the
refusal reads as "no xattrs here" (EOPNOTSUPP) so programs carry on."""
import errno

write("x")
os.symlink("x", "l")
for path in ("x", "/tmp/x"):
    if path.startswith("/tmp"):
        write(path)
    for name in ("user.conformance", "security.capability", "trusted.conformance"):
        try:
            os.setxattr(path, name, b"\x01\x00\x00\x02")
        except OSError as e:
            expect(f"setxattr {path} {name} refused with EOPNOTSUPP", e.errno == errno.EOPNOTSUPP,
                   f"errno {e.errno}")
        else:
            print(f"LEAK setxattr {path} {name}: succeeded")
for label, fn in (
    ("lsetxattr", lambda: os.setxattr("l", "user.conformance", b"1", follow_symlinks=False)),
    ("fsetxattr", lambda: os.setxattr(os.open("x", os.O_RDONLY), "user.conformance", b"1")),
):
    try:
        fn()
    except OSError as e:
        expect(f"{label} refused with EOPNOTSUPP", e.errno == errno.EOPNOTSUPP, f"errno {e.errno}")
    else:
        print(f"LEAK {label}: succeeded")
done()
