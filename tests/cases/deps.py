"""A declared dependency is installed before the run and importable; the environment stays read-only."""
import six

print(f"six: {six.__version__}")
where = os.path.dirname(os.path.realpath(six.__file__))
must_fail("write next to six", lambda: write(os.path.join(where, f"conformance-{CTX['tag']}")))


def resolve():
    socket.getaddrinfo("pypi.org", 443)
    return "resolved"


print("dns:", attempt(resolve))
done()
