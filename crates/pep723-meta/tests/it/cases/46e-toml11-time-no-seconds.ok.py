# /// script
# [tool.demo]
# t = 1979-05-27T07:32Z
# ///
