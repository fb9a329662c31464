# /// script
# [tool.python-sandbox]
# image = 1
# runtime-class = ["gvisor"]
# ///
