"""A network allowlist (`pypi.org` and `*.pythonhosted.org:443`): listed names only, checked by
name. On this machine every registry answers at one proxy address, so only the name tells
pypi.org from registry.npmjs.org."""

import http.client
import ssl
import urllib.request


def fetch(url):
    return urllib.request.urlopen(url, timeout=30).status


def hello(ip, name):
    """A TLS handshake with `ip` naming `name` (None: no SNI) and one request."""
    ctx = ssl.create_default_context()
    if name is None:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection((ip, 443), timeout=15) as s:
        with ctx.wrap_socket(s, server_hostname=name) as t:
            t.sendall(b"HEAD / HTTP/1.1\r\nHost: registry.npmjs.org\r\nConnection: close\r\n\r\n")
            return t.recv(64) or "closed"


def second_host():
    """Two requests on one kept-alive connection to pypi.org:80, the second for another host."""
    c = http.client.HTTPConnection("pypi.org", 80, timeout=15)
    c.request("GET", "/simple/six/")
    c.getresponse().read()
    c.request("GET", "/", headers={"Host": "registry.npmjs.org"})
    return c.getresponse().read(64)


must_work("listed name", lambda: fetch("https://pypi.org/simple/six/"))
must_work("listed suffix", lambda: fetch("https://files.pythonhosted.org/"))
must_fail("unlisted name resolves", lambda: socket.getaddrinfo("registry.npmjs.org", 443))
ip = socket.getaddrinfo("pypi.org", 443, socket.AF_INET)[0][4][0]
must_fail("unlisted name on a listed name's address (SNI)", lambda: hello(ip, "registry.npmjs.org"))
must_fail("no name on a listed name's address", lambda: hello(ip, None))
must_fail("address no DNS answer named", lambda: socket.create_connection(("192.0.2.1", 443), 10))
must_fail("another host on a kept-alive connection", second_host)
port = CTX["tcp_port"]
for addr in CTX["host_addresses"]:
    must_fail(f"host address {addr}", lambda: connect_tcp(addr, port))
done()
