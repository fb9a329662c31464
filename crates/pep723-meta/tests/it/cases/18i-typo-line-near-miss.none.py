#/// scritp
# [tool.python-sandbox]
# net = "off"
# ///
