# /// script
# [tool.demo]
# s = "\x41"
# ///
