# /// script
# dependencies = []
# ///
# The settings live in tool.python-sandbox, see the docs.
# A [tool.python-sandbox] table goes in the block above.
x = "[tool.python-sandbox]"
