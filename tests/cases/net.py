"""Network facts; the runner matches them per engine and mode."""


def resolve():
    socket.getaddrinfo("pypi.org", 443)
    return "resolved"


print("loopback:", attempt(lambda: connect_tcp("127.0.0.1", CTX["tcp_port"])))
print("abstract:", attempt(lambda: connect_unix("\0" + CTX["abstract_name"])))
print("dns:", attempt(resolve))

print("host-addresses:", host_addresses())
# Cloud metadata (link-local): an unreachable route with the network on, on every engine; a
# bridge that routes it times out here (nothing answers) and would connect on a cloud VM.
print("metadata:", attempt(lambda: socket.create_connection(("169.254.169.254", 80), 3) and "connected"))
names = sorted(name for _, name in socket.if_nameindex())
print("interfaces:", "lo-only" if names == ["lo"] else "external", names)
done()
