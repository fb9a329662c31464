"""Writes a wheel (argv[1]) of psbx-bytecode 1.0: a module, a subpackage and a test suite."""

import base64
import hashlib
import sys
import zipfile

FILES = {
    "psbx_bytecode/__init__.py": "OK = 1\n",
    "psbx_bytecode/core/__init__.py": "X = 2\n",
    "psbx_bytecode/tests/__init__.py": "",
    "psbx_bytecode/tests/test_ok.py": "def test(): pass\n",
    "psbx_bytecode-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: psbx-bytecode\nVersion: 1.0\n",
    "psbx_bytecode-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}

record = []
with zipfile.ZipFile(sys.argv[1], "w") as wheel:
    for name, text in FILES.items():
        data = text.encode()
        wheel.writestr(name, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("psbx_bytecode-1.0.dist-info/RECORD,,")
    wheel.writestr("psbx_bytecode-1.0.dist-info/RECORD", "\n".join(record) + "\n")
