# /// script
# [tool.demo]
# s = "\e[1m"
# ///
