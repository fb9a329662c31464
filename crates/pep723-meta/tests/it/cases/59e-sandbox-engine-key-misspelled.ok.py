# /// script
# [tool.python-sandbox]
# runtime-clas = "gvisor"
# ///
