# /// script
# dependencies = []
#
# [tool.python-sandbox]
# net = "off"
# publish = [8000]
# ///
