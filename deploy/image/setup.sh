#!/bin/sh
# Finishes the python-sandbox runtime image from inside its root filesystem, as root. Both builds run it:
# the Containerfile (`RUN`, after apt installed $DEBIAN_PACKAGES) and `cargo xtask image` (mmdebstrap
# customize hook, chrooted), so the two images cannot drift apart. It expects versions.env next to it and
# uses uv.whl there when present (the xtask caches the download), else downloads the pinned wheel.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"

# Corporate CAs copied to /usr/local/share/ca-certificates must be in the bundle that SSL_CERT_FILE names.
update-ca-certificates >/dev/null
# The same bundle at the path every engine's SSL_CERT_FILE names (sandbox_core::SANDBOX_CA_BUNDLE):
# docker and podman bind the host's bundle over it, a pod (which cannot see the host) reads this copy.
install -D -m 0644 /etc/ssl/certs/ca-certificates.crt /etc/python-sandbox/ca-certificates.crt

arch=$(dpkg --print-architecture)
case "$arch" in
amd64) url=$UV_WHEEL_AMD64 sha256=$UV_SHA256_AMD64 ;;
arm64) url=$UV_WHEEL_ARM64 sha256=$UV_SHA256_ARM64 ;;
*)
    echo "error: no pinned uv wheel for architecture \`$arch\`" >&2
    echo "hint: add UV_WHEEL_* and UV_SHA256_* for it to versions.env" >&2
    exit 1
    ;;
esac
wheel=$here/uv.whl
if [ ! -f "$wheel" ]; then
    python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$wheel"
fi
echo "$sha256  $wheel" | sha256sum --check --quiet -

# A wheel is a zip; the image's own Python unpacks it, so neither build needs unzip.
python3 - "$wheel" <<'PY'
import os, shutil, sys, zipfile

with zipfile.ZipFile(sys.argv[1]) as wheel:
    for name in wheel.namelist():
        if name.endswith((".data/scripts/uv", ".data/scripts/uvx")):
            dest = "/usr/local/bin/" + name.rsplit("/", 1)[1]
            with wheel.open(name) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
            os.chmod(dest, 0o755)
PY
installed=$(/usr/local/bin/uv --version)
case "$installed" in
"uv $UV_VERSION "* | "uv $UV_VERSION") ;;
*)
    echo "error: the wheel installed \`$installed\`, versions.env pins $UV_VERSION" >&2
    exit 1
    ;;
esac

# The environment a script without dependencies runs in (engine-oci's ENV_MOUNT): an empty venv on
# the image's interpreter, so every run has a VIRTUAL_ENV, on every engine, with or without
# dependencies (a prepared environment volume is mounted over it). Root's, read-only to the user.
/usr/local/bin/uv venv --quiet --relocatable --no-cache --python /usr/bin/python3 /opt/python-sandbox/env

# Written directly: the minimal rootfs has no passwd package, and this is all useradd would do.
if ! grep -q "^$SANDBOX_USER:" /etc/passwd; then
    echo "$SANDBOX_USER:x:$SANDBOX_UID:$SANDBOX_UID:python-sandbox:/home/$SANDBOX_USER:/bin/sh" >>/etc/passwd
    echo "$SANDBOX_USER:x:$SANDBOX_UID:" >>/etc/group
    echo "$SANDBOX_USER:!:0:0:99999:7:::" >>/etc/shadow
fi
install -d -m 0755 -o "$SANDBOX_UID" -g "$SANDBOX_UID" "/home/$SANDBOX_USER"

# The containers' init (pid 1, engine-oci's plan: no `--init` of the engine's own), execute-only and
# root's: a process whose program it cannot read is not dumpable, so the script (another user)
# cannot open /proc/1/mem and rewrite the init that ends its run. docker-init and catatonit, bound
# from the host readable, leave that open.
chmod 0711 /usr/bin/tini

# Nothing in a sandbox may gain privileges: no setuid/setgid programs (su, newgrp, unix_chkpwd), on
# top of the engines' no-new-privileges.
find / -xdev -type f -perm /6000 -exec chmod ug-s {} +

# Nothing installs packages at run time. apt goes through dpkg so the package database stays true; dpkg
# itself only loses its programs, and /var/lib/dpkg/status stays for image scanners.
if dpkg-query --show --showformat='${Status}' apt 2>/dev/null | grep -q 'install ok installed'; then
    dpkg --purge --force-remove-essential --force-remove-protected --force-depends apt >/dev/null
fi
rm -rf /etc/apt /var/lib/apt /var/cache/apt /var/cache/debconf/*-old /var/log/apt
rm -f /usr/bin/dpkg /usr/bin/dpkg-* /usr/sbin/dpkg-* /var/log/dpkg.log /var/log/alternatives.log
find /var/lib/dpkg -name '*-old' -delete
