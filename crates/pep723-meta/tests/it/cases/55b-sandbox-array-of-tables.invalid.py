# /// script
# [[tool.python-sandbox]]
# net = "off"
# ///
