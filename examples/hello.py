# /// script
# requires-python = ">=3.9"
# dependencies = []
#
# [tool.python-sandbox]
# net = "off"
# ///
"""Prints a greeting and proves what the sandbox hides."""

import os
import sys

print(f"hello from python {sys.version.split()[0]} in a sandbox")
print(f"HOME={os.environ.get('HOME')!r}, entries in it: {len(os.listdir(os.path.expanduser('~')))}")
