# /// script
# dependencies = []
#
# [tool.python-sandbox]
# net = "off"
# ///
