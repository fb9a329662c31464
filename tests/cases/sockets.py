"""Host sockets stay unreachable: container engines, containerd, D-Bus, an ssh agent in /tmp and
one in $HOME (the runner listens on the last two and checks nothing connected)."""
for path in CTX["sockets"]:
    must_fail(f"connect {path}", lambda path=path: connect_unix(path))
hidden("ls /run/user", "/run/user")
done()
