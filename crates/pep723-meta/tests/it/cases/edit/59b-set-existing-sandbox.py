# /// script
# [tool.python-sandbox]
# net = "off"  # nothing to fetch
# ///
