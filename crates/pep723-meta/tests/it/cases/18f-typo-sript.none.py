# /// sript
# [tool.python-sandbox]
# net = "off"
# ///
