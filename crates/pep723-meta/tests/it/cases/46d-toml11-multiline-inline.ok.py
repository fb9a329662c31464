# /// script
# [tool.demo]
# t = {
#   a = 1
# }
# ///
