"""Serves one greeting on the published port; the runner connects from the host during the run."""
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", CTX["publish_port"]))
srv.listen(4)
srv.settimeout(60)
print("listening")
while True:
    conn, _ = srv.accept()
    with conn:
        conn.sendall(f"hello {CTX['tag']}\n".encode())
        # Engines with a userland proxy may connect early; only the runner says `bye`.
        conn.settimeout(5)
        try:
            if conn.recv(16).startswith(b"bye"):
                break
        except OSError:
            pass
print("served")
# A published port's connections come from the container's gateway, the host: it stays out of
# reach for connections the script opens.
print("host-addresses:", host_addresses())
done()
