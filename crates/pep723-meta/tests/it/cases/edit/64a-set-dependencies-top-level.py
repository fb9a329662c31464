# /// script
# requires-python = ">=3.11"
# dependencies = ["old"]  # keep me
#
# [tool.python-sandbox]
# net = "off"
# ///
